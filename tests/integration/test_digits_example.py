"""The digits example end to end on the local cluster: ``examples/digits/experiment.yaml`` (class API)
and ``experiment-function.yaml`` (function API) applied as a user would, with real training on
scikit-learn's bundled digits in trial pods, checkpoints in moto's S3, and the best checkpoint
restored here into a fresh trainable."""

from __future__ import annotations

import datetime
import itertools
import json
from pathlib import Path

import pytest

import kubetune
from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from examples.digits import model as digits
from examples.digits.demo import load_experiment
from examples.digits.function_trainable import train_digits
from examples.digits.trainable import DigitsTrainable
from kubetune.checkpoint_store import COMMIT_MARKER, restore_checkpoint
from kubetune.storage import open_storage
from tests.integration.support import trial_prefix

GROUP, VERSION = "kubetune.io", "v1alpha1"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
#: The 4-GPU node of the test cluster; GPU ids are per node, so the GPU check pins the trials there.
GPU_NODE = "devcluster-node-0"


@pytest.fixture
def storage(cluster):
    """kubetune's own S3 storage with the cluster's credentials, for restoring checkpoints here."""
    env = cluster.env()
    return open_storage(
        f"s3://{S3_BUCKET}",
        endpoint=cluster.s3_endpoint,
        region=env["AWS_DEFAULT_REGION"],
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def run_example(
    custom, s3, cluster, namespace: str, path: Path, *, node: str | None = None, timeout_s: float = 480
) -> tuple[dict, dict, dict[str, dict], dict[str, list[dict]]]:
    """Apply the example at ``path`` (pinned to ``node`` if given), wait until it Succeeded, check that it ran
    ``numSamples`` trials of ``stop.training_iteration`` results each, and return
    ``(spec, experiment, trials by name, result.json lines by trial)``."""
    body = load_experiment(path, cluster.s3_endpoint)
    spec, name = body["spec"], body["metadata"]["name"]
    if node:
        spec.setdefault("template", {})["nodeSelector"] = {"kubernetes.io/hostname": node}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)

    def finished():
        exp = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)
        return exp if (exp.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    exp = wait_for(finished, timeout=timeout_s, interval=0.5, what=f"experiment {name} to finish")
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    trials = trials_of(custom, namespace)
    assert len(trials) == spec["numSamples"]
    lines = {t: result_lines(s3, trial_prefix(s3, S3_BUCKET, "experiments", namespace, name, t)) for t in trials}
    for trial, results in lines.items():
        assert [r["training_iteration"] for r in results] == list(range(1, spec["stop"]["training_iteration"] + 1)), (
            trial
        )
    return spec, exp, trials, lines


def trials_of(custom, namespace: str) -> dict[str, dict]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"]
    return {t["metadata"]["name"]: t for t in items}


def result_lines(s3, key_prefix: str) -> list[dict]:
    body = s3.get_object(Bucket=S3_BUCKET, Key=f"{key_prefix}/result.json")["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def committed_checkpoints(s3, key_prefix: str) -> list[str]:
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=key_prefix + "/")
        for o in page.get("Contents", [])
    ]
    return sorted(k.split("/")[-2] for k in keys if k.endswith("/" + COMMIT_MARKER))


def when(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def check_counts_and_best(exp: dict, trials: dict[str, dict], finals: dict[str, float]) -> dict:
    """The Experiment's counts and bestTrial agree with its Trials; return bestTrial."""
    status = exp["status"]
    assert status["trials"] == {
        "total": len(trials),
        "pending": 0,
        "running": 0,
        "paused": 0,
        "succeeded": len(trials),
        "failed": 0,
    }
    for name, trial in trials.items():
        assert trial["status"]["phase"] == "Succeeded", (name, trial["status"])
        assert trial["status"]["metricValue"] == finals[name]
    best = status["bestTrial"]
    assert best["metricValue"] == max(finals.values()) == finals[best["name"]]
    assert best["config"] == trials[best["name"]]["spec"]["config"]
    assert best["iteration"] == trials[best["name"]]["status"]["iteration"]
    assert best["checkpoint"] == trials[best["name"]]["status"]["checkpoint"]["uri"]
    return best


def test_digits_experiment_trains_every_trial_on_its_own_gpu_and_the_best_checkpoint_restores(
    cluster, operator, custom, s3, storage, namespace, storage_secret
):
    spec, exp, trials, lines = run_example(custom, s3, cluster, namespace, EXAMPLE / "experiment.yaml", node=GPU_NODE)
    name, iterations = exp["metadata"]["name"], spec["stop"]["training_iteration"]
    for trial, results in lines.items():
        assert all(0 <= r["mean_accuracy"] <= 1 and r["mean_loss"] > 0 for r in results)
        every = spec["checkpoint"]["frequency"]
        prefix = trial_prefix(s3, S3_BUCKET, "experiments", namespace, name, trial)
        assert committed_checkpoints(s3, prefix) == [f"checkpoint_{i:06d}" for i in range(every, iterations + 1, every)]
    finals = {t: results[-1]["mean_accuracy"] for t, results in lines.items()}
    best = check_counts_and_best(exp, trials, finals)
    assert best["metricValue"] > 0.9 and best["iteration"] == iterations

    # Trials that ran at the same time had different GPUs (each trial keeps its one GPU).
    gpus = {}
    for trial, results in lines.items():
        ids = {r["gpu_ids"] for r in results}
        assert len(ids) == 1 and len(next(iter(ids)).split(",")) == spec["resourcesPerTrial"]["gpu"], (trial, ids)
        gpus[trial] = next(iter(ids))
    spans = {t: (when(tr["status"]["startTime"]), when(tr["status"]["completionTime"])) for t, tr in trials.items()}
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(sorted(trials), 2)
        if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    ]
    assert overlapping, spans  # maxConcurrentTrials > 1: some trials did run together
    assert all(gpus[a] != gpus[b] for a, b in overlapping), {t: (gpus[t], spans[t]) for t in trials}

    # The best checkpoint, restored into a fresh trainable, gives the accuracy the trial reported,
    # and training goes on from there.
    restored = DigitsTrainable(best["config"], storage=storage)
    restored.restore(best["checkpoint"])
    assert restored.iteration == best["iteration"]
    scores = restored.evaluate()
    assert scores["mean_accuracy"] == best["metricValue"]
    assert scores["mean_loss"] == pytest.approx(lines[best["name"]][-1]["mean_loss"], rel=1e-9)
    assert restored.train()["training_iteration"] == iterations + 1
    restored.stop()


def test_digits_function_experiment_succeeds_and_its_checkpoints_resume(
    cluster, operator, custom, s3, storage, namespace, storage_secret, tmp_path
):
    spec, exp, trials, lines = run_example(custom, s3, cluster, namespace, EXAMPLE / "experiment-function.yaml")
    name, iterations = exp["metadata"]["name"], spec["stop"]["training_iteration"]
    for trial in lines:
        # the function reports a checkpoint with every result, and each one is committed
        assert committed_checkpoints(s3, trial_prefix(s3, S3_BUCKET, "experiments", namespace, name, trial)) == [
            f"checkpoint_{i:06d}" for i in range(1, iterations + 1)
        ]
    best = check_counts_and_best(exp, trials, {t: r[-1]["mean_accuracy"] for t, r in lines.items()})

    local = tmp_path / "best"
    restore_checkpoint(storage, best["checkpoint"], local)
    model_dirs = [p.parent for p in local.rglob(digits.MODEL_FILE)]
    assert len(model_dirs) == 1
    assert (
        digits.evaluate(digits.load_model(str(model_dirs[0])), digits.load_split())["mean_accuracy"]
        == best["metricValue"]
    )
    resumed = kubetune.wrap_function(train_digits)(best["config"], storage=storage)
    resumed.restore(best["checkpoint"])
    result = resumed.train()
    assert result["training_iteration"] == iterations + 1 and result["iterations_since_restore"] == 1
    resumed.stop()
