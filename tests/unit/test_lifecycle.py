"""The trial lifecycle table (kubetune_operator.lifecycle): every row, and the rules it must keep."""

from __future__ import annotations

import pytest

from kubetune.env import OUTCOME_COMPLETED, OUTCOME_FENCED, OUTCOME_PAUSED, OUTCOME_STOPPED, OUTCOME_TERMINATED
from kubetune_operator.lifecycle import (
    ACTIONS,
    ENDS,
    OUTCOMES,
    SITUATIONS,
    STOP_REASON,
    TRANSITIONS,
    Transition,
    transition,
)

# (end, outcome) -> the row for each situation (running, suspending, stopping), written out by hand
EXPECTED = {
    ("Succeeded", OUTCOME_COMPLETED): [("complete", "Completed")] * 3,
    ("Succeeded", OUTCOME_STOPPED): [("finish", "EarlyStopped"), ("pause", "Suspended"), ("finish", STOP_REASON)],
    ("Succeeded", OUTCOME_PAUSED): [("pause", "SchedulerPaused"), ("pause", "Suspended"), ("finish", STOP_REASON)],
    ("Succeeded", OUTCOME_TERMINATED): [("retry", "Terminated"), ("pause", "Suspended"), ("finish", STOP_REASON)],
    ("Succeeded", OUTCOME_FENCED): [("retry", "Fenced"), ("pause", "Suspended"), ("finish", STOP_REASON)],
    ("Succeeded", None): [("fail", "NoOutcome"), ("pause", "Suspended"), ("finish", STOP_REASON)],
    ("Failed", None): [("fail", "Error")] * 3,
    ("Disrupted", None): [("retry", "PodDeleted"), ("pause", "Suspended"), ("finish", STOP_REASON)],
}


def test_the_table_has_a_row_for_every_observation_and_only_those():
    keys = {(end, outcome, situation) for (end, outcome) in EXPECTED for situation in SITUATIONS}
    assert set(TRANSITIONS) == keys
    assert {end for end, _, _ in keys} == set(ENDS) and {o for _, o, _ in keys} == set(OUTCOMES)


@pytest.mark.parametrize("end, outcome", list(EXPECTED))
def test_every_row(end, outcome):
    for situation, (action, reason) in zip(SITUATIONS, EXPECTED[end, outcome]):
        row = transition(end, outcome, situation)
        assert (row.action, row.reason) == (action, reason), (end, outcome, situation)
        assert row.action in ACTIONS


def test_only_a_failed_process_counts_as_a_failure():
    failing = {key for key, row in TRANSITIONS.items() if row.action == "fail"}
    assert failing == {("Failed", None, s) for s in SITUATIONS} | {("Succeeded", None, "running")}
    assert all(row.action != "fail" for (end, _, _), row in TRANSITIONS.items() if end == "Disrupted")


def test_a_completed_trial_is_completed_whatever_the_experiment_is_doing():
    assert {transition("Succeeded", OUTCOME_COMPLETED, s) for s in SITUATIONS} == {Transition("complete", "Completed")}


def test_the_pods_own_reason_wins_only_for_errors_and_disruptions():
    assert {key for key, row in TRANSITIONS.items() if row.pod_reason} == {("Failed", None, s) for s in SITUATIONS} | {
        ("Disrupted", None, "running"),
        ("Succeeded", OUTCOME_TERMINATED, "running"),
    }


def test_an_unknown_outcome_reads_as_none_and_an_unknown_end_is_an_error():
    assert transition("Succeeded", "exploded", "running") == transition("Succeeded", None, "running")
    assert transition("Failed", OUTCOME_COMPLETED, "running").action == "fail"  # an exit code wins over words
    with pytest.raises(KeyError):
        transition("Vanished", None, "running")
