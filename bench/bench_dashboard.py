"""Benchmark of ``kubetune dashboard NAME`` (issue 32): Optuna Dashboard over an experiment read from S3, against
Optuna Dashboard over the same trials in a plain Optuna study.

Run: ``.venv/bin/python bench/bench_dashboard.py [--sizes 100 1000 10000] [--results 20]``. Starts moto's S3 server
in its own process (bench/moto_process.py); per size, writes an experiment of that many trials of ``--results``
results each with the runtime's own writer (``ResultLog``: ``params.json``, ``result.json``, ``progress.csv``), and
the same trials (their parameters, the metric at each iteration as intermediate values, the last as the value) into
a SQLite Optuna study, filled directly with ``add_trials``. Then, side by side:

* ours: a process that reads the experiment (:class:`kubetune.sdk.analysis.ExperimentAnalysis`) and serves it
  (:class:`kubetune.sdk.dashboard.Dashboard`, refresh every 1 s);
* baseline: a process that serves the SQLite study with Optuna Dashboard's WSGI application on the same server.

For each it times the first render, from starting the process to the first answer of Optuna Dashboard's study API
(``/api/studies/<id>``, what the page fetches to draw its trial list) that lists every trial: the time to import,
read and fill, and Optuna Dashboard's first answer, not the browser's drawing (the same for both); then an
update, from a new trial's result written (to S3 for ours, into the study for the baseline) to the API listing
it (Optuna Dashboard's server caches the trials for 2 s under 100 trials, 5 s under 500, 10 s above); and the
serving process's peak resident memory (``VmHWM``) at the end. Prints each figure and the ratio ours / baseline,
with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "trainable-runtime"), str(ROOT / "bench")]

from moto_process import moto_server  # noqa: E402

METRIC = "acc"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "trainable-runtime"), str(ROOT / "bench")]),
}
#: Seconds a served process may take to list every trial, or a new one.
WAIT_S = 900


def config(i: int) -> dict:
    return {"lr": 10 ** (-4 + 3 * ((i * 7919) % 1000) / 1000), "layers": 1 + i % 4}


def curve(i: int, results: int) -> list[float]:
    return [round(1 - (0.5 + 0.1 * (i % 4)) * 0.9 ** (step * (1 + i % 5)), 6) for step in range(1, results + 1)]


def write_trial(storage, exp_uri: str, i: int, results: int, workdir: Path) -> None:
    """Trial ``i`` as the runtime writes it."""
    from kubetune.runtime.results import ResultLog
    from kubetune.storage import join_uri

    name = f"bench-{i:05d}"
    trial_uri = join_uri(exp_uri, name)
    storage.put_bytes(join_uri(trial_uri, "params.json"), json.dumps(config(i)).encode())
    log = ResultLog(storage, trial_uri, workdir / name)
    for step, value in enumerate(curve(i, results), 1):
        log.append({METRIC: value, "training_iteration": step, "trial_id": name, "config": config(i)})
    log.sync()
    log.close()


def write_experiment(endpoint: str, trials: int, results: int, workdir: Path) -> str:
    import boto3

    from kubetune.storage import open_storage

    bucket = f"bench-{trials}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    exp_uri = f"s3://{bucket}/kubetune/bench/dash/0123abcd"
    storage = open_storage(exp_uri, endpoint)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: write_trial(storage, exp_uri, i, results, workdir), range(trials)))
    return exp_uri


def plain_trial(i: int, results: int):
    from optuna.distributions import FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    values = curve(i, results)
    return create_trial(
        state=TrialState.COMPLETE,
        value=values[-1],
        params=config(i),
        distributions={"lr": FloatDistribution(1e-4, 0.1, log=True), "layers": IntDistribution(1, 4)},
        intermediate_values=dict(enumerate(values, 1)),
        user_attrs={"kubetune_trial": f"bench-{i:05d}"},
    )


def write_plain(path: Path, trials: int, results: int) -> str:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    study = optuna.create_study(storage=url, study_name="bench/dash", direction="maximize")
    study.add_trials([plain_trial(i, results) for i in range(trials)])
    return url


def serve(kind: str, source: str, endpoint: str, port: int) -> None:
    """The served process: ``ours`` reads the experiment at ``source`` and serves it; ``optuna`` serves the
    Optuna storage URL ``source``."""
    if kind == "ours":
        from kubetune.sdk.analysis import ExperimentAnalysis
        from kubetune.sdk.dashboard import Dashboard

        analysis = ExperimentAnalysis(source, METRIC, "max", storage_endpoint=endpoint)
        Dashboard(analysis, port=port, refresh_s=1.0, settle_s=3600).serve_forever()
        return
    from wsgiref.simple_server import make_server

    import optuna
    from optuna_dashboard import wsgi

    from kubetune.sdk.dashboard import _QuietHandler, _ThreadingServer

    storage = optuna.storages.RDBStorage(source)
    make_server(
        "127.0.0.1", port, wsgi(storage), server_class=_ThreadingServer, handler_class=_QuietHandler
    ).serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def count(port: int, study_id: int) -> int | None:
    """How many trials Optuna Dashboard's study API lists now; None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study_id}?after=0", timeout=60) as r:
            return len(json.load(r)["trials"])
    except OSError:
        return None


def wait_for(port: int, study_id: int, trials: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while (count(port, study_id) or 0) < trials:
        if process.poll() is not None:
            raise RuntimeError(f"the served process ended with code {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{trials} trials not listed within {WAIT_S} s")
        time.sleep(0.05)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(kind: str, source: str, endpoint: str, trials: int, add) -> dict:
    """Start the served process, time its first render and an update (``add()`` writes trial ``trials``)."""
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, source, endpoint, str(port)], env={**os.environ, **ENV}
    )
    try:
        study_id = 0 if kind == "ours" else 1  # InMemoryStorage counts from 0, RDBStorage from 1
        wait_for(port, study_id, trials, process)
        first = time.monotonic() - started
        written = time.monotonic()
        add()
        wait_for(port, study_id, trials + 1, process)
        update = time.monotonic() - written
        return {"first_s": first, "update_s": update, "rss_mb": peak_rss_mb(process.pid)}
    finally:
        process.terminate()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--results", type=int, default=20)
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, source, endpoint, port = args.serve
        serve(kind, source, endpoint, int(port))
        return 0
    os.environ.update({k: v for k, v in ENV.items() if k != "PYTHONPATH"})
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.results} results a trial")
    print("first render: process start to Optuna Dashboard's study API listing every trial (not the browser)")
    header = f"{'trials':>7} {'':9} {'first render s':>15} {'update s':>9} {'peak RSS MB':>12}"
    print(header)
    with moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        from kubetune.storage import open_storage

        for trials in args.sizes:
            work = Path(tmp) / str(trials)
            t0 = time.monotonic()
            exp_uri = write_experiment(endpoint, trials, args.results, work)
            db = work / "plain.db"
            url = write_plain(db, trials, args.results)
            print(f"{trials:>7} (written in {time.monotonic() - t0:.0f} s)")
            storage = open_storage(exp_uri, endpoint)

            def add_ours(storage=storage, exp_uri=exp_uri, trials=trials, work=work):
                write_trial(storage, exp_uri, trials, args.results, work / "new")

            def add_plain(url=url, trials=trials):
                import optuna

                optuna.load_study(study_name="bench/dash", storage=url).add_trial(plain_trial(trials, args.results))

            ours = measure("ours", exp_uri, endpoint, trials, add_ours)
            base = measure("optuna", url, endpoint, trials, add_plain)
            for name, row in (("ours", ours), ("baseline", base)):
                print(f"{'':>7} {name:9} {row['first_s']:15.2f} {row['update_s']:9.2f} {row['rss_mb']:12.0f}")
            ratio = {k: ours[k] / base[k] for k in ours}
            print(
                f"{'':>7} {'ratio':9} {ratio['first_s']:15.2f} {ratio['update_s']:9.2f} {ratio['rss_mb']:12.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
