"""Ray Tune 2.60's example gallery (``ray/tune/examples/*.py``, read from the ``ray`` wheel on the package index into
``~/.cache/kubetune/ray-gallery``) as a user's scripts under docs/sdk.md's import rule: which examples run here, how
each is ported and run on the local cluster, and the "Best ..." lines they print. Used by
``tests/integration/test_ray_gallery_on_the_cluster.py`` and ``bench/bench_gallery.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

from devcluster.cluster import S3_BUCKET

RAY = "2.60.0"
CACHE = Path.home() / ".cache" / "kubetune" / "ray-gallery" / RAY
#: The examples that run here (docs/ray-tune.md lists the others, with why).
EXAMPLES = [
    "async_hyperband_example",
    "bohb_example",
    "custom_checkpointing_with_callback",
    "custom_func_checkpointing",
    "hyperband_example",
    "hyperband_function_example",
    "lightgbm_example",
    "optuna_define_by_run_example",
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


def gallery_folder() -> Path:
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
        examples.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zipped:
            for member in zipped.namelist():
                if member.startswith("ray/tune/examples/") and member.endswith(".py") and member.count("/") == 3:
                    (examples / Path(member).name).write_bytes(zipped.read(member))
    return examples


def port_gallery(gallery: Path, folder: Path) -> None:
    """Write each of ``gallery``'s scripts into ``folder``, :func:`ported`."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in gallery.glob("*.py"):
        (folder / source.name).write_text(ported(source.read_text()))


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


def script_env(cluster, home: Path, prefix: str) -> tuple[dict, dict]:
    """``(environment, Secret data)`` for a user's script against ``cluster``: its kubeconfig and S3 variables,
    ``HOME`` at ``home``, and the SDK's default storage ``s3://<bucket>/<prefix>`` with the credentials Secret
    ``s3-creds`` (the Secret's data, which :func:`run_example` creates in each namespace)."""
    keys = cluster.env()
    env = {
        **keys,
        "HOME": str(home),
        "KUBETUNE_STORAGE_URI": f"s3://{S3_BUCKET}/{prefix}",
        "KUBETUNE_STORAGE_CREDENTIALS_SECRET": "s3-creds",
    }
    return env, {k: keys[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


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
