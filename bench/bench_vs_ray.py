"""Benchmark of kubetune end to end against Ray Tune, side by side in one invocation (issue 13).

Each case runs the same trainable, configs, scheduler and concurrency through ``kubetune.run`` on the
local cluster (one cluster and one operator for the whole invocation; trial pods are processes of the
process kubelet) and through Ray Tune's ``tune.run`` on this machine (``ray.init`` done before the
clock starts, as the cluster is already up for kubetune). Rounds interleave the two sides; each case
prints both figures, the ratio kubetune / Ray and the load average before and after. Cases:

* ``fifo``: 16 trials of 10 steps of 0.1 s, 2 at a time: seconds (ideal 8 s).
* ``asha``: the same under ASHA (grace_period 2, reduction_factor 3, max_t 10, score = x * iteration
  over a grid of x): seconds, and each trial's last iteration on both sides (they must agree).
* ``digits``: ``examples/digits``, 8 learning rates, 4 at a time, ASHA, checkpoints every 4
  iterations and at the end: seconds and best accuracy.
* ``onestep`` and ``slots8``: 200 trials of one step, 2 and 8 at a time: trials per second.
* ``pbt`` and ``random32``: the digits example's 32 trials (learning rates spread log-evenly over
  1e-5..0.5), 20 epochs each, 8 at a time, under Population Based Training (``training_iteration``,
  perturbation_interval 4, ``lr`` mutated over loguniform(1e-5, 0.5)) and as the same search without
  it (FIFO): seconds and best accuracy, so PBT's gain is measured at the same budget on both sides.
* ``pbt_synch``: ``pbt`` with ``synch=True`` (Ray's synchronous PBT: trials wait at each interval for the
  population): seconds and best accuracy. The PBT cases print each side's number of exploits too.
* ``pb2``: the same 32 trials under PB2 (the same interval and quantile, ``lr`` chosen by the GP bandit
  within 1e-5..0.5): seconds and best accuracy.
* ``bohb``: the digits example under ``TuneBOHB`` with ``HyperBandForBOHB`` (max_t 9, reduction_factor 3:
  one band, 17 trials), ``lr`` loguniform(1e-5, 0.5) and ``alpha`` loguniform(1e-6, 1e-1), 4 at a time, seed 0:
  seconds and best accuracy. Ray's side needs ``hpbandster`` and ``ConfigSpace`` in its venv.

A Ray side not done within ``CASE_TIMEOUT_S`` (900 s) is killed with its Ray processes and shows as ``-``.

Ray Tune lives in a benchmark-only virtual environment that this script creates on first use
(``~/.cache/kubetune/bench-ray-venv``: ``pip install "ray[tune]" scikit-learn hpbandster ConfigSpace``) or that
``--ray-python`` names; it is never a dependency of kubetune or of ``make test``.

``--real-node`` (as root) runs kubetune's side on the real node instead (``devcluster.realnode``:
trials are containers of the ``examples`` image; the operator stays a local process, its collector on
the node's gateway), so the same case run with and without it gives the real node's cost beside the
process kubelet's, each against Ray in its own invocation.

Run: ``.venv/bin/python bench/bench_vs_ray.py [--rounds 3] [--cases fifo,asha,digits,onestep,slots8]
[--ray-python PATH] [--real-node]`` (``--cases pbt,pbt_synch,pb2,random32`` for the PBT and PB2 comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

import kubetune as tune  # noqa: E402
from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.cluster import S3_BUCKET  # noqa: E402
from devcluster.operator import OperatorProcess  # noqa: E402
from kubetune.schedulers import PB2, ASHAScheduler, HyperBandForBOHB, PopulationBasedTraining  # noqa: E402
from kubetune.sdk.client import Cluster as Connection  # noqa: E402
from kubetune.search.bohb import TuneBOHB  # noqa: E402

RAY_VENV = Path.home() / ".cache" / "kubetune" / "bench-ray-venv"
#: name -> (trials, steps, seconds per step, trials at a time, ASHA); digits is its own case.
CASES = {
    "fifo": (16, 10, 0.1, 2, False),
    "asha": (16, 10, 0.1, 2, True),
    "onestep": (200, 1, 0.0, 2, False),
    "slots8": (200, 1, 0.0, 8, False),
}
DIGITS_LRS = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]
#: The digits cases, which report the best accuracy too.
DIGITS_CASES = ("digits", "pbt", "pbt_synch", "pb2", "random32", "bohb")
#: The cases under PopulationBasedTraining (asynchronous, synchronous), which report the number of exploits too.
PBT_CASES = ("pbt", "pbt_synch")
#: The ``bohb`` case: HyperBandForBOHB's arguments, its one band's trials and the searched domains (loguniform).
BOHB = {"max_t": 9, "reduction_factor": 3}
BOHB_SAMPLES = 17
BOHB_SPACE = {"lr": (1e-5, 0.5), "alpha": (1e-6, 1e-1)}
#: The PBT cases' 32 learning rates: log-evenly from 1e-5 to 0.5 (most too small to learn in 20 epochs).
PBT_LRS = [round(1e-5 * (0.5 / 1e-5) ** (i / 31), 8) for i in range(32)]
PBT_LR_RANGE = (1e-5, 0.5)
CASE_TIMEOUT_S = 900


class Sleeper(tune.Trainable):
    """``step()`` sleeps ``config["sleep"]`` seconds and reports ``score = x * iteration``."""

    def step(self):
        time.sleep(self.config["sleep"])
        return {"score": self.config["x"] * (self.iteration + 1)}


#: The Ray side of a case: the same trainable and arguments, written for ``ray.tune``; prints one JSON line.
RAY_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining
    from ray.tune.schedulers.pb2 import PB2

    class Sleeper(tune.Trainable):
        def step(self):
            time.sleep(self.config["sleep"])
            return {{"score": self.config["x"] * (self.iteration + 1)}}

    class Digits(tune.Trainable):
        def setup(self, config):
            from examples.digits import model
            self.digits, self.split = model, model.load_split()
            self.model = model.build_model(config)

        def step(self):
            self.digits.train_epoch(self.model, self.split, int(self.config["seed"]), epoch=self.iteration)
            return self.digits.evaluate(self.model, self.split)

        def save_checkpoint(self, checkpoint_dir):
            self.digits.save_model(self.model, checkpoint_dir)
            return checkpoint_dir

        def load_checkpoint(self, checkpoint_dir):
            self.model = self.digits.load_model(checkpoint_dir)

    args = json.loads(sys.argv[1])
    ray.init(num_cpus=args["concurrent"], include_dashboard=False, log_to_driver=False)
    kwargs = args["kwargs"]
    if args["asha"]:
        kwargs["scheduler"] = ASHAScheduler(**args["asha"])
    if args.get("pbt"):
        low, high = args["pbt"].pop("lr_range")
        mutations = {{"lr": tune.loguniform(low, high)}}
        kwargs["scheduler"] = PopulationBasedTraining(**args["pbt"], hyperparam_mutations=mutations)
    if args.get("pb2"):
        kwargs["scheduler"] = PB2(**args["pb2"])
    if args.get("bohb"):
        from ray.tune.schedulers import HyperBandForBOHB
        from ray.tune.search.bohb import TuneBOHB
        kwargs["config"].update({{k: tune.loguniform(*v) for k, v in args["bohb"].pop("space").items()}})
        kwargs["search_alg"], kwargs["scheduler"] = TuneBOHB(seed=0), HyperBandForBOHB(**args["bohb"])
    started = time.monotonic()
    analysis = tune.run(Digits if args["digits"] else Sleeper, verbose=0, storage_path={storage!r}, **kwargs)
    wall = time.monotonic() - started
    last = [t.last_result.get("training_iteration") for t in analysis.trials]
    best = max((t.last_result.get(args["metric"]) or 0) for t in analysis.trials)
    exploits = getattr(kwargs.get("scheduler"), "_num_perturbations", None)
    outcome = {{"wall_s": wall, "iterations": last, "best": best, "exploits": exploits}}
    print("BENCH " + json.dumps(outcome), flush=True)
    """
)


def ray_python(path: str | None) -> str:
    """The Ray venv's interpreter, creating the venv on first use."""
    if path:
        return path
    python = RAY_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating the benchmark-only Ray Tune environment in {RAY_VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(RAY_VENV)], check=True)
        packages = ["ray[tune]", "scikit-learn", "hpbandster", "ConfigSpace"]  # the last two: Ray's TuneBOHB
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return str(python)


def _case(
    config: dict,
    metric: str,
    iterations: int,
    concurrent: int,
    digits: bool,
    asha=None,
    pbt=None,
    pb2=None,
    bohb=None,
    **kwargs,
) -> dict:
    """One case: ``tune.run`` arguments (``config``, ``metric`` maximized, ``iterations`` each, ``concurrent`` at a
    time, further ``kwargs``), whether the trainable is the digits example (else the sleeper), and the ASHA or PBT
    arguments, if any, that both sides build their scheduler from."""
    return {
        "kwargs": {
            "config": config,
            "metric": metric,
            "mode": "max",
            "stop": {"training_iteration": iterations},
            "max_concurrent_trials": concurrent,
            "resources_per_trial": {"cpu": 1},
            **kwargs,
        },
        "asha": asha,
        "pbt": pbt,
        "pb2": pb2,
        "bohb": bohb,
        "concurrent": concurrent,
        "digits": digits,
        "metric": metric,
    }


def case_arguments(case: str) -> dict:
    """The arguments both sides pass to ``tune.run`` (configs as explicit grids: the same trials on both)."""
    if case == "bohb":
        config = {"hidden_units": 64, "batch_size": 32, "seed": 0}
        bohb = {**BOHB, "space": {k: list(v) for k, v in BOHB_SPACE.items()}}
        return _case(config, "mean_accuracy", BOHB["max_t"], 4, True, bohb=bohb, num_samples=BOHB_SAMPLES)
    if case in DIGITS_CASES:
        lrs = DIGITS_LRS if case == "digits" else PBT_LRS
        config = {"lr": tune.grid_search(lrs), "alpha": 1e-4, "hidden_units": 64, "batch_size": 32, "seed": 0}
        if case == "digits":
            asha = {"max_t": 12, "grace_period": 2, "reduction_factor": 2}
            return _case(config, "mean_accuracy", 12, 4, True, asha=asha, checkpoint_freq=4, checkpoint_at_end=True)
        pbt = {"time_attr": "training_iteration", "perturbation_interval": 4, "quantile_fraction": 0.25}
        return _case(
            config,
            "mean_accuracy",
            20,
            8,
            True,
            pbt={**pbt, "lr_range": list(PBT_LR_RANGE), "synch": case == "pbt_synch"} if case in PBT_CASES else None,
            pb2={**pbt, "hyperparam_bounds": {"lr": list(PBT_LR_RANGE)}} if case == "pb2" else None,
        )
    trials, steps, sleep, concurrent, asha = CASES[case]
    config = {"x": tune.grid_search([(trials - i) / trials for i in range(trials)]), "sleep": sleep}  # worse later
    asha_args = {"max_t": 10, "grace_period": 2, "reduction_factor": 3} if asha else None
    return _case(config, "score", steps, concurrent, False, asha=asha_args)


class CaseTimeout(Exception):
    """A side's run of a case did not end within :data:`CASE_TIMEOUT_S`."""


def run_ray(python: str, case: str, workdir: Path) -> dict:
    args = case_arguments(case)
    script = workdir / "ray_case.py"
    script.write_text(RAY_SCRIPT.format(root=str(ROOT), storage=str(workdir / "ray_results")))
    env = {**os.environ, "RAY_AIR_NEW_OUTPUT": "0", "PYTHONPATH": str(ROOT)}  # Ray workers import examples.digits
    proc = subprocess.Popen(
        [python, str(script), json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=workdir,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # Ray's own processes (GCS, raylet, agents) with it
        proc.communicate()
        raise CaseTimeout(f"not done within {CASE_TIMEOUT_S} s") from None
    line = next((x for x in stdout.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"Ray case {case} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return json.loads(line[len("BENCH ") :])


def run_kubetune(case: str, namespace: str) -> dict:
    args = case_arguments(case)
    kwargs = dict(args["kwargs"])
    if args["asha"]:
        kwargs["scheduler"] = ASHAScheduler(**args["asha"])
    if args.get("pbt"):
        pbt = {k: v for k, v in args["pbt"].items() if k != "lr_range"}
        mutations = {"lr": tune.loguniform(*PBT_LR_RANGE)}
        kwargs["scheduler"] = PopulationBasedTraining(**pbt, hyperparam_mutations=mutations)
    if args.get("pb2"):
        kwargs["scheduler"] = PB2(**args["pb2"])
    if args.get("bohb"):
        kwargs["config"] = {**kwargs["config"], **{k: tune.loguniform(*v) for k, v in BOHB_SPACE.items()}}
        kwargs["search_alg"], kwargs["scheduler"] = TuneBOHB(seed=0), HyperBandForBOHB(**BOHB)
    trainable = "examples.digits.trainable:DigitsTrainable" if args["digits"] else Sleeper
    name = f"{case.replace('_', '-')}-{uuid.uuid4().hex[:6]}"  # a Kubernetes name: no underscore
    started = time.monotonic()
    analysis = tune.run(
        trainable,
        name=name,
        namespace=namespace,
        storage={"uri": f"s3://{S3_BUCKET}/bench-vs-ray", "credentialsSecret": "s3"},
        verbose=0,
        poll_interval_s=0.2,
        **kwargs,
    )
    wall = time.monotonic() - started
    last = [t.last_result.get("training_iteration") for t in analysis.trials]
    best = max((t.last_result.get(args["metric"]) or 0) for t in analysis.trials)
    count = exploits(name, namespace) if case in PBT_CASES else None
    return {"wall_s": wall, "iterations": last, "best": best, "exploits": count}


def exploits(experiment: str, namespace: str) -> int:
    """How many PBT exploits the Experiment's Trials record (``status.perturbations``; at most 10 a trial)."""
    api = Connection.connect(namespace=namespace)
    return sum(len(t.get("status", {}).get("perturbations") or ()) for t in api.trials(api.get(experiment)))


def figure(case: str, outcome: dict) -> float:
    """The case's figure: trials per second for the one-step cases, else seconds."""
    return CASES[case][0] / outcome["wall_s"] if case in ("onestep", "slots8") else outcome["wall_s"]


def median(table: dict[tuple[str, str], list[float]], case: str, side: str) -> float | None:
    """The median of ``side``'s figures of ``case``; None when no round of it ended."""
    values = table.get((case, side))
    return statistics.median(values) if values else None


def cell(value: float | None, spec: str) -> str:
    """``value`` in ``spec``'s format, ``-`` for None."""
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="fifo,asha,digits,onestep,slots8")
    parser.add_argument("--ray-python", default=None, help="a Python with ray[tune] (default: create the bench venv)")
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="kubetune's trials in containers on the real node (root; images from devcluster.images) "
        "instead of the process kubelet",
    )
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES) - set(DIGITS_CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}")
    python = ray_python(args.ray_python)
    figures: dict[tuple[str, str], list[float]] = {}
    best: dict[tuple[str, str], list[float]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-vs-ray-"))
    crds = [str(p) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    config = ClusterConfig(nodes=1, gpus_per_node=0, node_pods=24, crds=crds, real_node=args.real_node)
    with Cluster(config) as cluster:
        env = cluster.env()
        os.environ.update(env)  # the user's shell after `eval $(python -m devcluster up)`
        core = client.CoreV1Api(cluster.api_client())
        namespace = "bench-vs-ray"
        core.create_namespace({"metadata": {"name": namespace}})
        secret = {"AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]}
        core.create_namespaced_secret(namespace, {"metadata": {"name": "s3"}, "stringData": secret})
        # on the real node trials run in the examples image (kubetune, scikit-learn, examples/)
        image = {"KUBETUNE_OPERATOR_TRIALS_DEFAULT_IMAGE": cluster.node.image("examples")} if args.real_node else {}
        operator = OperatorProcess(cluster, workdir / "operator.log", **image)
        operator.start()
        try:
            for rnd in range(args.rounds):
                for case in cases:
                    sides = [
                        ("kubetune", lambda c=case: run_kubetune(c, namespace)),
                        ("ray", lambda c=case: run_ray(python, c, workdir)),
                    ]
                    if rnd % 2:
                        sides.reverse()  # alternate which side goes first
                    for side, run in sides:
                        load_before = os.getloadavg()[0]
                        try:
                            outcome = run()
                        except CaseTimeout as exc:
                            print(f"round {rnd + 1} {case:<8} {side:<8} {exc}", flush=True)
                            continue
                        value = figure(case, outcome)
                        figures.setdefault((case, side), []).append(value)
                        unit = "trials/s" if case in ("onestep", "slots8") else "s"
                        extra = f", last iterations {sorted(outcome['iterations'])}" if case == "asha" else ""
                        if case in DIGITS_CASES:
                            best.setdefault((case, side), []).append(outcome["best"])
                            extra += f", best {outcome['best']:.4f}"
                        if case in PBT_CASES:
                            extra += f", exploits {outcome['exploits']}"
                        print(
                            f"round {rnd + 1} {case:<8} {side:<8} {value:8.2f} {unit}{extra} "
                            f"(load {load_before:.1f} -> {os.getloadavg()[0]:.1f})",
                            flush=True,
                        )
        finally:
            operator.stop()
    print("\n| case | figure | kubetune (median) | Ray Tune (median) | kubetune / Ray |")
    print("|---|---|---|---|---|")
    for case in cases:  # a side that timed out in every round shows as "-"
        ours, ray = (median(figures, case, side) for side in ("kubetune", "ray"))
        what = "trials/s (higher is better)" if case in ("onestep", "slots8") else "seconds (lower is better)"
        ratio = ours / ray if ours is not None and ray is not None else None
        print(f"| {case} | {what} | {cell(ours, '.2f')} | {cell(ray, '.2f')} | {cell(ratio, '.2f')} |")
    digits = [case for case in cases if case in DIGITS_CASES]
    if digits:
        print("\n| case | best mean_accuracy, kubetune (median) | Ray Tune (median) |")
        print("|---|---|---|")
        for case in digits:
            ours, ray = (median(best, case, side) for side in ("kubetune", "ray"))
            print(f"| {case} | {cell(ours, '.4f')} | {cell(ray, '.4f')} |")
    print(f"({args.rounds} rounds on {os.cpu_count()} CPUs; Ray side: {python})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
