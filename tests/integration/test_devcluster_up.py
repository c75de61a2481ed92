"""The developer loop of the README: ``python -m devcluster up``, ``eval`` its exports, then the digits
example through ``tune.run``, the ``kubetune`` command and ``kubectl apply``, all unchanged.

``up`` runs as a subprocess from a directory outside the checkout, without ``PYTHONPATH`` (the venv's
``.pth`` file finds the checkout), with its own ``KUBETUNE_DEVCLUSTER_DIR``: its own cluster, since
the chart's operator it installs would fight the session operator of ``conftest.py`` over
Experiments. Every later command runs in ``env -i bash`` after ``eval`` of the exports, from that
other directory: the only environment is what ``up`` printed. The digits example runs as it is
(8 trials of up to 12 epochs, 4 at a time: 24 to 51 s through ``tune.run`` and 23 to 27 s applied,
over two runs here), since the point is that the files users run need no change.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devcluster import build
from devcluster.cluster import S3_BUCKET
from devcluster.install import CREDENTIALS_SECRET, STORAGE_URI
from devcluster.operator import OPERATOR_NAMESPACE
from devcluster.testkit import wait_for
from tests.integration.support import s3_client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits"
PREFIX = STORAGE_URI.removeprefix(f"s3://{S3_BUCKET}/")


class Shell:
    """A fresh ``bash`` with nothing but ``up``'s exports, in a directory outside the checkout."""

    def __init__(self, exports: Path, cwd: Path):
        self.exports, self.cwd = exports, cwd

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        script = f'eval "$(cat {shlex.quote(str(self.exports))})" && cd {shlex.quote(str(self.cwd))} && {command}'
        return subprocess.run(
            ["env", "-i", "bash", "-c", script], capture_output=True, text=True, timeout=timeout, check=False
        )

    def ok(self, command: str, timeout: float = 60) -> str:
        proc = self.run(command, timeout)
        assert proc.returncode == 0, (
            f"{command} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout

    def json(self, command: str) -> dict:
        return json.loads(self.ok(command))


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """``python -m devcluster up`` from elsewhere; its exports in a file; ``down`` at the end."""
    state = tmp_path_factory.mktemp("devcluster-up") / "cluster"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["KUBETUNE_DEVCLUSTER_DIR"] = str(state)
    started = time.monotonic()
    up = subprocess.run(
        [sys.executable, "-m", "devcluster", "up"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
    )
    try:
        assert up.returncode == 0, up.stderr[-5000:]
        print(f"\n[devcluster up] cluster, chart and storage Secret: {time.monotonic() - started:.1f} s")
        exports = elsewhere / "exports.sh"
        exports.write_text(up.stdout)
        yield Shell(exports, elsewhere)
    finally:
        down = [sys.executable, "-m", "devcluster", "down"]
        subprocess.run(down, cwd=elsewhere, env=env, capture_output=True, timeout=120, check=False)


def exported(shell: Shell) -> dict[str, str]:
    """The environment of the shell after ``eval`` of the exports."""
    return dict(line.split("=", 1) for line in shell.ok("env").splitlines() if "=" in line)


def result_lines(shell: Shell, experiment: dict) -> dict[str, int]:
    """Trial name → number of results in its ``result.json``, for this incarnation of the Experiment."""
    meta = experiment["metadata"]
    prefix = f"{PREFIX}/{meta['namespace']}/{meta['name']}/{meta['uid'][:8]}/"
    s3 = s3_client(exported(shell))
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/result.json"):
                body = s3.get_object(Bucket=S3_BUCKET, Key=obj["Key"])["Body"].read()
                found[obj["Key"].split("/")[-2]] = len(body.splitlines())
    return found


def digits_gone(shell: Shell) -> None:
    """Delete the Experiment ``digits`` if there is one and wait until it and its Trials are gone."""
    shell.ok("kubectl delete experiment digits --ignore-not-found --wait=true --timeout=60s", timeout=90)
    wait_for(
        lambda: not shell.json("kubectl get trials -o json")["items"],
        timeout=90,
        interval=1,
        what="the Trials of the deleted Experiment to be collected",
    )


def test_the_chart_installed_the_operator_and_the_storage_secret(shell):
    pods = shell.json(f"kubectl get pods -n {OPERATOR_NAMESPACE} -l app.kubernetes.io/instance=kubetune -o json")
    assert [p["status"]["phase"] for p in pods["items"]] == ["Running"]
    assert pods["items"][0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert pods["items"][0]["spec"]["serviceAccountName"] == "kubetune-operator"
    crds = shell.ok("kubectl get crd -o name").split()
    assert {"customresourcedefinition.apiextensions.k8s.io/experiments.kubetune.io"} <= set(crds)
    secret = shell.json(f"kubectl get secret {CREDENTIALS_SECRET} -o json")
    assert sorted(secret["data"]) == ["AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL_S3", "AWS_SECRET_ACCESS_KEY"]
    python, kubetune, kubectl, helm = shell.ok("command -v python kubetune kubectl helm").split()
    assert [python, kubetune] == [os.path.join(os.path.dirname(sys.executable), n) for n in ("python", "kubetune")]
    assert [kubectl, helm] == [str(build.bin_dir() / "kubectl"), str(build.bin_dir() / "helm")]


def test_tune_run_script_and_the_kubetune_command(shell):
    digits_gone(shell)
    started = time.monotonic()
    out = shell.ok(f"python {shlex.quote(str(EXAMPLE / 'tune_digits.py'))}", timeout=600)
    print(f"\n[devcluster up] examples/digits/tune_digits.py: {time.monotonic() - started:.1f} s")
    assert "Best config: {" in out and "The best checkpoint, restored here: mean_accuracy" in out, out[-3000:]

    experiment = shell.json("kubetune get digits -o json")
    assert experiment["status"]["phase"] == "Succeeded"
    storage = experiment["spec"]["storage"]
    assert storage["uri"] == STORAGE_URI and storage["credentialsSecret"] == CREDENTIALS_SECRET
    results = result_lines(shell, experiment)
    assert len(results) == 8 and all(1 <= n <= 12 for n in results.values()), results
    assert max(results.values()) == 12  # ASHA lets the best trials run to the stop criterion

    listing = shell.ok("kubetune get")
    assert any(line.split()[:2] == ["digits", "Succeeded"] for line in listing.splitlines()), listing
    best = shell.json("kubetune best digits -o json")
    assert best["name"] == experiment["status"]["bestTrial"]["name"] and set(best["config"]) >= {"lr", "alpha"}
    deleted = shell.run("kubetune delete digits")
    assert deleted.returncode == 0 and "experiment.kubetune.io/digits deleted" in deleted.stderr, deleted.stderr
    wait_for(
        lambda: shell.run("kubectl get experiment digits").returncode != 0,
        timeout=60,
        interval=1,
        what="the operator to remove the deleted Experiment's finalizer",
    )
    assert "NotFound" in shell.run("kubectl get experiment digits").stderr


def test_kubectl_apply_of_the_example_manifest(shell):
    digits_gone(shell)
    started = time.monotonic()
    shell.ok(f"kubectl apply -f {shlex.quote(str(EXAMPLE / 'experiment.yaml'))}")

    def finished():
        status = shell.json("kubectl get experiment digits -o json").get("status") or {}
        return status.get("phase") in ("Succeeded", "Failed") and status

    status = wait_for(finished, timeout=600, interval=2, what="the applied Experiment to finish")
    print(f"\n[devcluster up] kubectl apply -f examples/digits/experiment.yaml: {time.monotonic() - started:.1f} s")
    assert status["phase"] == "Succeeded", status
    assert status["bestTrial"]["metricValue"] > 0.9
    results = result_lines(shell, shell.json("kubectl get experiment digits -o json"))
    assert len(results) == 8 and set(results.values()) == {12}, results  # no scheduler: all 12 epochs
