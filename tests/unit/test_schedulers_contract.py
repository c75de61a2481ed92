"""The trial-scheduler contract: every registered scheduler passes these (one fixture per implementation).

Modelled on Optuna's ``optuna/testing/pytest_storages.py``: a new scheduler
adds an entry to ``CONFIGS``. ``simulate`` plays the operator: it feeds
results round by round, applies decisions, resumes paused trials through
``choose_trial_to_run`` and ends the ones ``trials_to_stop`` names.
"""

from __future__ import annotations

import json
import math

import pytest

from kubetune_operator.algorithms import SCHEDULERS, create_scheduler
from kubetune_operator.schedulers import CHECKPOINT, CONTINUE, PAUSE, STOP, TrialScheduler

MAX_T = 9
END = 12  # a trial's own last iteration, beyond max_t
CONFIGS = {
    "fifo": {},
    "asha": {"max_t": MAX_T, "grace_period": 1, "reduction_factor": 3},
    "median_stopping_rule": {"time_attr": "training_iteration", "grace_period": 2, "min_samples_required": 2},
    "katib-medianstop": {"min_trials_required": 2, "start_step": 2},
    "hyperband": {"max_t": MAX_T, "reduction_factor": 3},
    "hyperband_bohb": {"max_t": MAX_T, "reduction_factor": 3},
    "pbt": {
        "time_attr": "training_iteration",
        "perturbation_interval": 2,
        "hyperparam_mutations": {"lr": {"loguniform": [1e-4, 1e-1]}},
    },
    "pbt_replay": {"policy": [[3, {"lr": 0.1}], [6, {"lr": 0.01}]]},
    "pb2": {"time_attr": "training_iteration", "perturbation_interval": 2, "hyperparam_bounds": {"lr": [1e-4, 1e-1]}},
}
QUALITY = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]  # nine trials; index 1 is the best


@pytest.fixture(params=sorted(CONFIGS))
def name(request) -> str:
    return request.param


def make(name: str) -> TrialScheduler:
    return create_scheduler(name, metric="acc", mode="max", **CONFIGS[name])


def result(t: int, quality: float) -> dict:
    return {"training_iteration": t, "acc": quality * t / (t + 2)}


def simulate(name: str, restart_at: int | None = None, qualities: list[float] = QUALITY) -> tuple[list, dict]:
    """Run trials to their end; return the decision log and each trial's last iteration and fate."""
    scheduler = make(name)
    ids = [f"t{i}" for i in range(len(qualities))]
    for trial_id in ids:
        scheduler.on_trial_add(trial_id)
    t = {trial_id: 0 for trial_id in ids}
    status = {trial_id: "running" for trial_id in ids}
    log = []
    for step in range(200):
        if restart_at == step:  # the operator restarts: a new scheduler from the saved state
            state = json.loads(json.dumps(scheduler.get_state(), allow_nan=False))
            scheduler = make(name)
            scheduler.set_state(state)
        running = [i for i in ids if status[i] == "running"]
        if not running and not any(s == "paused" for s in status.values()):
            break
        for trial_id in running:
            t[trial_id] += 1
            last = result(t[trial_id], qualities[ids.index(trial_id)])
            decision = scheduler.on_trial_result(trial_id, last)
            assert decision in (CONTINUE, CHECKPOINT, PAUSE, STOP)
            log.append((trial_id, t[trial_id], decision))
            if decision == STOP or (decision in (CONTINUE, CHECKPOINT) and t[trial_id] >= END):
                status[trial_id] = "stopped" if decision == STOP else "completed"
                scheduler.on_trial_complete(trial_id, last)
            elif decision == PAUSE:
                status[trial_id] = "paused"
        paused = [i for i in ids if status[i] == "paused"]
        for trial_id in scheduler.trials_to_stop(paused):
            status[trial_id] = "stopped"
            scheduler.on_trial_remove(trial_id)
        while chosen := scheduler.choose_trial_to_run([i for i in ids if status[i] == "paused"], True):
            status[chosen] = "running"
    else:
        pytest.fail(f"{name}: trials never finished: {status}")
    return log, {trial_id: (t[trial_id], status[trial_id]) for trial_id in ids}


def test_every_registered_scheduler_is_covered():
    assert set(CONFIGS) == set(SCHEDULERS)


def test_all_trials_end_and_the_best_one_is_never_cut_early(name):
    log, fate = simulate(name)
    assert all(status in ("completed", "stopped") for _, status in fate.values())
    best_t, best_status = fate["t1"]
    assert best_t >= (MAX_T if name in ("asha", "hyperband", "hyperband_bohb") else END)
    assert all(decision != STOP for trial_id, t, decision in log if trial_id == "t1" and t < MAX_T)


def test_decisions_are_reproducible_across_a_restart(name):
    reference = simulate(name)
    for step in (1, 2, 4, 7):
        assert simulate(name, restart_at=step) == reference


def test_results_without_time_or_metric_continue(name):
    scheduler = make(name)
    scheduler.on_trial_add("a")
    assert scheduler.on_trial_result("a", {"training_iteration": 100}) == CONTINUE
    assert scheduler.on_trial_result("a", {"acc": 1.0}) == CONTINUE
    assert scheduler.on_trial_result("a", {"training_iteration": 100, "time_total_s": 1e6, "acc": None}) == CONTINUE
    assert scheduler.on_trial_result("a", {"training_iteration": "x", "acc": 1.0}) == CONTINUE


def test_unknown_trials_are_tolerated(name):
    scheduler = make(name)
    assert scheduler.on_trial_result("never-added", result(1, 0.5)) in (CONTINUE, PAUSE, STOP)
    scheduler.on_trial_complete("ghost", result(1, 0.5))
    scheduler.on_trial_remove("ghost")
    scheduler.on_trial_complete("ghost-without-result")
    assert scheduler.choose_trial_to_run([]) is None
    assert scheduler.trials_to_stop([]) == []


def test_state_is_strict_json_with_non_finite_values(name):
    scheduler = make(name)
    for i, value in enumerate([math.nan, math.inf, -math.inf, 1.0]):
        scheduler.on_trial_add(f"t{i}")
        scheduler.on_trial_result(f"t{i}", {"training_iteration": 3, "time_total_s": 100, "acc": value})
    state = json.loads(json.dumps(scheduler.get_state(), allow_nan=False))
    clone = make(name)
    clone.set_state(state)
    assert json.loads(json.dumps(clone.get_state(), allow_nan=False)) == state


def test_decision_strings_are_the_collectors():
    from kubetune.env import DECISIONS

    assert {CONTINUE, PAUSE, STOP} <= set(DECISIONS)
    assert (TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP) == ("continue", "pause", "stop")


def test_mode_is_validated(name):
    with pytest.raises(ValueError, match="mode"):
        create_scheduler(name, metric="acc", mode="best", **CONFIGS[name])
