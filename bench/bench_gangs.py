"""Benchmarks of gangs (issue 24, ``spec.resourcesPerTrial.workers``), each against its one-pod baseline in the
same invocation.

``--phases reconcile``: the operator's reconcile pass with 100 trials of 4 pods each (a head and 3 workers)
against 400 one-pod trials, the same 400 pods.

Both runs go through the real controller (``ExperimentController.plan``) with the pods as the operator's pod watch
shows them (``podview.pod_view`` of the manifests the plans created, phase Running). Timed: the pass that creates
every pod (trials adopted, manifests built, gangs' Services and workers included) and the steady pass with every
pod running (what the daemon repeats every 2 s while nothing changes; for gangs it folds 400 pods into 100 views).
The ratio is gangs over single pods: what folding and gang manifests cost.

``--phases realnode`` (as root, after ``make node``): kubetune installed on the real node as ``python -m devcluster
up --real-node`` installs it; a gang of 4 pods from its Experiment's creation to all 4 containers running, against
one pod, alternating, ``--rounds`` times each; and the data-parallel example (``examples/distributed``, one trial,
``--epochs`` epochs) from creation to Succeeded on 1, 2 and 4 pods, with its epochs' mean ``time_this_iter_s``.
The machine has 2 cores: 4 pods share them.

``--phases kueue`` (as root): the process node with kubetune installed by the chart and Kueue (``devcluster.kueue``)
running; a gang of 4 pods from its Experiment's creation to all 4 running, in a Kueue LocalQueue (``spec.queueName``:
Kueue's webhook gates the pods, its manager admits the group and lifts the gates) against the same gang without a
queue, alternating, ``--rounds`` times each. The ratio is what Kueue's admission adds to a gang's start.

Run: ``.venv/bin/python bench/bench_gangs.py [--phases reconcile,realnode,kueue] [--passes 50] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.testkit import experiment_object  # noqa: E402
from kubetune_operator.controller import ExperimentController  # noqa: E402
from kubetune_operator.podview import pod_view  # noqa: E402
from kubetune_operator.settings import Settings, TrialSettings  # noqa: E402

KEY = b"k" * 32
T0 = 1_800_000_000.0


def experiment(trials: int, workers: int) -> dict:
    resources = {"cpu": 1, **({"workers": {"replicas": workers, "cpu": 1}} if workers else {})}
    return experiment_object(
        "bench",
        "bench-uid-0001",
        image="img",
        config={"lr": {"uniform": [0.0, 1.0]}},
        numSamples=trials,
        maxConcurrentTrials=trials,
        metric="acc",
        mode="max",
        storage={"uri": "s3://bucket/prefix"},
        resourcesPerTrial=resources,
    )


def running(manifests: list[dict]) -> dict:
    views = {}
    for manifest in manifests:
        body = dict(manifest)
        body["metadata"] = {**manifest["metadata"], "creationTimestamp": "2027-01-15T08:00:00Z"}
        body["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        }
        view = pod_view(body)
        views[view.name] = view
    return views


def run(trials: int, workers: int, passes: int) -> tuple[float, float, int]:
    """``(seconds of the pass creating every pod, median seconds of a steady pass, pods)``."""
    ctl = ExperimentController(
        experiment(trials, workers), Settings(trials=TrialSettings(gang_scheduling="podgroup")), KEY
    )
    while True:  # the searcher suggests a bounded number per pass
        plan = ctl.plan({}, T0)
        for manifest in plan.create_trials:
            ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
        if len(ctl.trials) >= trials:
            break
    started = time.perf_counter()
    plan = ctl.plan({}, T0 + 1)
    create_s = time.perf_counter() - started
    manifests = [
        m
        for head in plan.create_pods
        for m in [head, *(plan.gangs[head["metadata"]["name"]].workers if workers else [])]
    ]
    views = running(manifests)
    ctl.plan(views, T0 + 2)  # every trial becomes Running
    times = []
    for i in range(passes):
        started = time.perf_counter()
        ctl.plan(views, T0 + 3 + i)
        times.append(time.perf_counter() - started)
    return create_s, statistics.median(times), len(views)


SLEEPER = """
import time
def train(config):
    time.sleep(config["sleep_s"])
"""


def realnode(rounds: int, epochs: int) -> None:
    import yaml
    from kubernetes import client

    from devcluster import Cluster, ClusterConfig, install
    from devcluster.install import CREDENTIALS_SECRET, NAMESPACE
    from devcluster.testkit import wait_for

    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with Cluster(ClusterConfig(real_node=True, gpus_per_node=0, crds=crds)) as cluster:
        install.install(cluster)
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        storage = {
            "uri": "s3://kubetune/bench",
            "endpoint": cluster.s3_endpoint,
            "credentialsSecret": CREDENTIALS_SECRET,
        }

        def create(name: str, spec: dict) -> float:
            body = {"apiVersion": "kubetune.io/v1alpha1", "kind": "Experiment", "metadata": {"name": name}}
            body["spec"] = {"metric": "x", "mode": "max", "storage": storage, **spec}
            started = time.monotonic()
            custom.create_namespaced_custom_object("kubetune.io", "v1alpha1", NAMESPACE, "experiments", body)
            return started

        def all_running(name: str, size: int) -> bool:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"kubetune.io/experiment={name}").items
            running = [p for p in pods if any(c.state.running for c in p.status.container_statuses or [])]
            return len(running) == size

        def finished(name: str) -> dict | None:
            status = (
                custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", NAMESPACE, "experiments", name).get(
                    "status"
                )
                or {}
            )
            return status if status.get("phase") in ("Succeeded", "Failed") else None

        starts: dict[int, list[float]] = {1: [], 4: []}
        for i in range(rounds):
            for size in (4, 1):
                name = f"start-{size}-{i}"
                resources = {"cpu": "100m", "memory": "128Mi"}
                if size > 1:
                    resources["workers"] = {"replicas": size - 1, "cpu": "100m", "memory": "128Mi"}
                spec = {"trainable": {"source": SLEEPER, "name": "train"}, "config": {"sleep_s": 5}}
                started = create(name, {**spec, "resourcesPerTrial": resources})
                wait_for(lambda: all_running(name, size), timeout=300, interval=0.1, what=f"{name} running")
                starts[size].append(time.monotonic() - started)
                wait_for(lambda: finished(name), timeout=300, interval=0.5, what=f"{name} finished")
        for size, times in starts.items():
            print(f"realnode: created -> all {size} pod(s) running: median {statistics.median(times):.1f} s {times}")
        print(f"ratio gang of 4 / one pod: {statistics.median(starts[4]) / statistics.median(starts[1]):.2f}")

        manifest = yaml.safe_load((ROOT / "examples" / "distributed" / "experiment.yaml").read_text())
        for size in (1, 2, 4):
            spec = dict(manifest["spec"])
            spec["config"] = {"lr": 0.5, "batch_size": 64, "epochs": epochs}
            spec.pop("scheduler")
            spec["resourcesPerTrial"] = {"cpu": "250m", "memory": "1Gi"}
            if size > 1:
                spec["resourcesPerTrial"]["workers"] = {"replicas": size - 1, "cpu": "250m", "memory": "1Gi"}
            spec["storage"] = storage
            name = f"dp-{size}"
            started = create(name, spec)
            status = wait_for(lambda: finished(name), timeout=900, interval=0.5, what=f"{name} finished")
            wall = time.monotonic() - started
            (trial,) = custom.list_namespaced_custom_object(
                "kubetune.io", "v1alpha1", NAMESPACE, "trials", label_selector=f"kubetune.io/experiment={name}"
            )["items"]
            last = trial["status"]["lastResult"]
            print(
                f"data-parallel example on {size} pod(s): {status['phase']}, {wall:.1f} s created -> Succeeded, "
                f"mean_accuracy {last['mean_accuracy']:.4f}, time_total_s {last.get('time_total_s', 0):.1f} "
                f"over {epochs} epochs"
            )


def kueue(rounds: int) -> None:
    from kubernetes import client

    from devcluster import Cluster, ClusterConfig, install
    from devcluster.install import CREDENTIALS_SECRET, NAMESPACE
    from devcluster.kueue import Kueue
    from devcluster.testkit import wait_for

    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with Cluster(ClusterConfig(crds=crds)) as cluster:
        Kueue(cluster).start()  # stopped with the cluster
        install.install(cluster)
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        queue_objects = [
            ("resourceflavors", None, {"kind": "ResourceFlavor", "metadata": {"name": "default"}}),
            (
                "clusterqueues",
                None,
                {
                    "kind": "ClusterQueue",
                    "metadata": {"name": "bench"},
                    "spec": {
                        "namespaceSelector": {},
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"}]}],
                            }
                        ],
                    },
                },
            ),
            (
                "localqueues",
                NAMESPACE,
                {"kind": "LocalQueue", "metadata": {"name": "bench"}, "spec": {"clusterQueue": "bench"}},
            ),
        ]
        for plural, namespace, body in queue_objects:
            body["apiVersion"] = "kueue.x-k8s.io/v1beta2"
            if namespace:
                custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, plural, body)
            else:
                custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, body)
        storage = {
            "uri": "s3://kubetune/bench",
            "endpoint": cluster.s3_endpoint,
            "credentialsSecret": CREDENTIALS_SECRET,
        }

        def all_running(name: str) -> bool:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"kubetune.io/experiment={name}").items
            return sum(1 for p in pods if p.status.phase == "Running") == 4

        def finished(name: str) -> bool:
            body = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", NAMESPACE, "experiments", name)
            return (body.get("status") or {}).get("phase") in ("Succeeded", "Failed")

        starts: dict[str, list[float]] = {"Kueue": [], "no queue": []}
        for i in range(rounds):
            for case in starts:
                name = f"kq-{i}" if case == "Kueue" else f"plain-{i}"
                spec = {
                    "trainable": {"source": SLEEPER, "name": "train"},
                    "config": {"sleep_s": 3},
                    "metric": "x",
                    "mode": "max",
                    "storage": storage,
                    "resourcesPerTrial": {"cpu": "100m", "workers": {"replicas": 3, "cpu": "100m"}},
                    **({"queueName": "bench"} if case == "Kueue" else {}),
                }
                body = {"apiVersion": "kubetune.io/v1alpha1", "kind": "Experiment", "metadata": {"name": name}}
                started = time.monotonic()
                custom.create_namespaced_custom_object(
                    "kubetune.io", "v1alpha1", NAMESPACE, "experiments", {**body, "spec": spec}
                )
                wait_for(lambda: all_running(name), timeout=300, interval=0.05, what=f"{name} running")
                starts[case].append(time.monotonic() - started)
                wait_for(lambda: finished(name), timeout=300, interval=0.5, what=f"{name} finished")
        for case, times in starts.items():
            print(f"kueue: created -> gang of 4 running, {case}: median {statistics.median(times):.2f} s {times}")
        ratio = statistics.median(starts["Kueue"]) / statistics.median(starts["no queue"])
        print(f"ratio Kueue / no queue: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="reconcile", help="reconcile, realnode, kueue")
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    if "realnode" in args.phases:
        realnode(args.rounds, args.epochs)
    if "kueue" in args.phases:
        kueue(args.rounds)
    if "reconcile" not in args.phases:
        return
    gangs = run(100, 3, args.passes)
    single = run(400, 0, args.passes)
    print(f"{'case':<26} {'pods':>5} {'create pass ms':>15} {'steady pass ms':>15}")
    for name, (create_s, steady_s, pods) in (("100 gangs of 4", gangs), ("400 one-pod trials", single)):
        print(f"{name:<26} {pods:>5} {create_s * 1000:>15.1f} {steady_s * 1000:>15.2f}")
    print(
        f"ratio gangs/single: create pass {gangs[0] / single[0]:.2f}, steady pass {gangs[1] / single[1]:.2f} "
        "(per pass; the gangs' create pass builds 100 token Secrets instead of 400)"
    )


if __name__ == "__main__":
    main()
