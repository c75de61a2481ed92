"""Ray's example gallery on the local cluster: Ray 2.60's own ``ray/tune/examples/*.py`` (from the ``ray`` wheel on the
package index, read at test time into ``~/.cache/kubetune/ray-gallery``), each run as a user's script with
``--smoke-test`` after docs/sdk.md's import rule (``ray.tune.X``, ``ray.train.X`` and ``ray.air.X`` are ``kubetune.X``;
``import ray`` and ``ray.init()``/``ray.shutdown()`` go, there being no Ray cluster; an example's import of another
example becomes a plain import of that file). Each must exit 0 and print what it prints under Ray: its "Best ..."
lines, whose config is the config of the trial that is best by the Experiment's metric and mode (the last result of
each trial, Ray's ``get_best_result`` default). Each runs in its own namespace (two of them share the name
``hyperband_test``). The examples that cannot run here are listed, with the reason, in docs/ray-tune.md ("Ray's
example gallery"). Prints each example's wall time: the issue's gallery figure.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from devcluster.cluster import S3_BUCKET
from tests.integration.test_operator import GROUP, VERSION

RAY = "2.60.0"
CACHE = Path.home() / ".cache" / "kubetune" / "ray-gallery" / RAY
#: The examples that run here (docs/ray-tune.md lists the others, with why).
EXAMPLES = [
    "async_hyperband_example",
    "bohb_example",
    "custom_func_checkpointing",
    "hyperband_example",
    "hyperband_function_example",
    "lightgbm_example",
    "optuna_example",
    "optuna_multiobjective_example",
    "pb2_example",
    "pbt_example",
    "pbt_function",
    "tune_basic_example",
    "xgboost_example",
]
#: What a "Best ..." line of theirs prints before the config: ``Best hyperparameters found were:  {...}`` and others.
BEST_LINE = re.compile(
    r"^Best (?:hyperparameters(?: found(?: were)?)?(?: for (\w+) found were)?|model parameters):\s+(\{.*\})$"
)


@pytest.fixture(scope="module")
def gallery() -> Path:
    """Ray's examples folder, read once from Ray's wheel (downloaded from the package index, cached)."""
    examples = CACHE / "examples"
    if not (examples / "tune_basic_example.py").is_file():
        wheels = CACHE / "wheel"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"ray=={RAY}", "--no-deps", "-q", "-d", str(wheels)],
            check=True,
            timeout=600,
        )
        (wheel,) = wheels.glob("ray-*.whl")
        with zipfile.ZipFile(wheel) as zipped:
            for member in zipped.namelist():
                if member.startswith("ray/tune/examples/") and member.endswith(".py") and member.count("/") == 3:
                    (examples / Path(member).name).parent.mkdir(parents=True, exist_ok=True)
                    (examples / Path(member).name).write_bytes(zipped.read(member))
    return examples


def ported(source: str) -> str:
    """``source`` under docs/sdk.md's import rule; ``ray.init``/``ray.shutdown`` calls become ``pass``."""
    lines = []
    for line in source.splitlines():
        code, indent = line.strip(), line[: len(line) - len(line.lstrip())]
        if code == "import ray" or re.match(r"ray\.(init|shutdown)\(.*\)\s*(#.*)?$", code):
            lines.append(f"{indent}pass  # was: {code}")
            continue
        line = re.sub(r"^(\s*)from ray import (tune|train)$", r"\1import kubetune as \2", line)
        line = re.sub(r"\bfrom ray\.tune\.examples\.(\w+) import", r"from \1 import", line)
        line = re.sub(r"\bfrom ray\.(?:tune|train|air)\.", "from kubetune.", line)
        line = re.sub(r"\bfrom ray\.(?:tune|train|air) import", "from kubetune import", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_the_import_rule_rewrites_only_rays_names():
    assert ported("import ray\nfrom ray import tune\nfrom ray.tune.schedulers import ASHAScheduler\n") == (
        "pass  # was: import ray\nimport kubetune as tune\nfrom kubetune.schedulers import ASHAScheduler\n"
    )
    source = "    ray.init(num_cpus=2)  # force pausing\nfrom ray.tune.examples.pbt_function import f\nx = 'ray.init'\n"
    assert ported(source) == (
        "    pass  # was: ray.init(num_cpus=2)  # force pausing\nfrom pbt_function import f\nx = 'ray.init'\n"
    )
    assert ported("from ray.air import session\nfrom ray.train import Checkpoint\n") == (
        "from kubetune import session\nfrom kubetune import Checkpoint\n"
    )


def run_example(name: str, folder: Path, env: dict, core, secret: dict) -> tuple[str, str, float]:
    """Run example ``name`` in a namespace of its own (its kubeconfig's context names it); ``(namespace, its output,
    wall seconds)``."""
    namespace = f"g-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s3-creds"}, "stringData": secret})
    kubeconfig = folder / f"{name}.kubeconfig"
    kubeconfig.write_text(Path(env["KUBECONFIG"]).read_text())
    subprocess.run(
        ["kubectl", "config", "set-context", "--current", f"--namespace={namespace}"],
        env={**env, "KUBECONFIG": str(kubeconfig)},
        check=True,
        capture_output=True,
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(folder / f"{name}.py"), "--smoke-test"],
        env={**env, "KUBECONFIG": str(kubeconfig)},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=420,
    )
    wall = time.monotonic() - started
    assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-4000:])
    return namespace, done.stdout, wall


def best_lines(output: str) -> list[tuple[str | None, dict]]:
    """``(metric or None, config)`` of each "Best ..." line the example printed."""
    found = []
    for line in output.splitlines():
        match = BEST_LINE.match(line.strip())
        if match:
            found.append((match.group(1), ast.literal_eval(match.group(2))))
    return found


def test_rays_examples_run_as_under_ray_with_the_import_changed(cluster, operator, core, custom, gallery, tmp_path):
    folder = tmp_path / "examples"
    folder.mkdir()
    for source in gallery.glob("*.py"):
        (folder / source.name).write_text(ported(source.read_text()))
    env = {
        **cluster.env(),
        "HOME": str(tmp_path),
        "KUBETUNE_STORAGE_URI": f"s3://{S3_BUCKET}/gallery",
        "KUBETUNE_STORAGE_CREDENTIALS_SECRET": "s3-creds",
    }
    keys = cluster.env()
    secret = {k: keys[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    with ThreadPoolExecutor(2) as pool:  # two at a time: most of an example's time is its pods starting
        runs = dict(zip(EXAMPLES, pool.map(lambda n: run_example(n, folder, env, core, secret), EXAMPLES)))
    print()
    for name, (namespace, output, wall) in runs.items():
        print(f"[gallery] {name}: {wall:.1f} s")
        (experiment,) = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "experiments")["items"]
        assert experiment["status"]["phase"] == "Succeeded", (name, experiment["status"])
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"]
        assert trials and all(t["status"]["phase"] == "Succeeded" for t in trials), name
        printed = best_lines(output)
        assert printed, (name, output[-2000:])
        spec = experiment["spec"]
        modes = {o["metric"]: o["mode"] for o in spec.get("objectives", [])} or {spec["metric"]: spec["mode"]}
        for metric, config in printed:
            metric = metric or spec["metric"]  # "Best hyperparameters for gain": that objective's
            mode = modes[metric]
            ranked = [t for t in trials if metric in (t["status"].get("lastResult") or {})]
            best = (max if mode == "max" else min)(ranked, key=lambda t: t["status"]["lastResult"][metric])
            assert config == best["status"].get("config", best["spec"]["config"]), (name, metric, config)
    for namespace, _, _ in runs.values():
        core.delete_namespace(namespace, body=client.V1DeleteOptions(propagation_policy="Background"))
