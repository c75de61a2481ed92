"""What kstatus (``sigs.k8s.io/cli-utils/pkg/kstatus/status``, which Flux, kpt and cli-utils' appliers wait
on) reads from an Experiment in each phase and condition (``experiment_states.py``): InProgress while it runs
or a spec change is not taken yet, Current once it Succeeded (or is Suspended), Failed when it Failed or its
spec is refused, Terminating while it is deleted.

:func:`kstatus` transcribes the rules ``status.Compute`` applies to a custom resource (``generic.go``:
deletion, ``observedGeneration``, ``Reconciling``/``Stalled``; ``status.go``: the ``Ready`` fallback, else
Current); the same objects gave the same answers through cli-utils v0.37.2 itself (a Go program outside the
repository, reported with the change that added the conditions)."""

from __future__ import annotations

import pytest
from experiment_states import states

STATES = states()


def kstatus(obj: dict) -> str:
    """kstatus' status of a custom resource: InProgress, Current, Failed or Terminating."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation")
    if generation is not None and "observedGeneration" in status and status["observedGeneration"] != generation:
        return "InProgress"
    for condition in status.get("conditions") or ():
        if condition["type"] == "Reconciling" and condition["status"] == "True":
            return "InProgress"
        if condition["type"] == "Stalled" and condition["status"] == "True":
            return "Failed"
    ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), None)
    if ready is not None and ready["status"] != "True":
        return "InProgress"
    return "Current"


@pytest.mark.parametrize(
    "state, expected",
    [
        ("pending", "Current"),  # no status yet: kstatus cannot tell any resource from a reconciled one
        ("running", "InProgress"),
        ("degraded", "InProgress"),
        ("edited", "InProgress"),
        ("succeeded", "Current"),
        ("suspended", "Current"),
        ("failed", "Failed"),
        ("invalid-spec", "Failed"),
        ("invalid-edit", "Failed"),
        ("deleting", "Terminating"),
    ],
)
def test_kstatus_reads_each_phase(state, expected):
    assert kstatus(STATES[state]) == expected


def test_a_refused_edit_is_observed_so_kstatus_reads_the_refusal_not_a_pending_change():
    obj = STATES["invalid-edit"]
    assert obj["metadata"]["generation"] == 2 and obj["status"]["observedGeneration"] == 2
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert (conditions["Stalled"]["status"], conditions["Stalled"]["reason"]) == ("True", "InvalidSpec")
    assert conditions["Reconciling"]["status"] == "False" and conditions["Running"]["status"] == "True"
    assert all(c["observedGeneration"] == 2 for c in obj["status"]["conditions"])


def test_reconciling_carries_the_running_conditions_reason_and_stalled_the_failure():
    running = {c["type"]: c for c in STATES["running"]["status"]["conditions"]}
    assert (running["Reconciling"]["reason"], running["Stalled"]["status"]) == ("TrialsRunning", "False")
    failed = {c["type"]: c for c in STATES["failed"]["status"]["conditions"]}
    assert (failed["Stalled"]["reason"], failed["Reconciling"]["reason"]) == ("MaxFailedTrialsExceeded", "Stalled")
    done = {c["type"]: c for c in STATES["succeeded"]["status"]["conditions"]}
    assert (done["Reconciling"]["status"], done["Reconciling"]["reason"]) == ("False", "ExperimentSucceeded")
