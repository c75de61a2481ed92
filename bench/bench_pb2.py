"""Benchmark of PB2's explore step: its time against Ray Tune's own on the same data, and how long it holds
the operator's event loop (not at all: it runs in the worker process of ``kubetune_operator.explore_pool``)
against running it on the loop, as Ray's trial runner does.

Run: ``.venv/bin/python bench/bench_pb2.py [--rows 64 160 400] [--ray-python PATH]``.

The data are those of 8 trials perturbed every 4 iterations (``devcluster.testkit.population_rows``, the data
``tests/unit/test_schedulers_pb2.py`` compares with Ray on: reward grows with ``lr``, noise with ``m``), ``--rows``
rows in all; donor ``t3``; the same seed on both sides. Ray's side
(``--ray-python``: a virtual environment with ``ray[tune]`` and scikit-learn, never a dependency of the
project) times ``ray.tune.schedulers.pb2._explore`` on the same rows in its own interpreter. The event-loop
figure is the longest gap between ticks of a 1 ms timer while one step runs: in the worker (a step in flight,
the process already started), and called on the loop. Prints seconds per step, the ratio ours / Ray and the
gaps.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devcluster.testkit import population_rows  # noqa: E402  (the data the unit tests compare with Ray on)
from kubetune_operator import explore_pool as explorer  # noqa: E402
from kubetune_operator.schedulers.pb2_gp import select  # noqa: E402

BOUNDS = {"lr": [1e-4, 0.1], "m": [0.0, 1.0]}
SEED = 7


#: Ray's side, run by --ray-python: pb2._explore on the same rows, timed.
RAY_SCRIPT = (
    "import json, random, sys, time\nimport numpy as np, pandas as pd\n"
    "from ray.tune.schedulers.pb2 import _explore\n"
    + inspect.getsource(population_rows)  # the same rows on both sides
    + r"""
count, bounds, seed = json.loads(sys.argv[1])
rows = population_rows(0, count)
frame = pd.DataFrame([[r[0], r[1], *r[2], r[3]] for r in rows], columns=["Trial", "Time", *bounds, "Reward"])
np.random.seed(seed)
start = time.perf_counter()
new, _ = _explore(frame, bounds, None, "t3", "t5", {key: 0.5 for key in bounds})
print(json.dumps([time.perf_counter() - start, [new[key] for key in bounds]]))
"""
)


def job(count: int) -> dict:
    return {
        "rows": population_rows(0, count),
        "bounds": list(BOUNDS.values()),
        "donor": "t3",
        "current": None,
        "seed": SEED,
    }


def ray(python: str, count: int) -> tuple[float, list] | None:
    if not Path(python).exists():
        return None
    done = subprocess.run(
        [python, "-c", RAY_SCRIPT, json.dumps([count, BOUNDS, SEED])], capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise RuntimeError(f"Ray's side failed: {done.stderr[-2000:]}")
    seconds, values = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds, values


async def longest_gap(work) -> float:
    """The longest gap, in ms, between ticks of a 1 ms timer while ``work()`` (a coroutine) runs."""
    gaps, done = [], asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    await work()
    done.set()
    await ticker
    return max(gaps) * 1000


async def gaps(count: int) -> tuple[float, float]:
    class Ctl:  # the controller's side of explorer.step: one job, then its outcome
        namespace, name, outcome = "bench", "pb2", None

        def exploration(self):
            return None if self.outcome else {**job(count), "trial": "t5"}

        def explored(self, trial, outcome):
            self.outcome = outcome

    woken = asyncio.Event()
    warm = Ctl()
    explorer.step(warm, woken.set)  # start the worker (spawn, imports) before measuring
    await woken.wait()
    explorer.step(warm, lambda: None)

    async def in_worker() -> None:
        ctl, ended = Ctl(), asyncio.Event()
        explorer.step(ctl, ended.set)
        await ended.wait()
        explorer.step(ctl, lambda: None)

    async def on_loop() -> None:
        select(job(count))

    try:
        return await longest_gap(in_worker), await longest_gap(on_loop)
    finally:
        explorer.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[64, 160, 400])
    parser.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON", "/work/.bench-ray/bin/python"))
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; one PB2 explore step, seconds; "
        f"baseline: Ray Tune's pb2._explore ({args.ray_python if Path(args.ray_python).exists() else 'not found'})"
    )
    for count in args.rows:
        start = time.perf_counter()
        mine = select(job(count))
        seconds = time.perf_counter() - start
        theirs = ray(args.ray_python, count)
        line = f"  {count:>5} rows  ours {seconds:7.3f} s"
        if theirs:
            same = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(mine["values"], theirs[1]))
            line += f" | Ray {theirs[0]:7.3f} s  ratio {seconds / theirs[0]:5.2f}  same choice: {same}"
        worker_ms, loop_ms = asyncio.run(gaps(count))
        line += f" | longest event-loop gap: in the worker {worker_ms:6.1f} ms, on the loop {loop_ms:8.1f} ms"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
