"""Benchmark of per-decision latency: ``on_trial_result`` of each scheduler at 1,000 and 10,000 trials,
side by side with Ray Tune's own scheduler where it can run alone.

Run: ``.venv/bin/python bench/bench_schedulers.py [--trials 1000 10000] [--ray-python PATH]``.

Each trial reports iterations 1..5 (warm-up, not timed), then iteration 6 is timed call by call, for
every trial, in trial order: the scheduler decides with every other trial's history in place, as the
collector asks it. Goal (issue 11): p99 below 1 ms, so 5,000 results/s stay within the collector's
budget. The baseline is Ray Tune 2.x's implementation of the same scheduler with the same
parameters, fed the same results in a separate interpreter (``--ray-python``: a virtual environment
with ``ray[tune]``, e.g. ``python3 -m venv /tmp/ray && /tmp/ray/bin/pip install 'ray[tune]'``;
never a dependency of the project); Ray's median rule recomputes every trial's running mean per
call, so it is run at 1,000 trials only, and Ray's PBT and PB2 need their trial runner, so they have
no baseline (a PB2 decision leaves its explore step to the operator's worker process: ``bench_pb2.py``
times it). Prints p50/p99 per size and the ratio ours / Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubetune_operator.algorithms import create_scheduler  # noqa: E402

WARMUP, TIMED = 5, 6
SCHEDULERS = {
    "asha": {"time_attr": "training_iteration", "max_t": 100, "grace_period": 1, "reduction_factor": 3},
    "median_stopping_rule": {"time_attr": "training_iteration", "grace_period": TIMED, "min_samples_required": 3},
    "pbt": {
        "time_attr": "training_iteration",
        "perturbation_interval": TIMED,
        "hyperparam_mutations": {"lr": [0.001, 0.01, 0.1]},
    },
    "pb2": {
        "time_attr": "training_iteration",
        "perturbation_interval": TIMED,
        "hyperparam_bounds": {"lr": [0.001, 0.1]},
    },
}
RAY_CLASSES = {"asha": "ASHAScheduler", "median_stopping_rule": "MedianStoppingRule"}
RAY_MAX_TRIALS = {"median_stopping_rule": 1000}

#: Ray's side, run by --ray-python: the same loop over Ray's classes with stand-in trials.
RAY_SCRIPT = r"""
import json, sys, time
from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule
name, cls, params, n, warmup, timed = json.loads(sys.argv[1])
class Trial:
    def __init__(self, i): self.trial_id = f"t{i}"; self.status = "RUNNING"
    def __hash__(self): return hash(self.trial_id)
class Controller:
    def get_live_trials(self): return []
    def get_trials(self): return []
scheduler = {"ASHAScheduler": ASHAScheduler, "MedianStoppingRule": MedianStoppingRule}[cls](
    metric="acc", mode="max", **params)
trials = [Trial(i) for i in range(n)]
ctl = Controller()
for t in trials:
    scheduler.on_trial_add(ctl, t)
def result(i, it): return {"training_iteration": it, "acc": ((i * 7919) % 1000) / 1000 * it, "time_total_s": it}
for it in range(1, warmup + 1):
    for i, t in enumerate(trials):
        scheduler.on_trial_result(ctl, t, result(i, it))
out = []
for i, t in enumerate(trials):
    start = time.perf_counter_ns()
    scheduler.on_trial_result(ctl, t, result(i, timed))
    out.append(time.perf_counter_ns() - start)
print(json.dumps(out))
"""


def result(i: int, it: int) -> dict:
    return {"training_iteration": it, "acc": ((i * 7919) % 1000) / 1000 * it, "time_total_s": it}


def ours(name: str, n: int) -> list[int]:
    scheduler = create_scheduler(name, "acc", "max", **SCHEDULERS[name])
    ids = [f"t{i}" for i in range(n)]
    for i, trial in enumerate(ids):
        scheduler.on_trial_add(trial)
        if hasattr(scheduler, "set_trial_config"):
            scheduler.set_trial_config(trial, {"lr": [0.001, 0.01, 0.1][i % 3]})
    for it in range(1, WARMUP + 1):
        for i, trial in enumerate(ids):
            scheduler.on_trial_result(trial, result(i, it))
    out = []
    for i, trial in enumerate(ids):
        start = time.perf_counter_ns()
        scheduler.on_trial_result(trial, result(i, TIMED))
        out.append(time.perf_counter_ns() - start)
        if hasattr(scheduler, "take_exploit"):
            scheduler.take_exploit(trial)
    return out


def ray(python: str, name: str, n: int) -> list[int] | None:
    if name not in RAY_CLASSES or n > RAY_MAX_TRIALS.get(name, n):
        return None
    args = json.dumps([name, RAY_CLASSES[name], SCHEDULERS[name], n, WARMUP, TIMED])
    done = subprocess.run([python, "-c", RAY_SCRIPT, args], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"Ray's side failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def pct(values: list[int], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] / 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON", "/work/.bench-ray/bin/python"))
    args = parser.parse_args()
    have_ray = Path(args.ray_python).exists()
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; per-call latency of on_trial_result "
        f"at iteration {TIMED}, ms; baseline: Ray Tune's scheduler "
        f"({args.ray_python if have_ray else 'not found: no baseline'})"
    )
    for name in SCHEDULERS:
        for n in args.trials:
            mine = ours(name, n)
            theirs = ray(args.ray_python, name, n) if have_ray else None
            line = (
                f"  {name:<21} {n:>6} trials  ours p50 {pct(mine, 50):7.3f} p99 {pct(mine, 99):7.3f} "
                f"mean {statistics.fmean(mine) / 1e6:7.3f}"
            )
            if theirs:
                line += (
                    f" | Ray p50 {pct(theirs, 50):7.3f} p99 {pct(theirs, 99):7.3f}  "
                    f"ratio p99 {pct(mine, 99) / pct(theirs, 99):6.2f}"
                )
            else:
                line += " | no Ray baseline" + (
                    " (Ray's needs its trial runner)"
                    if name in ("pbt", "pb2")
                    else " (too slow at this size)"
                    if name in RAY_CLASSES
                    else ""
                )
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
