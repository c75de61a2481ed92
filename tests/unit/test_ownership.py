"""Never adopt what is not ours (issue 22.2): ``Kube.execute`` carrying out real plans of an
:class:`ExperimentController` against an in-memory API that answers as the API server does when an earlier
Experiment of the same name was deleted with ``--cascade=orphan``: 409 on the create of its Trial's name,
and a Trial without owner (or with another controller) on the read."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from kubernetes.client import ApiException

from devcluster.testkit import experiment_object
from kubetune_operator.builders import controller_uid
from kubetune_operator.controller import ExperimentController
from kubetune_operator.kube import Kube
from kubetune_operator.settings import Settings, StatusSettings

KEY = b"k" * 32
T0 = 1_800_000_000.0


class Response:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()


class ApiWithLeftovers:
    """Trials and pods by name, as stored; ``leftovers`` are the earlier Experiment's (another owner, or none)."""

    def __init__(self, leftovers: dict[str, dict]):
        self.objects = dict(leftovers)
        self.created: list[str] = []

    def _create(self, body):
        name = body["metadata"]["name"]
        if name in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.objects[name] = {**body, "metadata": {**body["metadata"], "uid": "uid-" + name}}
        self.created.append(name)
        return Response(self.objects[name])

    def create_namespaced_custom_object(self, group, version, ns, plural, body, **_):
        return self._create(body)

    def get_namespaced_custom_object(self, group, version, ns, plural, name, **_):
        return Response(self.objects[name])

    def create_namespaced_pod(self, ns, body, **_):
        return self._create(body)

    def list_namespaced_pod(self, ns, field_selector, **_):
        name = field_selector.removeprefix("metadata.name=")
        return Response({"items": [self.objects[name]] if name in self.objects else []})

    def create_namespaced_secret(self, ns, body, **_):
        return Response({})

    def patch_namespaced_custom_object_status(self, *args, **_):
        return Response({})


def kube(api) -> Kube:
    k = Kube.__new__(Kube)  # no kubeconfig: the API calls go to ``api``
    k.core = k.custom = api
    k.pool = ThreadPoolExecutor(2)
    return k


def experiment():
    return experiment_object(
        "same", "new-uid", config={"lr": {"grid_search": [1, 2, 3]}}, storage={"uri": "s3://bucket/prefix"}
    )


def orphan(name: str, owner: str | None = None) -> dict:
    refs = [{"kind": "Experiment", "name": "same", "uid": owner, "controller": True}] if owner else []
    return {"metadata": {"name": name, "namespace": "ns", "uid": "old-" + name, "ownerReferences": refs}}


def run_pass(ctl, k, now):
    plan = ctl.plan({}, now)
    return plan, asyncio.run(k.execute(ctl, plan))


def ready(ctl):
    return next(c for c in ctl.health_conditions([], datetime.now(timezone.utc)) if c["type"] == "Ready")


def test_a_trial_name_held_by_an_orphaned_trial_is_never_adopted_and_says_so():
    api = ApiWithLeftovers({"same-00000": orphan("same-00000")})
    ctl, k = ExperimentController(experiment(), Settings(status=StatusSettings(write_interval_s=0.0)), KEY), kube(api)
    plan, errors = run_pass(ctl, k, T0)
    assert api.created == ["same-00001", "same-00002"]
    assert "same-00000" not in ctl.trials and 0 in ctl.book.missing  # not used, asked for again
    assert len(errors) == 1 and "same-00000 already exists and is not this Experiment's" in errors[0]
    # the event names only what was created; the condition and a Warning event say why the first is not
    assert [e[3] for e in plan.events if e[2] == "TrialsCreated"] == ["created 2 trials: same-00001 .. same-00002"]
    condition = ready(ctl)
    assert (condition["status"], condition["reason"]) == ("False", "TrialNameTaken")
    assert (
        "has no owner (orphaned)" in condition["message"] and "kubectl delete trial same-00000" in condition["message"]
    )
    plan, _ = run_pass(ctl, k, T0 + 1)
    assert [e[2] for e in plan.events].count("TrialNameTaken") == 1  # once, not every pass
    assert {m["metadata"]["name"] for m in plan.create_pods} == {"same-00001-0", "same-00002-0"}
    # the user deletes the leftover: the next pass creates the Trial under its name, and Ready is True again
    del api.objects["same-00000"]
    run_pass(ctl, k, T0 + 2)
    assert ctl.trials["same-00000"].uid == "uid-same-00000" and ready(ctl)["status"] == "True"


def test_a_trial_of_another_controller_and_a_pod_of_an_earlier_trial_are_not_used():
    api = ApiWithLeftovers({"same-00001": orphan("same-00001", owner="old-uid")})
    ctl, k = ExperimentController(experiment(), Settings(), KEY), kube(api)
    run_pass(ctl, k, T0)
    assert "same-00001" not in ctl.trials and "controlled by uid old-uid" in ready(ctl)["message"]
    # an earlier Trial's pod still being garbage-collected holds a pod name: not taken for ours
    api.objects["same-00000-0"] = {
        "metadata": {"name": "same-00000-0", "ownerReferences": [{"uid": "old-same-00000", "controller": True}]}
    }
    plan, errors = run_pass(ctl, k, T0 + 1)
    assert any("Pod same-00000-0 already exists" in e for e in errors)
    # asked for again
    assert "same-00000-0" in ctl.health.names_taken and "same-00000-0" not in ctl.lifecycle.created_pods
    del api.objects["same-00000-0"]
    run_pass(ctl, k, T0 + 2)
    assert "same-00000-0" in api.created and "same-00000-0" not in ctl.health.names_taken


def test_the_controller_of_an_object_is_its_controller_reference():
    assert controller_uid(orphan("t")) is None
    assert controller_uid(orphan("t", owner="u")) == "u"
    assert controller_uid({"metadata": {"ownerReferences": [{"uid": "x", "controller": False}]}}) is None
