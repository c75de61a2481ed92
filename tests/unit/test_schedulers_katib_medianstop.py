"""Katib's ``medianstop`` (``katib-medianstop``): the rule each trial is created with, judged once at its
``start_step``-th report, the mean of the succeeded trials' first averages, and the state across a restart.
The expected values are worked out by hand from Katib's service and collector (the scheduler's docstring)."""

from __future__ import annotations

import json
import math

import pytest

from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.schedulers import CONTINUE, STOP


def make(mode: str = "min", **params):
    return create_scheduler("katib-medianstop", metric="loss", mode=mode, **params)


def report(scheduler, trial: str, values: list, start: int = 1) -> list[str]:
    return [
        scheduler.on_trial_result(trial, {"training_iteration": start + i, "loss": value})
        for i, value in enumerate(values)
    ]


def test_a_trial_gets_the_rule_in_force_when_it_is_created_and_is_judged_once_at_start_step():
    scheduler = make(min_trials_required=2, start_step=3)
    scheduler.on_trial_add("a")
    assert report(scheduler, "a", [5, 4, 3, 2]) == [CONTINUE] * 4  # no rule: no trial had succeeded
    scheduler.on_trial_complete("a")  # average of its first three: 4
    scheduler.on_trial_add("b")  # one succeeded trial of the two required: no rule either
    assert report(scheduler, "b", [9, 9, 9, 9]) == [CONTINUE] * 4
    scheduler.on_trial_complete("b")  # 9
    scheduler.on_trial_add("c")  # rule (4 + 9) / 2 = 6.5
    scheduler.on_trial_add("d")  # the same rule: c has not ended yet
    # c's best at its third report is 7 > 6.5: stopped there, never before
    assert report(scheduler, "c", [8, 7, 7.5]) == [CONTINUE, CONTINUE, STOP]
    # d's best is 6.5 at its third report, a tie: it goes on, and is never judged again
    assert report(scheduler, "d", [10, 6.5, 8, 100, 100]) == [CONTINUE] * 5
    scheduler.on_trial_complete("c")  # stopped by the rule: not a succeeded trial
    scheduler.on_trial_complete("d")  # (10 + 6.5 + 8) / 3
    scheduler.on_trial_add("e")
    rule = (4 + 9 + (10 + 6.5 + 8) / 3) / 3
    assert scheduler.get_state()["rules"]["e"] == pytest.approx(rule)
    assert report(scheduler, "e", [rule + 1, rule + 0.5, rule - 0.1]) == [CONTINUE] * 3  # best < rule: goes on


def test_the_best_value_so_far_counts_not_the_latest_and_reports_lack_no_metric():
    scheduler = make(min_trials_required=1, start_step=2)
    scheduler.on_trial_add("a")
    report(scheduler, "a", [1, 3])
    scheduler.on_trial_complete("a")  # average 2
    scheduler.on_trial_add("b")
    assert scheduler.on_trial_result("b", {"training_iteration": 1, "accuracy": 0.1}) == CONTINUE  # not a report
    assert report(scheduler, "b", [1.5, 50], start=2) == [CONTINUE, CONTINUE]  # best 1.5 < 2 at the second report
    scheduler.on_trial_add("c")
    assert report(scheduler, "c", [2.5, 2.1]) == [CONTINUE, STOP]


def test_maximize_stops_below_the_rule_and_failed_trials_never_count():
    scheduler = make(mode="max", min_trials_required=1, start_step=1)
    scheduler.on_trial_add("failed")
    report(scheduler, "failed", [100])
    scheduler.on_trial_remove("failed")
    scheduler.on_trial_add("a")  # no succeeded trial yet
    assert report(scheduler, "a", [0.5]) == [CONTINUE]
    scheduler.on_trial_complete("a")
    scheduler.on_trial_add("b")
    scheduler.on_trial_add("c")
    assert report(scheduler, "b", [0.4]) == [STOP]
    assert report(scheduler, "c", [0.6]) == [CONTINUE]


def test_a_trial_that_succeeded_without_the_metric_adds_nothing_and_nan_never_stops():
    scheduler = make(min_trials_required=1, start_step=2)
    scheduler.on_trial_add("silent")
    scheduler.on_trial_complete("silent")  # Katib's service would divide by zero here
    scheduler.on_trial_add("a")
    assert scheduler.get_state()["rules"]["a"] is None
    report(scheduler, "a", [1, 1])
    scheduler.on_trial_complete("a")
    scheduler.on_trial_add("nan-first")
    # Katib keeps the first value unless a later one is strictly better: NaN stays, and NaN > rule is false
    assert report(scheduler, "nan-first", [math.nan, 50]) == [CONTINUE, CONTINUE]


def test_the_decisions_are_the_same_after_a_restart_at_any_point():
    values = {"a": [5, 4, 3], "b": [2, 2, 2], "c": [6, 6, 6], "d": [1, 9, 9], "e": [math.inf, 4, 4]}

    def run(restart_at: int | None) -> list:
        scheduler, log, step = make(min_trials_required=2, start_step=2), [], 0
        for trial, trial_values in values.items():
            scheduler.on_trial_add(trial)
            for i, value in enumerate(trial_values):
                if step == restart_at:
                    state = json.loads(json.dumps(scheduler.get_state(), allow_nan=False))
                    scheduler = make(min_trials_required=2, start_step=2)
                    scheduler.set_state(state)
                step += 1
                decision = scheduler.on_trial_result(trial, {"training_iteration": i + 1, "loss": value})
                log.append((trial, i, decision))
                if decision == STOP:
                    break
            scheduler.on_trial_complete(trial)
        return log

    reference = run(None)
    # c's best 6 > (4.5 + 2) / 2; e's best 4 (after inf) > (4.5 + 2 + 5) / 3
    assert [d for d in reference if d[2] == STOP] == [("c", 1, STOP), ("e", 1, STOP)]
    for step in range(14):
        assert run(step) == reference


@pytest.mark.parametrize("params", [{"min_trials_required": 0}, {"start_step": 0}, {"start_step": 1.5}])
def test_settings_katib_refuses_are_refused(params):
    with pytest.raises(ValueError, match="katib-medianstop"):
        make(**params)
