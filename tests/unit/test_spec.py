"""The typed Experiment spec (kubetune_operator.experiment_spec): the CRD's defaults in one place, and clear errors."""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest_crds import root_schema, walk

from kubetune.env import CheckpointPolicy
from kubetune_operator.builders import DEFAULT_CPU, DEFAULT_GPU_RESOURCE
from kubetune_operator.experiment_spec import ContainerTrial, ExperimentSpec

# CRD path -> the default the operator applies when the API server did not
OPERATOR_DEFAULTS = {
    ".spec.numSamples": ExperimentSpec().num_samples,
    ".spec.searchAlgorithm.name": ExperimentSpec().search_algorithm.name,
    ".spec.scheduler.name": ExperimentSpec().scheduler.name,
    ".spec.suspend": ExperimentSpec().suspend,
    ".spec.failure.maxFailures": ExperimentSpec().failure.max_failures,
    ".spec.podRetentionPolicy.whenSucceeded": ExperimentSpec().pod_retention.when_succeeded,
    ".spec.podRetentionPolicy.whenFailed": ExperimentSpec().pod_retention.when_failed,
    **{f".spec.checkpoint.{f.name}": f.default for f in dataclasses.fields(CheckpointPolicy)},
    ".spec.resourcesPerTrial.cpu": int(DEFAULT_CPU),
    ".spec.resourcesPerTrial.gpu": 0,
    ".spec.resourcesPerTrial.gpuResourceName": DEFAULT_GPU_RESOURCE,
    ".spec.resourcesPerTrial.workers.cpu": int(DEFAULT_CPU),
    ".spec.resourcesPerTrial.workers.gpu": 0,
    ".spec.resourcesPerTrial.workers.scheduleTimeoutSeconds": ExperimentSpec().workers_schedule_timeout_s,
    ".spec.metricsCollector.kind": ContainerTrial(()).kind,
    ".spec.metricsCollector.format": ContainerTrial(()).format,
}


def test_every_crd_default_is_the_operators_default():
    crd = {
        path: node["default"]
        for path, node in walk(root_schema("Experiment"))
        if "default" in node and node["default"] != {}
    }
    assert crd == OPERATOR_DEFAULTS  # a default added to, changed in or dropped from one side fails here


def test_an_undefaulted_spec_reads_as_the_defaulted_one():
    defaulted = {
        "numSamples": 1,
        "searchAlgorithm": {"name": "basic"},
        "scheduler": {"name": "fifo"},
        "suspend": False,
        "failure": {"maxFailures": 0},
        "checkpoint": {},
        "resourcesPerTrial": {},
        "podRetentionPolicy": {"whenSucceeded": "Delete", "whenFailed": "Retain"},
    }
    assert ExperimentSpec.parse({}) == ExperimentSpec.parse(defaulted) == ExperimentSpec()


def test_fields_are_read_into_the_model():
    model = ExperimentSpec.parse(
        {
            "metric": "acc",
            "mode": "max",
            "numSamples": 4,
            "config": {"lr": {"uniform": [0, 1]}},
            "searchAlgorithm": {"name": "optuna", "seed": 3, "params": {"sampler": "tpe"}},
            "scheduler": {"name": "asha", "params": {"grace_period": 2}},
            "stop": {"training_iteration": 9},
            "goal": 0.9,
            "timeBudget": "1h30m",
            "maxConcurrentTrials": 2,
            "failure": {"maxFailures": -1, "maxFailedTrials": 3},
            "suspend": True,
            "podRetentionPolicy": {"whenFailed": "Delete"},
            "storage": {"uri": "s3://b/p"},
        }
    )
    assert (model.metric, model.mode, model.num_samples, model.goal) == ("acc", "max", 4, 0.9)
    assert (model.search_algorithm.name, model.search_algorithm.seed) == ("optuna", 3)
    assert model.scheduler.params == {"grace_period": 2} and model.stop == {"training_iteration": 9}
    assert (model.time_budget_s, model.max_concurrent_trials, model.suspend) == (5400, 2, True)
    assert (model.failure.max_failures, model.failure.max_failed_trials) == (-1, 3)
    assert model.pod_retention.deletes("Failed") and model.pod_retention.deletes("Succeeded")
    assert model.storage_uri == "s3://b/p"


MULTI = {
    "objectives": [{"metric": "loss", "mode": "min"}, {"metric": "latency", "mode": "min"}],
    "searchAlgorithm": {"name": "optuna"},
}


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"numSamples": 0}, "spec.numSamples must be >= 1"),
        ({"numSamples": 1.5}, "spec.numSamples must be an integer"),
        ({"failure": {"maxFailures": -2}}, "spec.failure.maxFailures must be >= -1"),
        ({"failure": {"maxFailedTrials": "3"}}, "spec.failure.maxFailedTrials must be an integer"),
        ({"goal": float("nan")}, "spec.goal must be a finite number"),
        ({"maxConcurrentTrials": True}, "spec.maxConcurrentTrials must be an integer"),
        ({"podRetentionPolicy": {"whenFailed": "Keep"}}, "whenFailed must be Retain or Delete"),
        ({"scheduler": {"name": "asha", "params": [1]}}, "spec.scheduler.params must be an object"),
        ({"searchAlgorithm": {"seed": "x"}}, "spec.searchAlgorithm.seed must be an integer"),
        ({"timeBudget": "soon"}, "soon"),
        ({"metric": "loss", "mode": "min", "bestTrialScope": "avg"}, "spec.bestTrialScope must be last or all"),
        ({"bestTrialScope": "all"}, "bestTrialScope all needs metric and mode"),
        ({**MULTI, "bestTrialScope": "all"}, "bestTrialScope all needs metric and mode"),
    ],
)
def test_bad_fields_are_named_in_the_error(spec, words):
    with pytest.raises(ValueError, match=words):
        ExperimentSpec.parse(spec)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"scheduler": {"name": "fifo"}},
        {"stoppers": [{"name": "maximum_iteration", "params": {"max_iter": 3}}]},
        {"stoppers": [{"name": "trial_plateau", "params": {"metric": "loss"}}]},
    ],
)
def test_a_multi_objective_spec_is_accepted(extra):
    model = ExperimentSpec.parse({**MULTI, **extra})
    assert model.multi_objective
    assert model.metric == ("loss", "latency") and model.mode == ("min", "min")
    assert not ExperimentSpec.parse({"metric": "loss", "mode": "min"}).multi_objective


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"searchAlgorithm": {"name": "basic"}}, "searchAlgorithm 'basic' (only optuna searches several objectives)"),
        ({"searchAlgorithm": None}, "searchAlgorithm 'basic'"),
        ({"scheduler": {"name": "asha"}}, "scheduler 'asha' (schedulers compare trials by one metric: use fifo)"),
        ({"goal": 0.1}, "goal (it is a value of one metric)"),
        ({"stoppers": [{"name": "experiment_plateau"}]}, "stopper 'experiment_plateau' without its own params.metric"),
        ({"mode": "min"}, "spec.objectives takes the place of spec.metric and spec.mode"),
        ({"metric": "loss", "mode": "min"}, "spec.objectives takes the place of spec.metric and spec.mode"),
        ({"objectives": [{"metric": "loss", "mode": "min"}]}, "spec.objectives: metric: a list of 2 to 8 result keys"),
        (
            {"objectives": [{"metric": "loss", "mode": "min"}, {"metric": "loss", "mode": "max"}]},
            "spec.objectives: metric: the objectives must be distinct non-empty strings",
        ),
        (
            {"objectives": [{"metric": "loss", "mode": "min"}, {"metric": "cost", "mode": "lowest"}]},
            "mode must be 'max' or 'min', got 'lowest'",
        ),
        (
            {"objectives": [{"metric": "loss", "mode": "min"}, {"metric": "cost"}]},
            "spec.objectives: mode must give one of max/min per metric",
        ),
    ],
)
def test_a_multi_objective_spec_is_refused_with_the_reason(extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ExperimentSpec.parse({**MULTI, **extra})


def test_every_reason_to_refuse_a_multi_objective_spec_is_named_at_once():
    with pytest.raises(ValueError) as err:
        ExperimentSpec.parse({**MULTI, "scheduler": {"name": "pbt"}, "goal": 1, "searchAlgorithm": {"name": "random"}})
    assert str(err.value).count(";") == 2 and str(err.value).startswith("spec.objectives lists 2 objectives")


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"metric": {"a": 1}, "mode": "max"}, "spec.metric must be a result key"),
        ({"metric": ["a", "b"], "mode": "max"}, "several objectives go in spec.objectives"),
        ({"metric": "", "mode": "max"}, "spec.metric must be a result key"),
        ({"metric": "a", "mode": "highest"}, "spec.mode must be 'max' or 'min'"),
    ],
)
def test_a_single_metric_and_mode_are_checked_where_the_schema_is_not_applied(spec, message):
    with pytest.raises(ValueError, match=message):
        ExperimentSpec.parse(spec)
