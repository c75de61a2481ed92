"""Status writes that keep failing, and the Experiment's end event (issue 22.1 and 22.5): ``Kube.execute``
carrying out real plans of an :class:`ExperimentController` against an in-memory API (``FakeAPI``) with the
API server's answers: 422 for a refused patch, 409 for an Event name already taken."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client import ApiException

from devcluster.testkit import experiment_object
from kubetune.env import OUTCOME_COMPLETED
from kubetune_operator.controller import ExperimentController
from kubetune_operator.experiment_health import STATUS_WRITE_ATTEMPTS
from kubetune_operator.kube import Kube, end_event_name
from kubetune_operator.podview import PodView
from kubetune_operator.settings import Settings, StatusSettings

KEY = b"k" * 32
T0 = 1_800_000_000.0


class Response:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()


class FakeAPI:
    """The calls ``Kube.execute`` makes, as the API server answers them; ``refuse`` names Trials whose status
    patches get 422. ``calls`` lists what was done, in order."""

    def __init__(self, refuse=()):
        self.refuse = set(refuse)
        self.calls: list[tuple] = []
        self.events: dict[str, dict] = {}
        self.experiment_status: dict = {}

    def create_namespaced_custom_object(self, group, version, ns, plural, body, **_):
        self.calls.append(("create", plural, body["metadata"]["name"]))
        return Response({"metadata": {"uid": "uid-" + body["metadata"]["name"]}})

    def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body, **_):
        json.dumps(body, allow_nan=False)
        if plural == "trials" and name in self.refuse:
            self.calls.append(("refused", name))
            raise ApiException(status=422, reason="Unprocessable Entity")
        self.calls.append(("status", plural, name, body["status"].get("phase")))
        if plural == "experiments":
            self.experiment_status.update(body["status"])
        return Response({})

    def create_namespaced_event(self, ns, body, **_):
        name = body["metadata"]["name"]
        if name in self.events:
            raise ApiException(status=409, reason="AlreadyExists")
        self.events[name] = body
        self.calls.append(("event", body["reason"]))
        return Response(body)

    def create_namespaced_secret(self, ns, body, **_):
        return Response({})

    def create_namespaced_pod(self, ns, body, **_):
        return Response({})

    def delete_namespaced_secret(self, name, ns, **_):
        return Response({})

    def delete_namespaced_pod(self, name, ns, **_):
        return Response({})


def kube(api: FakeAPI) -> Kube:
    k = Kube.__new__(Kube)  # no kubeconfig: the API calls go to ``api``
    k.core = k.custom = api
    k.pool = ThreadPoolExecutor(2)
    return k


def experiment():
    return experiment_object(
        config={"lr": {"grid_search": [1, 2]}}, metric="acc", mode="max", storage={"uri": "s3://bucket/prefix"}
    )


def ended_pods(ctl):
    return {
        f"{name}-0": PodView(
            f"{name}-0", name, 0, "Succeeded", exit_code=0, message=json.dumps({"outcome": OUTCOME_COMPLETED})
        )
        for name in ctl.trials
    }


def run_passes(ctl, k, pods, start, passes):
    """Plan and carry out up to ``passes`` passes (1 s apart) until the Experiment is finished with no error, as
    the daemon does; returns every pass's ``(plan, errors)``."""
    done = []
    for step in range(passes):
        plan = ctl.plan(pods, start + step)
        errors = asyncio.run(k.execute(ctl, plan))
        done.append((plan, errors))
        if ctl.finished and not errors:
            break
    return done


def settings():
    return Settings(status=StatusSettings(write_interval_s=0.0))


def test_an_experiment_finishes_although_one_trials_status_can_never_be_written():
    api = FakeAPI()
    ctl, k = ExperimentController(experiment(), settings(), KEY), kube(api)
    run_passes(ctl, k, {}, T0, 2)  # trials, then their pods
    api.refuse.add("exp-00000")  # say its last result put a value in it the API server refuses
    passes = run_passes(ctl, k, ended_pods(ctl), T0 + 10, 10)
    assert ctl.finished and not passes[-1][1]  # the daemon's loop ends
    assert api.experiment_status["phase"] == "Succeeded"
    assert ("status", "trials", "exp-00001", "Succeeded") in api.calls  # the other trial's status went out
    # each failed write was an error of its pass (retried), and the terminal status waited; once the trial is
    # unwritable, the next pass writes it with the Degraded condition that says so (tried again there too)
    assert [c for c in api.calls if c[0] == "refused"] == [("refused", "exp-00000")] * (STATUS_WRITE_ATTEMPTS + 1)
    assert all(errors for _, errors in passes[:-2]) and len(passes) == STATUS_WRITE_ATTEMPTS + 1
    degraded = next(c for c in api.experiment_status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "TrialStatusNotWritten")
    assert degraded["message"].endswith("exp-00000: Unprocessable Entity")  # what the API server said
    # one Warning event on the Experiment says so, in the pass after the third failure
    warned = [e for plan, _ in passes for e in plan.events if e[2] == "TrialStatusNotWritten"]
    assert len(warned) == 1 and warned[0][:2] == (None, "Warning") and "exp-00000" in warned[0][3]
    assert warned == [e for e in passes[-1][0].events if e[2] == "TrialStatusNotWritten"]


def test_a_status_written_again_clears_the_condition():
    api = FakeAPI(refuse={"exp-00000"})
    ctl, k = ExperimentController(experiment(), settings(), KEY), kube(api)
    run_passes(ctl, k, {}, T0, 2)
    running = {n: PodView(n, n[:-2], 0, "Running") for n in ("exp-00000-0", "exp-00001-0")}
    run_passes(ctl, k, running, T0 + 10, STATUS_WRITE_ATTEMPTS)
    assert ctl.unwritable("exp-00000")
    api.refuse.clear()  # say the object's size came back under the limit
    passes = run_passes(ctl, k, running, T0 + 20, 2)  # written in the first, the condition cleared in the next
    assert not any(errors for _, errors in passes) and not ctl.unwritable("exp-00000")
    degraded = next(c for c in api.experiment_status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


def test_the_end_is_announced_once_before_the_terminal_status_even_by_a_restarted_operator():
    api = FakeAPI()
    ctl, k = ExperimentController(experiment(), settings(), KEY), kube(api)
    run_passes(ctl, k, {}, T0, 2)
    passes = run_passes(ctl, k, ended_pods(ctl), T0 + 10, 3)
    plan = passes[-1][0]
    assert plan.end_event[:2] == ("Normal", "ExperimentSucceeded")
    assert not [e for e in plan.events if e[2].startswith("Experiment")]  # not left to the daemon's last steps
    final = api.calls.index(("status", "experiments", "exp", "Succeeded"))
    assert api.calls[final - 1] == ("event", "ExperimentSucceeded")  # announced first
    event = api.events[end_event_name("exp-uid")]
    assert event["involvedObject"]["uid"] == "exp-uid" and event["type"] == "Normal"
    # an operator that restarts before the terminal status is written decides the end again: it is not
    # announced twice (the Event's name is the Experiment's, so the second post is AlreadyExists)
    again = ExperimentController(experiment(), settings(), KEY)
    for name, trial in ctl.trials.items():
        status = {**trial.status, "phase": "Running"} if name == "exp-00001" else trial.status
        again.observe_trial(
            {"metadata": {"name": name, "uid": trial.uid}, "spec": {"index": trial.index}, "status": status}
        )
    again.restore([])
    api.calls.clear()
    passes = run_passes(again, k, ended_pods(ctl), T0 + 60, 3)
    assert again.finished and not passes[-1][1]
    assert ("status", "experiments", "exp", "Succeeded") in api.calls
    assert len(api.events) == 1 and ("event", "ExperimentSucceeded") not in api.calls


def test_a_failed_end_event_holds_the_terminal_status_back_until_it_is_posted():
    api = FakeAPI()
    ctl, k = ExperimentController(experiment(), settings(), KEY), kube(api)
    run_passes(ctl, k, {}, T0, 2)
    post = api.create_namespaced_event
    api.create_namespaced_event = lambda *a, **kw: (_ for _ in ()).throw(ApiException(status=500, reason="down"))
    passes = run_passes(ctl, k, ended_pods(ctl), T0 + 10, 2)
    assert all(any("end event" in e for e in errors) for _, errors in passes)
    assert "phase" not in api.experiment_status or api.experiment_status["phase"] != "Succeeded"
    api.create_namespaced_event = post
    run_passes(ctl, k, ended_pods(ctl), T0 + 20, 2)
    assert api.experiment_status["phase"] == "Succeeded" and len(api.events) == 1
