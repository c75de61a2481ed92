"""Benchmark of ``kubetune.sdk.analysis``: loading an experiment's results from storage and the first answers.

Stand-alone script (no pytest). Writes ``--trials`` trials of ``--results`` results each as the trial
pod writes them (a real :class:`kubetune.Trainable`'s ``train()`` results, with Ray's auto-filled fields,
through :class:`kubetune.runtime.results.ResultLog`, plus ``params.json``) into a local ``file://`` store,
and copies the objects into moto's S3 server running in a separate process. Then, in rounds that
alternate the order of the sides, it times:

* **ours, S3** and **ours, file://**: ``ExperimentAnalysis(path, "score", "max")`` (listing and fetching),
  then ``dataframe()`` and ``get_best_trial()`` (scope ``last``), the calls ``kubetune.run`` users make
  first. A second figure adds what needs every result parsed: ``dataframe("score", "max")`` and
  ``get_best_trial(scope="avg")``.
* **baseline**: ``pandas.read_json(path, lines=True)`` of every local ``result.json``, one file after the
  other (what a user's own script would do), and the best last score from those frames.

Medians over ``--rounds``; ratio = ours / baseline time (below 1: faster than the baseline). Goal: the
S3 load + ``dataframe()`` + ``get_best_trial()`` of 1,000 trials × 100 results under 5 s on 2 cores.

Run: ``.venv/bin/python bench/bench_analysis.py [--trials 1000] [--results 100] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pandas as pd
from moto_process import moto_server  # bench/moto_process.py, beside this script

from kubetune import Trainable
from kubetune.runtime.results import RESULT_FILE, ResultLog
from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.storage import join_uri, open_storage

AWS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
EXPERIMENT = ("bench", "tune", "0123abcd")  # namespace, experiment, uid[:8]


class Curve(Trainable):
    """A learning curve: ``score`` rises with the iteration towards a level set by the config."""

    def setup(self, config):
        self.rng = random.Random(config["seed"])

    def step(self):
        level = 1 - abs(self.config["lr"] - 0.01) * 10
        t = self.iteration + 1
        return {
            "score": level * (1 - 0.9**t) + self.rng.gauss(0, 0.01),
            "loss": 1 / t,
            "info": {"grad_norm": self.rng.random(), "lr_now": self.config["lr"] * 0.99**t},
        }


def write_experiment(store: Path, trials: int, results: int) -> tuple[str, int]:
    """Write the trials under ``file://<store>``; return the experiment URI and the bytes of result.json."""
    storage_uri = f"file://{store}"
    storage = open_storage(storage_uri)
    exp = join_uri(storage_uri, *EXPERIMENT)
    work = store.parent / "work"
    rng = random.Random(0)
    for index in range(trials):
        name = f"tune-{index:05d}"
        trial_uri = join_uri(exp, name)
        config = {
            "lr": rng.uniform(0.001, 0.1),
            "layers": rng.choice([2, 3, 4]),
            "seed": index,
            "optimizer": {"name": rng.choice(["adam", "sgd"]), "momentum": rng.uniform(0.8, 0.99)},
        }
        trainable = Curve(config=config, trial_id=name, trial_name=name, logdir=str(work / name / "logdir"))
        log = ResultLog(storage, trial_uri, work / name / "results")
        storage.put_bytes(join_uri(trial_uri, "params.json"), json.dumps(config).encode())
        for _ in range(results):
            log.append(trainable.train())
        log.sync()
        log.close()
    shutil.rmtree(work)
    size = sum(p.stat().st_size for p in store.rglob(RESULT_FILE))
    return exp, size


def copy_to_s3(store: Path, endpoint: str) -> str:
    """Put every object of the local store into bucket ``bench`` (16 threads); return the experiment URI."""
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    s3 = open_storage("s3://bench", endpoint=endpoint)
    files = [p for p in store.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: s3.put_bytes(f"s3://bench/{p.relative_to(store).as_posix()}", p.read_bytes()), files))
    return join_uri("s3://bench", *EXPERIMENT)


def ours(path: str, endpoint: str | None) -> tuple[float, float, str]:
    """(load + dataframe() + get_best_trial() seconds, then + full-history calls seconds, best trial)."""
    start = time.perf_counter()
    analysis = ExperimentAnalysis(path, "score", "max", storage_endpoint=endpoint)
    frame = analysis.dataframe()
    best = analysis.get_best_trial()
    first = time.perf_counter() - start
    assert len(frame) == len(analysis.trials) and "config/optimizer/name" in frame
    analysis.dataframe("score", "max")
    analysis.get_best_trial(scope="avg")
    return first, time.perf_counter() - start, best.trial_id


def baseline(store: Path) -> tuple[float, str]:
    """pandas.read_json(lines=True) of every local result.json, then the best last score."""
    start = time.perf_counter()
    frames = {p.parent.name: pd.read_json(p, lines=True) for p in sorted(store.rglob(RESULT_FILE))}
    best = max(frames, key=lambda name: frames[name]["score"].iloc[-1])
    return time.perf_counter() - start, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--results", type=int, default=100, help="results per trial")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(AWS)
    workdir = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    moto = contextlib.ExitStack()
    try:
        store = workdir / "store"
        started = time.perf_counter()
        local_exp, size = write_experiment(store, args.trials, args.results)
        endpoint = moto.enter_context(moto_server())
        s3_exp = copy_to_s3(store, endpoint)
        print(
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.trials} trials x "
            f"{args.results} results, result.json {size / 1e6:.1f} MB in all, written in "
            f"{time.perf_counter() - started:.0f} s; moto S3 in another process"
        )
        times: dict[str, list[float]] = {k: [] for k in ("s3", "s3 full", "file", "file full", "baseline")}
        sides = ["s3", "file", "baseline"]
        for n in range(args.rounds):
            for side in sides[n % 3 :] + sides[: n % 3]:
                if side == "baseline":
                    seconds, best_base = baseline(store)
                    times["baseline"].append(seconds)
                    continue
                first, full, best = ours(s3_exp if side == "s3" else local_exp, endpoint if side == "s3" else None)
                times[side].append(first)
                times[f"{side} full"].append(full)
        assert best == best_base, (best, best_base)
    finally:
        moto.close()
        shutil.rmtree(workdir, ignore_errors=True)

    med = {key: statistics.median(value) for key, value in times.items()}
    base = med["baseline"]
    print(f"median of {args.rounds} rounds (ratio = ours / baseline time)")
    print(f"  baseline: pandas.read_json(lines=True) per local file   {base:7.2f} s")
    for side, label in (("s3", "S3     "), ("file", "file://")):
        print(
            f"  ours, {label}: load + dataframe() + get_best_trial()   {med[side]:7.2f} s   "
            f"ratio {med[side] / base:5.2f}" + ("   (goal < 5 s)" if side == "s3" else "")
        )
        print(
            f"  ours, {label}: + dataframe(metric, mode), scope avg    {med[side + ' full']:7.2f} s   "
            f"ratio {med[side + ' full'] / base:5.2f}"
        )
    print(f"  best trial {best} (both sides agree)")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
