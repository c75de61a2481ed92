"""Benchmark of the operator's reconcile pass with gangs (issue 24): 100 trials of 4 pods each (a head and 3
workers, ``spec.resourcesPerTrial.workers``) against 400 one-pod trials, the same 400 pods, in one invocation.

Both runs go through the real controller (``ExperimentController.plan``) with the pods as the operator's pod watch
shows them (``controller.pod_view`` of the manifests the plans created, phase Running). Timed: the pass that creates
every pod (trials adopted, manifests built, gangs' Services and workers included) and the steady pass with every
pod running (what the daemon repeats every 2 s while nothing changes; for gangs it folds 400 pods into 100 views).
The ratio is gangs over single pods: what folding and gang manifests cost.

Run: ``.venv/bin/python bench/bench_gangs.py [--passes 50]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubetune_operator.controller import ExperimentController, pod_view  # noqa: E402
from kubetune_operator.settings import Settings, TrialSettings  # noqa: E402

KEY = b"k" * 32
T0 = 1_800_000_000.0


def experiment(trials: int, workers: int) -> dict:
    resources = {"cpu": 1, **({"workers": {"replicas": workers, "cpu": 1}} if workers else {})}
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "bench", "namespace": "ns", "uid": "bench-uid-0001", "generation": 1},
        "spec": {
            "trainable": {"entrypoint": "m:T"},
            "image": "img",
            "config": {"lr": {"uniform": [0.0, 1.0]}},
            "numSamples": trials,
            "maxConcurrentTrials": trials,
            "metric": "acc",
            "mode": "max",
            "storage": {"uri": "s3://bucket/prefix"},
            "resourcesPerTrial": resources,
        },
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=50)
    args = parser.parse_args()
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
