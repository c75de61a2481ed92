"""MedianStoppingRule (kubetune_operator.schedulers.median_stopping): Ray 2.x rule and defaults."""

from __future__ import annotations

import math
import random

import pytest

from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.schedulers import CONTINUE, PAUSE, STOP
from kubetune_operator.schedulers.median_stopping import MedianStoppingRule


def msr(**params):
    params.setdefault("metric", "acc")
    params.setdefault("mode", "max")
    params.setdefault("time_attr", "training_iteration")
    params.setdefault("grace_period", 1)
    params.setdefault("min_samples_required", 2)
    return create_scheduler("median_stopping_rule", **params)


def feed(scheduler, trial_id: str, values: list[float], start: int = 1) -> list[str]:
    return [
        scheduler.on_trial_result(trial_id, {"training_iteration": t, "acc": v}) for t, v in enumerate(values, start)
    ]


def test_defaults_are_ray_2x():
    scheduler = create_scheduler("median_stopping_rule", metric="acc", mode="max")
    assert (scheduler.time_attr, scheduler.grace_period, scheduler.min_samples_required, scheduler.hard_stop) == (
        "time_total_s",
        60.0,
        3,
        True,
    )


def test_stops_a_trial_whose_best_is_below_the_median_of_running_means():
    scheduler = msr()
    feed(scheduler, "a", [1.0, 1.0, 1.0])  # running mean 1.0
    feed(scheduler, "b", [0.6, 0.6, 0.6])  # running mean 0.6 -> median of {1.0, 0.6} = 0.8
    assert feed(scheduler, "c", [0.5]) == [STOP]
    assert feed(scheduler, "c", [0.1], start=2) == [CONTINUE]  # a stopped trial is not judged again
    # The trial's best value is compared, not its latest.
    assert feed(scheduler, "d", [0.85, 0.7, 0.1]) == [CONTINUE] * 3


def test_ties_and_a_good_best_value_continue():
    scheduler = msr()
    feed(scheduler, "a", [1.0, 1.0])
    feed(scheduler, "b", [0.6, 0.6])
    assert feed(scheduler, "c", [0.8, 0.1]) == [CONTINUE, CONTINUE]  # best 0.8 == median 0.8


def test_needs_enough_peers_that_got_as_far():
    def two_peers():
        scheduler = msr(min_samples_required=2)
        feed(scheduler, "a", [1.0] * 4)
        feed(scheduler, "b", [1.0] * 2)  # only got to t=2
        return scheduler

    assert feed(two_peers(), "c", [0.1]) == [STOP]  # at t=1 both peers count
    assert feed(two_peers(), "c", [0.1] * 3, start=3) == [CONTINUE] * 3  # from t=3 only "a" got as far


def test_no_decision_before_the_grace_period():
    scheduler = msr(grace_period=3)
    feed(scheduler, "a", [1.0] * 5)
    feed(scheduler, "b", [1.0] * 5)
    assert feed(scheduler, "c", [0.0] * 3) == [CONTINUE, CONTINUE, STOP]


def test_running_mean_uses_results_between_grace_period_and_now():
    scheduler = msr(grace_period=2)
    feed(scheduler, "a", [100.0, 1.0, 1.0, 9.0])  # in [2, 3]: mean 1.0 (t=1 before grace, t=4 after now)
    feed(scheduler, "b", [100.0, 1.0, 1.0, 9.0])
    assert feed(scheduler, "c", [0.0, 1.0, 1.0]) == [CONTINUE, CONTINUE, CONTINUE]  # best 1.0 == median 1.0
    scheduler = msr(grace_period=2)
    feed(scheduler, "a", [100.0, 1.0, 1.0, 9.0])
    feed(scheduler, "b", [100.0, 1.0, 1.0, 9.0])
    assert feed(scheduler, "c", [0.0, 0.9, 0.9]) == [CONTINUE, STOP, CONTINUE]


def test_minimizing():
    scheduler = msr(mode="min", metric="loss")
    for trial_id, value in (("a", 1.0), ("b", 2.0)):
        for t in (1, 2):
            scheduler.on_trial_result(trial_id, {"training_iteration": t, "loss": value})
    assert scheduler.on_trial_result("c", {"training_iteration": 1, "loss": 1.4}) == CONTINUE
    assert scheduler.on_trial_result("d", {"training_iteration": 1, "loss": 1.6}) == STOP


def test_soft_stop_pauses_once_and_never_judges_again():
    scheduler = msr(hard_stop=False)
    feed(scheduler, "a", [1.0] * 4)
    feed(scheduler, "b", [1.0] * 4)
    assert feed(scheduler, "c", [0.0, 0.0, 0.0]) == [PAUSE, CONTINUE, CONTINUE]
    assert scheduler.choose_trial_to_run(["c"]) is None  # new trials first, as Ray's FIFO order
    assert scheduler.choose_trial_to_run(["c"], search_finished=True) == "c"


def test_completed_trials_stay_peers_across_a_restart():
    scheduler = msr()
    feed(scheduler, "a", [1.0, 1.0])
    scheduler.on_trial_complete("a", {"training_iteration": 2, "acc": 1.0})
    feed(scheduler, "b", [1.0, 1.0])
    scheduler.on_trial_remove("b")  # removed trials still count, as in Ray
    restored = msr()
    restored.set_state(scheduler.get_state())
    assert feed(restored, "c", [0.5]) == [STOP]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"grace_period": -1}, "grace_period"),
        ({"min_samples_required": 0}, "min_samples_required"),
        ({"metric": None}, "metric"),
        ({"min_time_slice": 5}, "unknown parameter"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        msr(**params)


def _brute_force_decisions(results, grace, min_samples, mode):
    """The rule as written, O(all results) per result: the reference the indexed scheduler must match."""
    import statistics

    seen, stopped, decisions = {}, set(), []
    sign = 1 if mode == "max" else -1
    for trial, time, value in results:
        if trial in stopped:
            decisions.append("continue")
            continue
        seen.setdefault(trial, []).append((time, value))
        if time < grace:
            decisions.append("continue")
            continue
        means = []
        for peer, rs in seen.items():
            if peer != trial and rs[-1][0] >= time:
                window = [v for t, v in rs if grace <= t <= time]
                try:
                    mean = statistics.fmean(window) if window else math.nan
                except ValueError:  # fsum of +inf and -inf (the rule before indexing raised here)
                    mean = math.nan
                if not math.isnan(mean):
                    means.append(mean)
        own = [v for _, v in seen[trial] if not math.isnan(v)]
        if len(means) < min_samples or not own:
            decisions.append("continue")
            continue
        best = max(own) if mode == "max" else min(own)
        if sign * statistics.median(means) > sign * best:
            stopped.add(trial)
            decisions.append("stop")
        else:
            decisions.append("continue")
    return decisions


@pytest.mark.parametrize("seed", range(20))
def test_indexed_running_means_decide_as_the_rule_computed_in_full(seed):
    rng = random.Random(seed)
    mode = rng.choice(["max", "min"])
    clocks = {f"t{i}": 0.0 for i in range(rng.randint(3, 12))}
    results = []
    for _ in range(rng.randint(20, 200)):
        trial = rng.choice(list(clocks))
        clocks[trial] += rng.choice([0.5, 1.0, 2.0]) if rng.random() > 0.05 else -1.5  # now and then out of order
        value = rng.choice([math.nan, math.inf, -math.inf]) if rng.random() < 0.04 else round(rng.gauss(0, 1), 3)
        results.append((trial, clocks[trial], value))
    scheduler = MedianStoppingRule(metric="m", mode=mode, time_attr="t", grace_period=2.0, min_samples_required=2)
    ours = [scheduler.on_trial_result(trial, {"t": time, "m": value}) for trial, time, value in results]
    assert ours == _brute_force_decisions(results, 2.0, 2, mode)
