"""The Argo CD health check the chart ships (helm/kubetune/argocd/experiment-health.lua), run as Argo CD runs
it (``util/lua/lua.go``, ``VM.runLua``): Lua 5.1 (Argo CD's gopher-lua implements 5.1; here the reference
interpreter through lupa) with only the package, base, table and (safe) os libraries, so no ``string``,
``math``, ``io`` or ``debug``; the object as the global ``obj`` decoded from its JSON (objects and arrays
become tables, null nil); the returned table's ``status`` one of Argo CD's health codes. The Experiments
come from the operator's own status code in each phase and condition (``experiment_states.py``); gopher-lua
v1.1.1 itself, set up as ``runLua`` does, gave the same answers on the same objects (a Go program outside
the repository, reported with the change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from experiment_states import states
from lupa import lua51

SCRIPT = Path(__file__).resolve().parents[2] / "helm" / "kubetune" / "argocd" / "experiment-health.lua"
#: gitops-engine's health.HealthStatusCode values, the only ones Argo CD accepts from a script.
CODES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")
STATES = states()


def health(obj: dict) -> dict:
    """Run the script on ``obj`` in a fresh Lua 5.1 state; the returned table as a dict."""
    lua = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    assert lua.eval("_VERSION") == "Lua 5.1"
    for name in ("string", "math", "io", "os", "debug", "dofile", "loadfile"):  # not opened by Argo CD, or unsafe
        lua.globals()[name] = None

    def table(value):
        if isinstance(value, dict):
            return lua.table_from({k: table(v) for k, v in value.items() if v is not None})
        if isinstance(value, list):
            return lua.table_from([table(v) for v in value])
        return value

    lua.globals().obj = table(json.loads(json.dumps(obj)))  # through JSON, as Argo CD hands it over
    result = lua.execute(SCRIPT.read_text())
    assert lua.eval("type")(result) == "table", "the script must return a table"
    out = {key: result[key] for key in ("status", "message")}
    assert set(dict(result.items())) <= {"status", "message"}
    assert out["status"] in CODES and isinstance(out["message"], str) and out["message"]
    return out


@pytest.mark.parametrize(
    "state, status, words",
    [
        ("pending", "Progressing", "Waiting for the kubetune operator"),
        ("running", "Progressing", "Running: 2 running, 0 pending, 0 paused, 0 succeeded, 0 failed of 2 trials"),
        ("succeeded", "Healthy", "AllTrialsCompleted: all 2 trials finished: 2 succeeded, 0 failed"),
        ("failed", "Degraded", "MaxFailedTrialsExceeded: 2 trials failed, more than maxFailedTrials=0"),
        ("suspended", "Suspended", "spec.suspend is true (0 running, 0 pending, 2 paused, 0 succeeded, 0 failed of 2"),
        ("invalid-spec", "Degraded", "InvalidSpec: unknown scheduler 'no-such-scheduler'"),
        ("invalid-edit", "Degraded", "InvalidSpec: unknown scheduler 'no-such-scheduler'"),
        ("edited", "Progressing", "has not taken generation 2 of the spec yet"),
        ("degraded", "Degraded", "ReconcileError: listing trials failed: 503 Service Unavailable"),
        ("deleting", "Progressing", "Being deleted"),
    ],
)
def test_each_phase_and_condition_has_its_health(state, status, words):
    result = health(STATES[state])
    assert result["status"] == status and words in result["message"], result


def test_a_pod_that_cannot_start_is_named_while_progressing():
    obj = json.loads(json.dumps(STATES["running"]))
    obj["status"]["conditions"].append(
        {"type": "TrialsWaiting", "status": "True", "reason": "ErrImagePull", "message": "1 trial(s) cannot start"}
    )
    result = health(obj)
    assert result["status"] == "Progressing" and "trials waiting, ErrImagePull: 1 trial(s)" in result["message"]


def test_trials_that_cannot_go_on_are_degraded_with_the_reason_until_they_can():
    obj = json.loads(json.dumps(STATES["running"]))
    stalled = {"type": "TrialsStalled", "status": "True", "reason": "StorageUnreachable", "message": "1 trial(s)"}
    obj["status"]["conditions"].append(stalled)
    result = health(obj)
    assert result["status"] == "Degraded" and result["message"].startswith("StorageUnreachable: 1 trial(s) (2 running")
    stalled["status"] = "False"
    assert health(obj)["status"] == "Progressing"


def test_a_finished_experiment_stays_healthy_after_an_edit_the_operator_ignores():
    obj = json.loads(json.dumps(STATES["succeeded"]))
    obj["metadata"]["generation"] = 5  # finished Experiments are not loaded again (handlers.validate)
    assert health(obj)["status"] == "Healthy"
