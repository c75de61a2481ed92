"""Benchmark of the Experiment journal (``kubetune_operator.journal``): how long a restarted operator
takes to rebuild an Experiment's searcher and scheduler, and what the journal costs, at 1,000 and
10,000 trials.

Each case runs an Experiment through the real controller (trials of ``--results`` iterations,
100 at a time, every decision committed as the operator commits it) into ConfigMaps held in
memory with the API server's rules, then times what a restarted operator does before it can
decide again: take every Trial (``observe_trial``) and restore from the journal. The baseline,
measured in the same invocation, is the same restore from a journal that kept every entry and
no snapshot (replaying the whole history): the ratio is what snapshots save. Also printed: the
journal's size and ConfigMap count, commits per second, the status size, and the process's peak
RSS. Goal (issue 9): a restart resumes an Experiment of 10,000 trials in < 10 s.

Run: ``.venv/bin/python bench/bench_journal.py [--trials 1000 10000] [--results 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.testkit import ConfigMaps, experiment_object  # noqa: E402
from kubetune.env import OUTCOME_COMPLETED, OUTCOME_STOPPED  # noqa: E402
from kubetune_operator import journal  # noqa: E402
from kubetune_operator.controller import ExperimentController  # noqa: E402
from kubetune_operator.podview import PodView  # noqa: E402
from kubetune_operator.registry import Registry  # noqa: E402
from kubetune_operator.settings import Settings  # noqa: E402

KEY = b"k" * 32
CASES = {
    "asha+basic": (
        {"name": "asha", "params": {"grace_period": 1, "reduction_factor": 3, "max_t": 100}},
        {"name": "basic", "seed": 1},
    ),
    "median+basic": (
        {"name": "median_stopping_rule", "params": {"time_attr": "training_iteration", "grace_period": 2}},
        {"name": "basic", "seed": 1},
    ),
    "asha+optuna(random)": (
        {"name": "asha", "params": {"grace_period": 1, "reduction_factor": 3, "max_t": 100}},
        {"name": "optuna", "seed": 1, "params": {"sampler": "random"}},
    ),
}


def experiment(trials: int, scheduler: dict, searcher: dict) -> dict:
    return experiment_object(
        "bench",
        "bench-uid-0001",
        config={"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
        numSamples=trials,
        metric="score",
        mode="max",
        maxConcurrentTrials=100,
        storage={"uri": "s3://b/p"},
        scheduler=scheduler,
        searchAlgorithm=searcher,
    )


def run(spec: dict, results: int, store: ConfigMaps) -> tuple[dict, float, int, int]:
    """Run the Experiment to its end; returns (Trials as the API holds them, seconds, commits, the
    final Experiment status's size in bytes)."""
    ctl = ExperimentController(spec, Settings(), KEY)
    ctl.restore([])
    registry = Registry(Settings(), KEY, store.write)
    trials: dict[str, dict] = {}
    pods: dict[str, PodView] = {}
    now, commits, started = 1_800_000_000.0, 0, time.perf_counter()

    async def commit():
        nonlocal commits
        await registry.commit(ctl)
        commits += 1

    async def main():
        nonlocal now
        while not ctl.finished:
            plan = ctl.plan(pods, now)
            await commit()
            for m in plan.create_trials:
                name = m["metadata"]["name"]
                m["metadata"].update(uid=f"u-{name}", ownerReferences=[{"uid": "bench-uid-0001"}])
                trials[name] = m
                ctl.trial_created(name, m["metadata"]["uid"])
            for m in plan.create_pods:
                labels = m["metadata"]["labels"]
                pods[m["metadata"]["name"]] = PodView(
                    m["metadata"]["name"], labels["kubetune.io/trial"], int(labels["kubetune.io/attempt"]), "Running"
                )
            for name, patch in plan.trial_status.items():
                trials[name].setdefault("status", {}).update({k: v for k, v in patch.items() if v is not None})
            for pod in [p for p in pods.values() if p.phase == "Running"]:
                config = trials[pod.trial]["spec"]["config"]
                outcome = OUTCOME_COMPLETED
                for it in range(1, results + 1):
                    value = (config["x"] + config["y"]) * it / results
                    if ctl.record_results(pod.trial, 0, [{"training_iteration": it, "score": value}], None) == "stop":
                        outcome = OUTCOME_STOPPED
                        break
                    await commit()
                pod.phase, pod.message = "Succeeded", json.dumps({"outcome": outcome, "iteration": it})
            now += 1.0

    asyncio.run(main())
    return trials, time.perf_counter() - started, commits, len(json.dumps(ctl.exp_status))


def restore(spec: dict, trials: dict, store: ConfigMaps) -> tuple[float, ExperimentController]:
    started = time.perf_counter()
    ctl = ExperimentController(spec, Settings(), KEY)
    for trial in trials.values():
        ctl.observe_trial(trial)
    ctl.restore(store.list())
    return time.perf_counter() - started, ctl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--results", type=int, default=10, help="iterations per trial")
    parser.add_argument(
        "--median-max-trials",
        type=int,
        default=2000,
        help="run the median rule only up to this many trials (it is O(all results) per result)",
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.results} results per trial")
    print(
        f"{'case':22} {'trials':>7} {'run s':>7} {'commits/s':>9} {'journal KiB':>11} {'CMs':>4} "
        f"{'restore s':>9} {'full replay s':>13} {'ratio':>6} {'status B':>8}"
    )
    for trials_n in args.trials:
        for case, (scheduler, searcher) in CASES.items():
            if case.startswith("median") and trials_n > args.median_max_trials:
                continue
            spec = experiment(trials_n, scheduler, searcher)
            store = ConfigMaps()
            trials, seconds, commits, status_bytes = run(spec, args.results, store)
            restored_s, ctl = restore(spec, trials, store)
            # Baseline: the same run with snapshots never due, so the journal keeps every entry.
            saved, journal.MIN_SNAPSHOT_INTERVAL_BYTES = journal.MIN_SNAPSHOT_INTERVAL_BYTES, 1 << 62
            try:
                full = ConfigMaps()
                run(spec, args.results, full)
            finally:
                journal.MIN_SNAPSHOT_INTERVAL_BYTES = saved
            replay_s, replayed = restore(spec, trials, full)
            assert json.dumps(replayed.decisions.scheduler.get_state(), sort_keys=True) == json.dumps(
                ctl.decisions.scheduler.get_state(), sort_keys=True
            ), "snapshot and replay disagree"
            print(
                f"{case:22} {trials_n:>7} {seconds:>7.1f} {commits / seconds:>9.0f} {store.size() / 1024:>11.0f} "
                f"{len(store.items):>4} {restored_s:>9.2f} {replay_s:>13.2f} {replay_s / restored_s:>6.1f} "
                f"{status_bytes:>8}",
                flush=True,
            )
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
