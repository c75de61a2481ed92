"""ASHA (kubetune_operator.schedulers.asha): Ray 2.x defaults, rungs, cutoffs, brackets."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.schedulers import CONTINUE, STOP
from kubetune_operator.schedulers.asha import AsyncHyperBandScheduler, nanpercentile


def asha(**params) -> AsyncHyperBandScheduler:
    params.setdefault("metric", "acc")
    params.setdefault("mode", "max")
    return create_scheduler("asha", **params)


def report(scheduler, trial_id: str, t: float, value: float, time_attr: str = "training_iteration") -> str:
    return scheduler.on_trial_result(trial_id, {time_attr: t, "acc": value})


def test_rays_worked_example_with_reduction_factor_2():
    scheduler = asha(reduction_factor=2)
    decisions = [report(scheduler, f"t{i}", 1, v) for i, v in enumerate([10, 20, 5, 15])]
    assert decisions == [CONTINUE, CONTINUE, STOP, CONTINUE]


def test_defaults_are_ray_2x():
    scheduler = asha()
    assert (scheduler.time_attr, scheduler.max_t, scheduler.grace_period, scheduler.reduction_factor) == (
        "training_iteration",
        100,
        1,
        4,
    )
    assert scheduler.stop_last_trials is True
    assert [m for m, _ in scheduler.rungs[0]] == [64, 16, 4, 1]
    assert len(scheduler.rungs) == 1


def test_rung_formula_for_several_brackets():
    scheduler = asha(brackets=3)
    assert [[m for m, _ in rungs] for rungs in scheduler.rungs] == [[64, 16, 4, 1], [64, 16, 4], [64, 16]]
    scheduler = asha(max_t=81, grace_period=1, reduction_factor=3, brackets=2)
    assert [[m for m, _ in rungs] for rungs in scheduler.rungs] == [[81, 27, 9, 3, 1], [81, 27, 9, 3]]
    scheduler = asha(max_t=20, grace_period=5, reduction_factor=2)
    assert [m for m, _ in scheduler.rungs[0]] == [20, 10, 5]


def test_minimizing_flips_the_sign():
    scheduler = asha(reduction_factor=2, mode="min")
    assert [report(scheduler, f"t{i}", 1, v) for i, v in enumerate([10, 20, 5, 15])] == [CONTINUE, STOP, CONTINUE, STOP]


def test_stop_at_max_t_unless_stop_last_trials_is_false():
    assert report(asha(max_t=10), "a", 10, 1.0) == STOP
    assert report(asha(max_t=10), "a", 11, 1.0) == STOP
    assert report(asha(max_t=10), "a", 9, 1.0) == CONTINUE
    assert report(asha(max_t=10, stop_last_trials=False), "a", 10, 1.0) == CONTINUE


def test_one_rung_per_result_the_highest_reached():
    scheduler = asha(reduction_factor=4)
    report(scheduler, "a", 20, 1.0)  # jumps past rungs 1, 4 and 16: recorded at 16 only
    recorded = {m: set(r) for m, r in scheduler.rungs[0]}
    assert recorded == {64: set(), 16: {"a"}, 4: set(), 1: set()}
    report(scheduler, "a", 21, 1.0)  # nothing new to judge: 16 is recorded, 64 not reached
    assert {m: set(r) for m, r in scheduler.rungs[0]}[16] == {"a"}


def test_a_trial_is_judged_once_per_rung_against_values_recorded_before_it():
    scheduler = asha(reduction_factor=2)
    assert report(scheduler, "a", 1, 10) == CONTINUE
    assert report(scheduler, "b", 1, 5) == STOP  # below the median of {10}
    assert report(scheduler, "b", 1.5, 1) == CONTINUE  # already judged at rung 1, rung 2 not reached
    assert report(scheduler, "b", 2, 1) == CONTINUE  # first at rung 2: no cutoff yet
    assert report(scheduler, "a", 2, 0) == STOP  # rung 2 holds {1}: 0 < 1


def test_grace_period_delays_the_first_judgement():
    scheduler = asha(grace_period=3, reduction_factor=2, max_t=48)
    report(scheduler, "a", 3, 10)
    assert report(scheduler, "b", 1, 0) == CONTINUE
    assert report(scheduler, "b", 2, 0) == CONTINUE
    assert report(scheduler, "b", 3, 0) == STOP


def test_nan_values_never_stop_and_are_ignored_by_the_cutoff():
    scheduler = asha(reduction_factor=2)
    report(scheduler, "a", 1, math.nan)
    assert report(scheduler, "b", 1, 1.0) == CONTINUE
    assert report(scheduler, "c", 1, math.nan) == CONTINUE
    assert report(scheduler, "d", 1, 0.5) == STOP  # cutoff from {1.0} only


def test_time_attr_is_configurable():
    scheduler = asha(time_attr="time_total_s", reduction_factor=2, grace_period=10, max_t=80)
    report(scheduler, "a", 10, 5, "time_total_s")
    assert report(scheduler, "b", 12, 1, "time_total_s") == STOP
    assert report(scheduler, "c", 500, 1, "training_iteration") == CONTINUE  # no time_total_s: ignored


def test_complete_records_the_final_result_without_deciding():
    scheduler = asha(reduction_factor=2)
    scheduler.on_trial_add("a")
    scheduler.on_trial_complete("a", {"training_iteration": 1, "acc": 10})
    assert report(scheduler, "b", 1, 5) == STOP


def test_bracket_choice_is_deterministic_and_weighted_like_ray():
    scheduler = asha(brackets=3)  # rung counts 4, 3, 2: weights e^0, e^-1, e^-2
    ids = [f"trial-{i}" for i in range(6000)]
    for trial_id in ids:
        scheduler.on_trial_add(trial_id)
    placement = scheduler.get_state()["trials"]
    weights = [1, math.exp(-1), math.exp(-2)]
    for bracket, weight in enumerate(weights):
        share = sum(1 for b in placement.values() if b == bracket) / len(ids)
        assert abs(share - weight / sum(weights)) < 0.03
    again = asha(brackets=3)
    for trial_id in reversed(ids):
        again.on_trial_add(trial_id)
    assert again.get_state()["trials"] == placement


def test_set_state_rejects_other_rung_layouts():
    state = asha().get_state()
    with pytest.raises(ValueError, match="rungs"):
        asha(brackets=2).set_state(state)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_t": 0}, "max_t"),
        ({"grace_period": 0}, "grace_period"),
        ({"grace_period": 200}, "grace_period"),
        ({"reduction_factor": 1}, "reduction_factor"),
        ({"brackets": 0}, "brackets"),
        ({"mode": None}, "mode"),
        ({"metric": None}, "metric"),
        ({"max_t": "10"}, "max_t"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        asha(**params)


def test_nanpercentile_matches_numpy():
    rng = random.Random(0)
    for size in (1, 2, 3, 7, 50):
        values = [rng.uniform(-5, 5) for _ in range(size)] + [math.nan] * rng.randrange(3)
        for q in (0, 25, 50, 66.67, 75, 100):
            assert nanpercentile(values, q) == pytest.approx(float(np.nanpercentile(values, q)))
    assert math.isnan(nanpercentile([math.nan], 50))
    assert nanpercentile([1.0, math.inf], 50) == math.inf
