"""Benchmark of the driver pod: how late Ray's driver-side callbacks see each result, through kubetune (the
Experiment's driver pod) and through Ray Tune (its driver process) on this machine, side by side in one invocation.

One workload script, written as a Ray user writes it (``from ray import tune``), runs on both sides; kubetune's side
runs it after docs/sdk.md's import rule (``devcluster.ray_gallery.ported``), in a namespace of its own on the local
cluster. Each trial reports results carrying ``made_at`` (``time.time()`` in the trial when it reported); the two
sides alternate which goes first from one case to the next. Cases:

- ``callback``: a ``tune.Callback`` whose ``on_trial_result`` notes ``time.time() - result["made_at"]``: the lag of
  each result from its trial to the driver's callback, p50/p99/max, and the run's wall time.
- ``plain``: the same trials without a callback (kubetune starts no driver pod): the wall time the driver pod adds.
- ``mlflow``: Ray's ``MLflowLoggerCallback`` against a real ``mlflow server`` (``devcluster.testkit.tracking_server``)
  with two trials reporting 500 results/s each: the results logged against those made (lost: goal 0) and, per
  result, the time MLflow stamped it with less its ``made_at`` (the lag of the last result too).

Both sides run on one machine, so the trial's and the driver's clocks are the same clock. Ray Tune lives in the
benchmark-only environment of ``bench_vs_ray.py`` (``~/.cache/kubetune/bench-ray-venv``, or ``--ray-python``), with
``mlflow-skinny`` installed there on first use.

Run: ``.venv/bin/python bench/bench_driver.py [--cases callback,plain,mlflow] [--ray-python PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_vs_ray import ray_python  # noqa: E402
from kubernetes import client  # noqa: E402

from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.operator import OperatorProcess  # noqa: E402
from devcluster.ray_gallery import ported, run_example, script_env  # noqa: E402
from devcluster.testkit import tracking_server  # noqa: E402

#: ``{case: (trials, results per trial, seconds between a trial's results)}``; two trials run at a time.
CASES = {"callback": (4, 50, 0.1), "plain": (4, 50, 0.1), "mlflow": (2, 1000, 0.002)}

#: The workload, as a Ray user writes it; its settings come in ``BENCH_*`` variables, its figures go out as one
#: ``BENCH {...}`` line.
WORKLOAD = '''
import json, os, sys, time, uuid

from ray import tune
from ray.air.integrations.mlflow import MLflowLoggerCallback

CASE, TRIALS, RESULTS, INTERVAL = (os.environ["BENCH_" + k] for k in ("CASE", "TRIALS", "RESULTS", "INTERVAL"))


def trainable(config):
    for _ in range(config["results"]):
        if config["interval"]:
            time.sleep(config["interval"])
        tune.report({"score": config["x"], "made_at": time.time()})


class Lag(tune.Callback):
    """Each result's lag from its trial to this callback; written where ``out`` says at the experiment's end."""

    def __init__(self, out):
        self.out, self.lags = out, []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.lags.append(time.time() - result["made_at"])

    def on_experiment_end(self, trials, **info):
        body = json.dumps(self.lags).encode()
        if self.out.startswith("s3://"):  # the driver pod: to the experiment's storage
            from kubetune.storage import open_storage

            open_storage(self.out).put_bytes(self.out, body)
        else:
            with open(self.out, "wb") as f:
                f.write(body)


on_kubetune = tune.__name__ == "kubetune"
run_id = uuid.uuid4().hex[:8]
out = (os.environ.get("KUBETUNE_STORAGE_URI", "") + f"/bench-driver/{run_id}.json") if on_kubetune else (
    os.path.abspath(f"lags-{run_id}.json")
)
callbacks = {
    "callback": [Lag(out)],
    "plain": [],
    "mlflow": [MLflowLoggerCallback(os.environ.get("BENCH_MLFLOW"), experiment_name=f"bench-{run_id}")],
}[CASE]
started = time.time()
analysis = tune.run(
    trainable,
    name=f"bench-{CASE}-{run_id}",
    config={"x": tune.grid_search(list(range(int(TRIALS)))), "results": int(RESULTS), "interval": float(INTERVAL)},
    metric="score",
    mode="max",
    max_concurrent_trials=2,
    callbacks=callbacks,
    verbose=0,
)
figures = {"wall_s": time.time() - started, "trials": len(analysis.trials)}
if CASE == "callback" and on_kubetune:
    from kubetune.storage import open_storage

    figures["lags"] = json.loads(open_storage(out).get_bytes(out))
elif CASE == "callback":
    figures["lags"] = json.loads(open(out).read())
elif CASE == "mlflow":
    from mlflow import MlflowClient

    mlflow = MlflowClient(tracking_uri=os.environ["BENCH_MLFLOW"])
    experiment = mlflow.get_experiment_by_name(f"bench-{run_id}")
    logged = []  # (made_at, lag) of each result logged
    for run in mlflow.search_runs([experiment.experiment_id]):
        stamped = {m.step: m.timestamp / 1000 for m in mlflow.get_metric_history(run.info.run_id, "score")}
        for m in mlflow.get_metric_history(run.info.run_id, "made_at"):
            if m.step in stamped:
                logged.append((m.value, stamped[m.step] - m.value))
    logged.sort()
    figures.update(
        lags=[lag for _, lag in logged],
        logged=len(logged),
        made_span_s=logged[-1][0] - logged[0][0] if logged else 0.0,
        last_lag=logged[-1][1] if logged else None,
    )
print("BENCH " + json.dumps(figures), flush=True)
'''


def run_ray(python: str, script: Path, env: dict, workdir: Path) -> dict:
    """The figures of ``script`` run by Ray Tune (its results under ``workdir``)."""
    done = subprocess.run(
        [python, str(script)],
        cwd=workdir,
        env={**env, "RAY_AIR_NEW_OUTPUT": "0", "HOME": str(workdir)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode:
        raise RuntimeError(f"Ray's side exited {done.returncode}: {done.stderr[-3000:]}")
    return figures_of(done.stdout)


def figures_of(output: str) -> dict:
    """The ``BENCH {...}`` line of a run's output."""
    (line,) = [line for line in output.splitlines() if line.startswith("BENCH ")]
    return json.loads(line[len("BENCH ") :])


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (inclusive method), in seconds."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def describe(case: str, side: str, figures: dict) -> str:
    """One line of ``side``'s figures for ``case``."""
    trials, results, _ = CASES[case]
    text = f"  {side:<9} wall {figures['wall_s']:6.1f} s"
    lags = figures.get("lags")
    if lags:
        text += (
            f"  lag p50 {quantile(lags, 0.5) * 1000:7.1f} ms  p99 {quantile(lags, 0.99) * 1000:7.1f} ms"
            f"  max {max(lags) * 1000:7.1f} ms  ({len(lags)} results)"
        )
    if case == "mlflow":
        made = trials * results
        rate = made / figures["made_span_s"] if figures["made_span_s"] > 0 else float("nan")
        text += f"  logged {figures['logged']}/{made} (lost {made - figures['logged']})  made at {rate:.0f} results/s"
        if figures["last_lag"] is not None:
            text += f"  last result's lag {figures['last_lag'] * 1000:.0f} ms"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--ray-python", default=None, help="a Python with ray[tune] (default: the bench venv)")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    if set(cases) - set(CASES):
        parser.error(f"unknown cases: {sorted(set(cases) - set(CASES))}")
    python = ray_python(args.ray_python)
    if subprocess.run([python, "-c", "import mlflow"], capture_output=True).returncode:
        subprocess.run([python, "-m", "pip", "install", "-q", "mlflow-skinny"], check=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-driver-"))
    (workdir / "ported").mkdir()
    (workdir / "workload.py").write_text(WORKLOAD)
    (workdir / "ported" / "workload.py").write_text(ported(WORKLOAD))
    crds = [str(p) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=0, node_pods=24, crds=crds)) as cluster:
        env, secret = script_env(cluster, workdir, "bench-driver")
        env = {**os.environ, **env}
        core = client.CoreV1Api(cluster.api_client())
        operator = OperatorProcess(cluster, workdir / "operator.log")
        operator.start()
        try:
            with tracking_server(workdir) as url:
                for i, case in enumerate(cases):
                    trials, results, interval = CASES[case]
                    settings = {
                        "BENCH_CASE": case,
                        "BENCH_TRIALS": str(trials),
                        "BENCH_RESULTS": str(results),
                        "BENCH_INTERVAL": str(interval),
                        "BENCH_MLFLOW": url,
                    }
                    case_env = {**env, **settings}
                    sides = {
                        "kubetune": lambda: figures_of(
                            run_example("workload", workdir / "ported", case_env, core, secret)[1]
                        ),
                        "ray": lambda: run_ray(python, workdir / "workload.py", case_env, workdir),
                    }
                    load = os.getloadavg()[0]
                    order = ["kubetune", "ray"] if i % 2 == 0 else ["ray", "kubetune"]
                    figures = {side: sides[side]() for side in order}
                    print(f"{case}: {trials} trials x {results} results, 2 at a time", flush=True)
                    for side in ("kubetune", "ray"):
                        print(describe(case, side, figures[side]), flush=True)
                    ratio = figures["kubetune"]["wall_s"] / figures["ray"]["wall_s"]
                    line = f"  wall ratio kubetune/Ray {ratio:.2f}"
                    if figures["kubetune"].get("lags") and figures["ray"].get("lags"):
                        p50 = quantile(figures["kubetune"]["lags"], 0.5) / quantile(figures["ray"]["lags"], 0.5)
                        p99 = quantile(figures["kubetune"]["lags"], 0.99) / quantile(figures["ray"]["lags"], 0.99)
                        line += f"  lag ratio p50 {p50:.2f} p99 {p99:.2f}"
                    print(f"{line}  load {load:.1f}->{os.getloadavg()[0]:.1f}", flush=True)
        finally:
            operator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
