"""Benchmark of Katib's API served by kubetune at scale (issue 31): a Katib ``grid`` Experiment of N one-step trials
(Katib stalls near 14,500 trials when its Suggestion object outgrows etcd's object limit, katib#1847), K at a time,
on its own local cluster (the process node: each trial is ``sh -c 'echo loss=<x>'``).

Prints the wall time from the create to Katib's ``Succeeded`` condition, the operator's peak RSS, and the size of the
largest objects kubetune writes for it: the Katib Experiment (its status lists every trial's name, as Katib's
does), the native Experiment and a Katib Trial. The baseline, run first in the same invocation on the same
cluster: the same trials as a native kubetune Experiment (no Katib layer), so the ratio is what serving Katib's
API costs.

Run: ``.venv/bin/python bench/bench_katib_scale.py [--trials 1000] [--slots 8]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.operator import OperatorProcess  # noqa: E402

TRIAL = ["/bin/sh", "-c", "echo loss=${trialParameters.x}"]


def katib_experiment(name: str, trials: int, slots: int) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "objective": {"type": "minimize", "objectiveMetricName": "loss"},
            "algorithm": {"algorithmName": "grid"},
            "parallelTrialCount": slots,
            "maxTrialCount": trials,
            "parameters": [
                {"name": "x", "parameterType": "int", "feasibleSpace": {"min": "1", "max": str(trials), "step": "1"}}
            ],
            "trialTemplate": {
                "primaryContainerName": "training-container",
                "trialParameters": [{"name": "x", "reference": "x"}],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [{"name": "training-container", "image": "bench", "command": TRIAL}],
                                "restartPolicy": "Never",
                            }
                        }
                    },
                },
            },
        },
    }


def native_experiment(name: str, trials: int, slots: int) -> dict:
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "image": "bench",
            "trainable": {"command": ["/bin/sh", "-c", "echo loss=${config.x}"]},
            "config": {"x": {"grid_search": list(range(1, trials + 1))}},
            "metric": "loss",
            "mode": "min",
            "maxConcurrentTrials": slots,
            "resourcesPerTrial": {"cpu": "10m"},
        },
    }


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def wait(fn, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if fn():
            return time.monotonic()
        time.sleep(0.5)
    raise TimeoutError("the Experiment did not end in time")


def run(cluster: Cluster, api: client.ApiClient, trials: int, slots: int, katib: bool) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = "katib" if katib else "native"
    core.create_namespace({"metadata": {"name": namespace}})
    operator = OperatorProcess(
        cluster, Path(tempfile.mkdtemp()) / "operator.log", KUBETUNE_OPERATOR_KATIB_ENABLED=str(katib).lower()
    )
    operator.start()
    try:
        started = time.monotonic()
        if katib:
            body = katib_experiment("grid", trials, slots)
            custom.create_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", body)

            def ended() -> bool:
                exp = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", "grid")
                return any(c["type"] == "Succeeded" for c in (exp.get("status") or {}).get("conditions") or ())
        else:
            body = native_experiment("grid", trials, slots)
            custom.create_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", body)

            def ended() -> bool:
                exp = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "grid")
                return (exp.get("status") or {}).get("phase") in ("Succeeded", "Failed")

        took = wait(ended, 7200) - started
        out = {"wall_s": took, "rss_mib": peak_rss_mib(operator.proc.pid)}
        native = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "grid")
        out["native_bytes"] = size(native)
        out["phase"] = native["status"]["phase"]
        if katib:
            exp = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", "grid")
            mirrored = custom.list_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "trials")["items"]
            out.update(
                katib_bytes=size(exp),
                katib_trial_bytes=max(size(t) for t in mirrored),
                katib_trials=len(mirrored),
                succeeded=exp["status"].get("trialsSucceeded"),
            )
        return out
    finally:
        operator.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    args = parser.parse_args()
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    crds += sorted(str(p) for p in (ROOT / "crds" / "kubeflow.org").glob("*.yaml"))
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=0, crds=crds)) as cluster:
        api = cluster.api_client()
        base = run(cluster, api, args.trials, args.slots, katib=False)
        served = run(cluster, api, args.trials, args.slots, katib=True)
    n, k = args.trials, args.slots
    print(
        f"native grid Experiment, {n} one-step trials, {k} at a time: {base['phase']} in {base['wall_s']:.0f} s "
        f"({n / base['wall_s']:.2f} trials/s), operator peak RSS {base['rss_mib']:.0f} MiB, Experiment "
        f"{base['native_bytes']} bytes"
    )
    print(
        f"Katib grid Experiment (served), the same trials: Succeeded in {served['wall_s']:.0f} s "
        f"({n / served['wall_s']:.2f} trials/s; ratio to native {served['wall_s'] / base['wall_s']:.2f}), "
        f"{served['succeeded']} trials succeeded, {served['katib_trials']} Katib Trials; operator peak RSS "
        f"{served['rss_mib']:.0f} MiB"
    )
    print(
        f"largest objects: Katib Experiment {served['katib_bytes']} bytes (its status lists every trial), native "
        f"Experiment {served['native_bytes']} bytes, a Katib Trial {served['katib_trial_bytes']} bytes "
        "(etcd's limit: 1.5 MiB per object)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
