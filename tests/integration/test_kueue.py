"""Experiments in a Kueue LocalQueue (``spec.queueName``) against Kueue itself: its manager built from its Go
module (``devcluster.kueue``), its CRDs and pod webhooks, its ``pod`` integration. Kueue gates each trial pod
until the queue's quota admits it, and admits a gang's pods as one pod group (one Workload): a gang either
holds all of its quota or none, one over the quota waits whole, and each attempt's Workload gives its quota
back once no member runs, so that the next gangs and the retried attempt are admitted."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from devcluster.kueue import Kueue
from devcluster.testkit import wait_for
from tests.integration.test_operator import GROUP, VERSION, experiment, get, phase_is, trials

KUEUE = ("kueue.x-k8s.io", "v1beta2")
ADMISSION_GATE = "kueue.x-k8s.io/admission"
SOURCE = """
import os, time
import kubetune


def train(config):
    ctx = kubetune.get_context()
    if config["x"] == 1 and ctx.get_world_rank() == 1 and os.environ["KUBETUNE_ATTEMPT"] == "0":
        raise RuntimeError("worker 1 fails the first attempt")
    for step in range(1, 4):
        time.sleep(1)
        kubetune.report({"score": config["x"] * step})
"""


@pytest.fixture(scope="module")
def kueue(cluster, api):
    running = Kueue(cluster)
    try:
        running.start()
        flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
        try:
            client.CustomObjectsApi(api).create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        yield running
    finally:
        running.stop()


@pytest.fixture
def queue(kueue, custom, namespace):
    """A ClusterQueue for this test's namespace (``nominalQuota`` cpu set by the test) and its LocalQueue."""

    def make(cpu: str) -> str:
        custom.create_cluster_custom_object(
            *KUEUE,
            "clusterqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": namespace},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
                        }
                    ],
                },
            },
        )
        custom.create_namespaced_custom_object(
            *KUEUE,
            namespace,
            "localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team"},
                "spec": {"clusterQueue": namespace},
            },
        )
        return "team"

    yield make
    try:
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", namespace)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


class Admissions:
    """Samples the namespace's pods and Kueue Workloads every 0.2 s while a test runs: the most cpu admitted at
    once (pods Kueue ungated that have not ended), every gang seen partly admitted with a member bound to a node,
    and each Workload's pod count (a Workload goes with its pods, which the operator deletes once they ended)."""

    def __init__(self, cluster, namespace):
        api = cluster.api_client()
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.peak, self.half_bound = namespace, 0, []
        self.gated_seen = set()
        self.workloads: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Admissions":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.core.list_namespaced_pod(self.namespace).items
            admitted, groups = 0, {}
            for pod in pods:
                gates = {g.name for g in pod.spec.scheduling_gates or ()}
                if ADMISSION_GATE in gates:
                    self.gated_seen.add(pod.metadata.name)
                elif pod.status.phase in ("Pending", "Running"):
                    admitted += sum(
                        _millicpu(c.resources.requests["cpu"]) for c in pod.spec.containers if c.resources.requests
                    )
                group = (pod.metadata.labels or {}).get("kueue.x-k8s.io/pod-group-name")
                if group:
                    groups.setdefault(group, []).append((ADMISSION_GATE in gates, bool(pod.spec.node_name)))
            self.peak = max(self.peak, admitted)
            for workload in self.custom.list_namespaced_custom_object(*KUEUE, self.namespace, "workloads")["items"]:
                pods = sum(ps["count"] for ps in workload["spec"]["podSets"])
                self.workloads[workload["metadata"]["name"]] = pods
            for group, members in groups.items():
                if any(gated for gated, _ in members) and any(bound for _, bound in members):
                    self.half_bound.append(group)
            time.sleep(0.2)


def _millicpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _cluster_queue(custom, name):
    return custom.get_cluster_custom_object(*KUEUE, "clusterqueues", name)


def _quota_returned(custom, name, core, namespace):
    """The ClusterQueue admits nothing, and no pod keeps Kueue's finalizer (each Workload ended)."""
    status = _cluster_queue(custom, name).get("status") or {}
    held = [
        p.metadata.name
        for p in core.list_namespaced_pod(namespace).items
        if "kueue.x-k8s.io/managed" in (p.metadata.finalizers or ())
    ]
    return not status.get("admittedWorkloads") and not status.get("reservingWorkloads") and not held


def test_kueue_admits_each_gang_whole_within_the_quota_and_gets_it_back_after_each_attempt(
    cluster, operator, custom, core, namespace, storage_secret, queue
):
    """Two trials, each a gang of 3 one-cpu pods, in a queue of 3 cpus: one gang at a time holds the quota, the
    other waits whole (the Trial shows it waits for admission); trial x=1's worker fails its first attempt, so
    its gang is retried as a new pod group, admitted once the failed attempt's group gave its quota back."""
    body = experiment(
        "kq",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2]}},
        trainable={"source": SOURCE, "name": "train"},
        stop={},
        failure={"maxFailures": 1},
        maxConcurrentTrials=2,
        queueName=queue("3"),
        resourcesPerTrial={"cpu": "1", "workers": {"replicas": 2, "cpu": "1"}},
    )
    waiting = set()
    with Admissions(cluster, namespace) as seen:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)

        def ended():
            for name, trial in trials(custom, namespace).items():
                if "waiting for admission" in ((trial.get("status") or {}).get("message") or ""):
                    waiting.add(name)
            return phase_is(custom, namespace, "kq", "Succeeded", "Failed")

        wait_for(ended, timeout=240, interval=0.2, what="the Experiment to end")
    assert get(custom, namespace, "experiments", "kq")["status"]["phase"] == "Succeeded"
    by_x = {t["spec"]["config"]["x"]: t["status"] for t in trials(custom, namespace).values()}
    assert (by_x[1]["phase"], by_x[1]["attempt"], by_x[1]["failures"]) == ("Succeeded", 1, 1), by_x[1]
    assert (by_x[2]["phase"], by_x[2]["attempt"]) == ("Succeeded", 0), by_x[2]
    assert seen.peak == 3000, f"at most 3 cpus admitted at once, saw {seen.peak}m"
    assert not seen.half_bound, f"gangs with a member bound while another waited for admission: {seen.half_bound}"
    assert seen.gated_seen, "no pod ever waited for Kueue's admission"
    assert waiting, "no Trial showed that it waited for admission"
    wait_for(lambda: _quota_returned(custom, namespace, core, namespace), timeout=60, what="the quota to come back")
    # one Workload per attempt (x=1: 2 attempts; x=2: 1), each for the whole gang: its pod sets count 3 pods
    assert seen.workloads == {"g-kq-00000-0": 3, "g-kq-00000-1": 3, "g-kq-00001-0": 3}, seen.workloads


def test_a_gang_over_the_quota_waits_whole_and_runs_when_the_quota_grows(
    cluster, operator, custom, core, namespace, storage_secret, queue
):
    """A gang of 3 one-cpu pods in a queue of 2 cpus: Kueue admits none of its pods (no member is bound to a
    node, so none holds a node's resources) and the Trial says it waits for admission; once the ClusterQueue
    grows to 3 cpus the gang is admitted whole and runs."""
    name = queue("2")
    body = experiment(
        "big",
        cluster,
        storage_secret,
        config={"x": 2},
        trainable={"source": SOURCE, "name": "train"},
        stop={},
        queueName=name,
        resourcesPerTrial={"cpu": "1", "workers": {"replicas": 2, "cpu": "1"}},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)

    def held():
        (trial,) = trials(custom, namespace).values() or [None]
        status = (trial or {}).get("status") or {}
        return status.get("reason") == "SchedulingGated" and status

    status = wait_for(held, timeout=60, what="the Trial to wait for admission")
    assert status["phase"] == "Pending" and "waiting for admission" in status["message"], status
    # Kueue has seen the whole group once its Workload exists; 5 s later it has still admitted nothing
    wait_for(
        lambda: custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"],
        timeout=60,
        what="Kueue's Workload of the gang",
    )
    time.sleep(5)
    pods = core.list_namespaced_pod(namespace).items
    assert len(pods) == 3
    assert all(ADMISSION_GATE in {g.name for g in p.spec.scheduling_gates or ()} for p in pods)
    assert not any(p.spec.node_name for p in pods)
    (workload,) = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    assert not workload["status"].get("admission"), workload["status"]
    grown = _cluster_queue(custom, namespace)["spec"]["resourceGroups"]
    grown[0]["flavors"][0]["resources"][0]["nominalQuota"] = "3"
    custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", namespace, {"spec": {"resourceGroups": grown}})
    wait_for(lambda: phase_is(custom, namespace, "big", "Succeeded", "Failed"), timeout=120, what="the end")
    assert get(custom, namespace, "experiments", "big")["status"]["phase"] == "Succeeded"
    wait_for(lambda: _quota_returned(custom, namespace, core, namespace), timeout=60, what="the quota to come back")


def test_one_pod_trials_run_one_at_a_time_in_a_queue_of_one_cpu(
    cluster, operator, custom, core, namespace, storage_secret, queue
):
    """``spec.queueName`` for one-pod trials: three trials may run at once by the Experiment, but the queue's one
    cpu admits one trial pod at a time, and every trial runs."""
    body = experiment(
        "small",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [2, 3, 4]}},
        trainable={"source": SOURCE, "name": "train"},
        stop={},
        maxConcurrentTrials=3,
        queueName=queue("1"),
        resourcesPerTrial={"cpu": "1"},
    )
    with Admissions(cluster, namespace) as seen:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)
        wait_for(lambda: phase_is(custom, namespace, "small", "Succeeded", "Failed"), timeout=180, what="the end")
    assert get(custom, namespace, "experiments", "small")["status"]["phase"] == "Succeeded"
    assert sorted(t["status"]["phase"] for t in trials(custom, namespace).values()) == ["Succeeded"] * 3
    assert seen.peak == 1000, f"at most one cpu admitted at once, saw {seen.peak}m"
    assert len(seen.gated_seen) >= 2, seen.gated_seen
    wait_for(lambda: _quota_returned(custom, namespace, core, namespace), timeout=60, what="the quota to come back")
