"""The digits example without a cluster: the class and function trainables train for real on
scikit-learn's bundled digits, reproduce their metrics after a restore (also from a committed
``file://`` checkpoint URI), and the example's Experiment manifests fit the CRD and name loadable
trainables. The end-to-end run is ``tests/integration/test_digits_example.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest_crds import node_at, root_schema, validate

import kubetune
from examples.digits import model as digits
from examples.digits.demo import load_experiment, searched_keys
from examples.digits.function_trainable import train_digits
from examples.digits.trainable import DigitsTrainable
from kubetune.runtime.function_trainable import as_trainable_class
from kubetune.runtime.loader import import_entrypoint
from kubetune.search.variants import generate_variants

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
MANIFESTS = ("experiment.yaml", "experiment-function.yaml")
CONFIG = {"lr": 3e-3, "alpha": 1e-4, "hidden_units": 32, "batch_size": 32, "seed": 0}
METRICS = ("mean_accuracy", "mean_loss")


def metrics(result: dict) -> tuple:
    return tuple(result[k] for k in METRICS)


def run(trainable, n: int) -> list[dict]:
    return [trainable.train() for _ in range(n)]


@pytest.fixture
def function_trainable_class():
    return kubetune.wrap_function(train_digits)


def test_the_split_is_fixed_stratified_and_scaled():
    a, b = digits.load_split(), digits.load_split()
    assert a.x_train.shape == (1347, 64) and a.x_test.shape == (450, 64)
    assert np.array_equal(a.x_test, b.x_test) and np.array_equal(a.y_train, b.y_train)
    assert 0 <= a.x_train.min() and a.x_train.max() <= 1
    counts = np.bincount(a.y_test, minlength=10)
    assert counts.min() >= 43 and counts.max() <= 46  # each class about 25 % of its ~180 images


def test_the_class_trainable_learns_and_reports_its_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    trainable = DigitsTrainable(CONFIG)
    results = run(trainable, 6)
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert results[-1]["mean_accuracy"] > 0.93
    assert results[-1]["mean_loss"] < results[0]["mean_loss"] / 2
    assert results[-1]["neg_mean_loss"] == -results[-1]["mean_loss"]
    assert {r["gpu_ids"] for r in results} == {"2"}
    trainable.stop()


def test_without_gpus_gpu_ids_is_empty(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert DigitsTrainable(CONFIG).train()["gpu_ids"] == ""


def test_training_is_deterministic_for_a_seed_and_differs_across_seeds():
    first = [metrics(r) for r in run(DigitsTrainable(CONFIG), 3)]
    again = [metrics(r) for r in run(DigitsTrainable(CONFIG), 3)]
    other = [metrics(r) for r in run(DigitsTrainable({**CONFIG, "seed": 1}), 3)]
    assert first == again
    assert first != other


def test_a_restored_class_trainable_reports_the_same_metrics_and_continues_identically():
    original = DigitsTrainable(CONFIG)
    at_three = run(original, 3)[-1]
    path = original.save()
    later = run(original, 2)
    restored = DigitsTrainable(CONFIG)
    restored.restore(path)
    assert restored.iteration == 3
    assert tuple(restored.evaluate()[k] for k in METRICS) == metrics(at_three)
    assert [metrics(r) for r in run(restored, 2)] == [metrics(r) for r in later]


def test_a_committed_checkpoint_uri_restores_into_a_fresh_trainable(tmp_path):
    remote = (tmp_path / "remote").as_uri()
    original = DigitsTrainable(CONFIG, remote_checkpoint_dir=remote, logdir=str(tmp_path / "a"))
    reported = run(original, 4)[-1]
    original.save()
    fresh = DigitsTrainable(CONFIG, logdir=str(tmp_path / "b"))
    fresh.restore(f"{remote}/checkpoint_000004")
    assert fresh.iteration == 4
    assert fresh.evaluate()["mean_accuracy"] == reported["mean_accuracy"]


def test_the_function_trainable_matches_the_class_trainable_and_checkpoints_every_result(function_trainable_class):
    function = function_trainable_class(CONFIG)
    results = run(function, 4)
    assert [metrics(r) for r in results] == [metrics(r) for r in run(DigitsTrainable(CONFIG), 4)]
    assert all(r["should_checkpoint"] for r in results)
    function.stop()


def test_a_restored_function_trainable_resumes_after_its_checkpoint(function_trainable_class):
    original = function_trainable_class(CONFIG)
    run(original, 3)
    path = original.save()
    later = run(original, 2)
    original.stop()
    resumed = function_trainable_class(CONFIG)
    resumed.restore(path)
    results = run(resumed, 2)
    assert [r["training_iteration"] for r in results] == [4, 5]
    assert [metrics(r) for r in results] == [metrics(r) for r in later]
    resumed.stop()


@pytest.mark.parametrize("manifest", MANIFESTS)
def test_the_manifests_fit_the_crd_and_name_loadable_trainables(manifest):
    body = yaml.safe_load((EXAMPLE / manifest).read_text())
    assert body["apiVersion"] == "kubetune.io/v1alpha1" and body["kind"] == "Experiment"
    # metadata is the API server's to check; the spec is ours
    assert validate(body["spec"], node_at(root_schema("Experiment"), ".spec"), ".spec") == []
    spec = body["spec"]
    assert issubclass(as_trainable_class(import_entrypoint(spec["trainable"]["entrypoint"])), kubetune.Trainable)
    assert (spec["metric"], spec["mode"]) == ("mean_accuracy", "max")
    assert 2 <= spec["maxConcurrentTrials"] <= 4 and spec["resourcesPerTrial"]["gpu"] == 1
    assert "maxFailures" in spec["failure"] and "training_iteration" in spec["stop"]
    assert spec["storage"] == {
        "uri": "s3://kubetune/experiments",
        "region": "us-east-1",
        "credentialsSecret": "s3-creds",
    }
    assert {"lr", "alpha", "hidden_units"} <= set(searched_keys(spec["config"]))
    variants = generate_variants(spec["config"], spec["numSamples"], seed=spec["searchAlgorithm"]["seed"])
    assert len(variants) == spec["numSamples"]
    for config, _ in variants:  # every sampled config builds a model
        assert digits.build_model(config).hidden_layer_sizes[0] in (32, 64, 128)


def test_the_class_manifest_runs_8_trials_with_periodic_checkpoints():
    spec = yaml.safe_load((EXAMPLE / "experiment.yaml").read_text())["spec"]
    assert spec["numSamples"] >= 8 and spec["checkpoint"]["frequency"] > 0
    assert spec["stop"]["training_iteration"] % spec["checkpoint"]["frequency"] == 0


def test_the_demo_fills_in_the_endpoint_and_finds_searched_keys_in_nested_spaces():
    body = load_experiment(EXAMPLE / "experiment.yaml", "http://127.0.0.1:9000")
    assert body["spec"]["storage"]["endpoint"] == "http://127.0.0.1:9000"
    assert searched_keys({"a": {"uniform": [0, 1]}, "b": 1, "c": {"d": {"choice": [1, 2]}, "e": 3}}) == ["a", "c/d"]
