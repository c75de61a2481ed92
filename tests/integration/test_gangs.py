"""Gangs on the process node (what needs no network between pods): the operator creates each attempt's head,
workers, headless Service and PodGroup through the real API server (its RBAC and the scheduler's gang
scheduling, which the devcluster enables), a worker that fails fails the attempt and the next attempt runs
whole, and the Services and PodGroups of ended attempts are deleted. The rendezvous itself runs on the real
node (tests/realnode/test_distributed.py)."""

from __future__ import annotations

from kubernetes import client

from devcluster.testkit import wait_for
from tests.integration.test_operator import (
    GROUP,
    VERSION,
    events,
    experiment,
    get,
    phase_is,
    posted,
    result_lines,
    trials,
)

SOURCE = """
import os, time
import kubetune


def train(config):
    ctx = kubetune.get_context()
    if ctx.get_world_rank() == 1 and os.environ["KUBETUNE_ATTEMPT"] == "0":
        raise RuntimeError("worker 1 fails its first attempt")
    for step in range(1, 4):
        time.sleep(2)  # the head of the first attempt is still running when worker 1 fails
        kubetune.report({"score": step * 10 + ctx.get_world_rank(), "rank": ctx.get_world_rank()})
"""


def test_a_worker_failing_fails_the_attempt_and_the_next_gang_runs_whole(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    body = experiment(
        "gang",
        cluster,
        storage_secret,
        config={},
        trainable={"source": SOURCE, "name": "train"},
        stop={},
        failure={"maxFailures": 1},
        resourcesPerTrial={"cpu": "100m", "workers": {"replicas": 2, "cpu": "100m"}},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)

    def gang_objects():
        services = core.list_namespaced_service(namespace, label_selector="kubetune.io/experiment=gang").items
        groups = custom.list_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", label_selector="kubetune.io/experiment=gang"
        )["items"]
        # a PodGroup being deleted waits (a finalizer) for the pods that name it: attempt 0's failed worker is
        # kept for its logs (whenFailed: Retain), so its PodGroup goes with it
        return {s.metadata.name for s in services}, {
            g["metadata"]["name"]: g["spec"]["schedulingPolicy"]
            for g in groups
            if not g["metadata"].get("deletionTimestamp")
        }

    services, groups = wait_for(lambda: (found := gang_objects())[0] and found, what="the gang's Service")
    assert services == {"g-gang-00000-0"}
    assert groups == {"g-gang-00000-0": {"gang": {"minCount": 3}}}
    wait_for(lambda: phase_is(custom, namespace, "gang", "Succeeded", "Failed"), timeout=180, what="the end")
    assert get(custom, namespace, "experiments", "gang")["status"]["phase"] == "Succeeded"
    (trial,) = trials(custom, namespace).values()
    status = trial["status"]
    assert (status["phase"], status["attempt"], status["failures"]) == ("Succeeded", 1, 1), status
    retried = [e.message for e in events(core, namespace, "TrialRetried")]
    assert retried and "attempt 0 failed" in retried[0], retried
    # rank 0's reports only, of the attempt that ran whole
    assert [(r["score"], r["rank"]) for r in result_lines(s3, namespace, "gang", trial["metadata"]["name"])] == [
        (10, 0),
        (20, 0),
        (30, 0),
    ]
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    assert pods["gang-00000-0-w1"].status.phase == "Failed"  # kept (whenFailed: Retain) for its logs
    wait_for(lambda: gang_objects() == (set(), {}), timeout=60, what="the ended attempts' Services and PodGroups")
    try:
        core.read_namespaced_service("g-gang-00000-1", namespace)
        raise AssertionError("the last attempt's Service is still there")
    except client.ApiException as exc:
        assert exc.status == 404


def test_a_gang_whose_service_name_is_taken_waits_and_says_whose_it_is(
    cluster, operator, custom, core, namespace, storage_secret
):
    """A Service of the gang's name that is not this Trial's (here a user's; or an earlier Trial's of the same name
    not yet collected, which the garbage collector would delete under the new gang) is never taken over: the
    Experiment is Ready=False TrialNameTaken and no member pod is created, until the name is free."""
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "g-taken-00000-0"}, "spec": {"clusterIP": "None", "selector": {"a": "b"}}}
    )
    body = experiment(
        "taken",
        cluster,
        storage_secret,
        config={},
        trainable={"source": SOURCE, "name": "train"},
        stop={},
        failure={"maxFailures": 1},  # SOURCE's worker 1 fails its first attempt
        resourcesPerTrial={"cpu": "100m", "workers": {"replicas": 1, "cpu": "100m"}},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)

    def ready():
        conditions = (get(custom, namespace, "experiments", "taken").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    wait_for(lambda: ready().get("reason") == "TrialNameTaken", timeout=60, what="TrialNameTaken")
    assert "Service g-taken-00000-0 already exists and is not this Experiment's" in ready()["message"]
    posted(core, namespace, "TrialNameTaken")
    assert core.list_namespaced_pod(namespace, label_selector="kubetune.io/experiment=taken").items == []
    core.delete_namespaced_service("g-taken-00000-0", namespace)
    wait_for(lambda: phase_is(custom, namespace, "taken", "Succeeded", "Failed"), timeout=120, what="the end")
    assert get(custom, namespace, "experiments", "taken")["status"]["phase"] == "Succeeded"
    assert ready().get("reason") != "TrialNameTaken"
