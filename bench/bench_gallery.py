"""Benchmark of Ray's example gallery: the wall time of each of Ray 2.60's ``ray/tune/examples`` that run here, with
``--smoke-test``, through kubetune on the local cluster (the script after docs/sdk.md's import rule, each in a
namespace of its own, as ``tests/integration/test_ray_gallery_on_the_cluster.py`` runs them) and through Ray Tune
itself on this machine (the script as Ray ships it), side by side in one invocation: the two sides alternate which
goes first from one example to the next; each line prints both times, their ratio and the load average.

Ray Tune lives in a benchmark-only environment (``bench_vs_ray.py``'s, ``~/.cache/kubetune/bench-ray-venv``, or
``--ray-python``), which needs ``optuna``, ``xgboost``, ``lightgbm``, ``hpbandster`` and ``ConfigSpace`` besides
``ray[tune]``: the examples' own libraries (installed there on first use when missing). Ray's side runs each example
as Ray's CI does, ``ray.init`` included: its cluster start is in its time, as kubetune's pods starting are in its.

Run: ``.venv/bin/python bench/bench_gallery.py [--examples a,b] [--ray-python PATH]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_vs_ray import ray_python  # noqa: E402
from kubernetes import client  # noqa: E402

from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.operator import OperatorProcess  # noqa: E402
from devcluster.ray_gallery import EXAMPLES, gallery_folder, port_gallery, run_example, script_env  # noqa: E402

#: The examples' own libraries Ray's side needs (package and module names alike).
EXAMPLE_LIBRARIES = ["optuna", "xgboost", "lightgbm", "hpbandster", "ConfigSpace"]
EXAMPLE_TIMEOUT_S = 600


def with_libraries(python: str) -> str:
    """``python``, with the examples' libraries installed in its environment when one is missing."""
    if subprocess.run([python, "-c", "import " + ", ".join(EXAMPLE_LIBRARIES)], capture_output=True).returncode:
        subprocess.run([python, "-m", "pip", "install", "-q", *EXAMPLE_LIBRARIES], check=True)
    return python


def run_ray(python: str, gallery: Path, name: str, workdir: Path) -> float:
    """Seconds Ray Tune takes to run example ``name`` with ``--smoke-test`` (its results under ``workdir``)."""
    env = {**os.environ, "RAY_AIR_NEW_OUTPUT": "0", "HOME": str(workdir)}  # results in ~/ray_results there
    started = time.monotonic()
    done = subprocess.run(
        [python, str(gallery / f"{name}.py"), "--smoke-test"],
        cwd=gallery,
        env=env,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
    )
    wall = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"Ray's {name} exited {done.returncode}: {done.stderr[-1500:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--ray-python", default=None, help="a Python with ray[tune] (default: the bench venv)")
    args = parser.parse_args()
    names = [n for n in args.examples.split(",") if n]
    unknown = sorted(set(names) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown or not runnable here: {unknown}")
    python = with_libraries(ray_python(args.ray_python))
    gallery, workdir = gallery_folder(), Path(tempfile.mkdtemp(prefix="bench-gallery-"))
    port_gallery(gallery, workdir / "ported")
    crds = [str(p) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    totals = {"kubetune": 0.0, "ray": 0.0}
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=0, node_pods=24, crds=crds)) as cluster:
        env, secret = script_env(cluster, workdir, "gallery")
        env = {**os.environ, **env}
        core = client.CoreV1Api(cluster.api_client())
        operator = OperatorProcess(cluster, workdir / "operator.log")
        operator.start()
        try:
            print(f"{'example':<32} {'kubetune s':>10} {'Ray s':>8} {'ratio':>6}  load", flush=True)
            for i, name in enumerate(names):
                load = os.getloadavg()[0]
                sides = {
                    "kubetune": lambda n=name: run_example(n, workdir / "ported", env, core, secret)[2],
                    "ray": lambda n=name: run_ray(python, gallery, n, workdir),
                }
                order = ["kubetune", "ray"] if i % 2 == 0 else ["ray", "kubetune"]
                walls = {side: sides[side]() for side in order}
                for side, wall in walls.items():
                    totals[side] += wall
                ratio = walls["kubetune"] / walls["ray"]
                print(
                    f"{name:<32} {walls['kubetune']:>10.1f} {walls['ray']:>8.1f} {ratio:>6.2f}  "
                    f"{load:.1f}->{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            ratio = totals["kubetune"] / totals["ray"]
            print(f"{'all ' + str(len(names)):<32} {totals['kubetune']:>10.1f} {totals['ray']:>8.1f} {ratio:>6.2f}")
        finally:
            operator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
