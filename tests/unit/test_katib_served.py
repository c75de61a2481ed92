"""Katib's API served by kubetune, the pure mapping (kubetune_operator.katib_api): a Katib Experiment becomes the
native Experiment it owns, each native Trial's phase and reason become Katib's kind of trial and conditions, the
native Experiment's end becomes Katib's condition and reason, and what it writes is what Katib's own SDK
(kubeflow-katib 0.19.0, in .venv-katib) reads."""

from __future__ import annotations

import copy
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from devcluster.testkit import outside_a_pod
from kubetune_operator import katib_api as ka

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc)


def katib(name="random", path="hp-tuning/random.yaml") -> dict:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "tests/unit/data/katib" / path).read_text()) if d]
    doc["metadata"].update(name=name, namespace="ns", uid="katib-uid", creationTimestamp="2026-11-27T11:00:00Z")
    return doc


def native_trial(name: str, phase: str, reason: str | None = None, **status) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-11-27T11:00:01Z"},
        "spec": {"config": {"lr": 0.0125, "momentum": 0.5}},
        "status": {"phase": phase, **({"reason": reason} if reason else {}), **status},
    }


def test_the_native_experiment_is_the_conversion_owned_by_the_katib_experiment():
    source = katib()
    native = ka.native_experiment(source)
    assert native["metadata"] == {
        "name": "random",
        "namespace": "ns",
        "labels": {ka.LABEL_SERVED_FOR: "random", "app.kubernetes.io/managed-by": "kubetune"},
        "ownerReferences": [
            {
                "apiVersion": "kubeflow.org/v1beta1",
                "kind": "Experiment",
                "name": "random",
                "uid": "katib-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    assert native["spec"]["numSamples"] == 12 and native["spec"]["maxConcurrentTrials"] == 3
    assert ka.serves(native, source) and not ka.serves(native, {"metadata": {"uid": "another"}})
    assert source == katib()  # the Katib Experiment is not changed
    with pytest.raises(ka.KatibConversionError, match="pbt is Katib's generations"):
        ka.native_experiment(katib("pbt", "hp-tuning/simple-pbt.yaml"))
    hyperband = ka.native_experiment(katib("hb", "hp-tuning/hyperband.yaml"))
    assert hyperband["spec"]["searchAlgorithm"]["name"] == "katib-hyperband"


# Katib's defaultTrialTemplate.yaml of its trial-templates ConfigMap, as its manifests install it
DEFAULT_TRIAL_TEMPLATE = """
apiVersion: batch/v1
kind: Job
spec:
  template:
    spec:
      containers:
        - name: training-container
          image: docker.io/kubeflowkatib/mxnet-mnist:latest
          command:
            - "python3"
            - "/opt/mxnet-mnist/mnist.py"
            - "--batch-size=64"
            - "--lr=${trialParameters.learningRate}"
            - "--num-layers=${trialParameters.numberLayers}"
            - "--optimizer=${trialParameters.optimizer}"
      restartPolicy: Never
"""


def test_a_trial_template_in_a_labelled_config_map_runs_as_if_inline_and_anything_else_is_refused():
    source = katib("from-cm", "trial-template/trial-configmap-source.yaml")
    assert ka.template_source(source) == ("kubeflow", "trial-templates")
    config_map = {
        "metadata": {"name": "trial-templates", "labels": {"katib.kubeflow.org/component": "trial-templates"}},
        "data": {"defaultTrialTemplate.yaml": DEFAULT_TRIAL_TEMPLATE},
    }
    inline = ka.with_template(source, config_map)
    assert "configMap" not in inline["spec"]["trialTemplate"] and "configMap" in source["spec"]["trialTemplate"]
    native = ka.native_experiment(inline)
    assert native["spec"]["trainable"]["command"][-3:] == [
        "--lr=${config.lr}",
        "--num-layers=${config.num-layers}",
        "--optimizer=${config.optimizer}",
    ]
    unlabelled = {**config_map, "metadata": {"name": "trial-templates"}}
    refusals = {
        "no such ConfigMap": None,
        "needs the label katib.kubeflow.org/component: trial-templates": unlabelled,
        "no key 'defaultTrialTemplate.yaml'": {**config_map, "data": {}},
        "defaultTrialTemplate.yaml holds no object": {**config_map, "data": {"defaultTrialTemplate.yaml": "- a list"}},
    }
    for words, found in refusals.items():
        where = "spec.trialTemplate.configMap: kubeflow/trial-templates"
        with pytest.raises(ka.KatibConversionError, match=f"{where}: {words}"):
            ka.with_template(source, found)
    del source["spec"]["trialTemplate"]["configMap"]["configMapNamespace"]
    assert ka.template_source(source) == ("ns", "trial-templates")  # the Experiment's own namespace


@pytest.mark.parametrize(
    "phase, reason, kind",
    [
        ("Pending", "Starting", "Created"),
        ("Running", "Running", "Running"),
        ("Paused", "SchedulerPaused", "Running"),
        ("Succeeded", "Completed", "Succeeded"),
        ("Succeeded", "EarlyStopped", "EarlyStopped"),
        ("Succeeded", "GoalReached", "Killed"),
        ("Failed", "MetricMissing", "MetricsUnavailable"),
        ("Failed", "Error", "Failed"),
    ],
)
def test_each_native_phase_and_reason_is_katibs_kind_of_trial(phase, reason, kind):
    trial = ka.katib_trial(katib(), native_trial("random-00000", phase, reason, lastResult={"loss": 0.25}))
    conditions = trial["status"]["conditions"]
    assert conditions[0]["type"] == "Created" and conditions[0]["status"] == "True"
    assert [c["type"] for c in conditions if c["status"] == "True"][-1] == kind
    assert trial["metadata"]["labels"][ka.LABEL_KATIB_EXPERIMENT] == "random"
    assert trial["spec"]["parameterAssignments"] == [
        {"name": "lr", "value": "0.0125"},
        {"name": "momentum", "value": "0.5"},
    ]
    assert trial["status"]["observation"] == {"metrics": [{"name": "loss", "latest": "0.25"}]}


def test_a_trials_observation_has_each_metrics_min_and_max_where_its_trial_keeps_their_range():
    """``bestTrialScope: all`` (Katib's default strategies): Katib's min, max and latest of each objective metric."""
    experiment = katib()
    experiment["spec"]["objective"]["additionalMetricNames"] = ["accuracy"]
    ranges = {
        "loss": {"min": 0.125, "max": 0.75},
        "accuracy": {"min": 0.5, "max": 0.875},
        "other": {"min": 1, "max": 2},
    }
    trial = native_trial("random-00000", "Succeeded", "Completed", lastResult={"loss": 0.25}, metricRange=ranges)
    assert ka.katib_trial(experiment, trial)["status"]["observation"] == {
        "metrics": [
            {"name": "loss", "min": "0.125", "max": "0.75", "latest": "0.25"},
            {"name": "accuracy", "min": "0.5", "max": "0.875"},  # not in the last result: no latest
        ]
    }


def test_a_trial_config_chosen_in_its_pod_or_by_pbt_is_what_katib_shows():
    trial = native_trial("random-00001", "Running", config={"lr": 0.03, "momentum": 0.75})
    assert ka.katib_trial(katib(), trial)["spec"]["parameterAssignments"][0] == {"name": "lr", "value": "0.03"}


def status_of(native_status: dict, trials: list[dict], num_samples: int = 12, previous: dict | None = None) -> dict:
    source = katib()
    if previous is not None:
        source["status"] = previous
    native = {"spec": {"numSamples": num_samples}, "status": native_status}
    return ka.katib_status(source, native, [ka.katib_trial(source, t) for t in trials], NOW)


def ended(reason: str, phase: str = "Succeeded") -> dict:
    kind = "Complete" if phase == "Succeeded" else "Failed"
    return {
        "phase": phase,
        "conditions": [{"type": kind, "status": "True", "reason": reason, "message": f"native {reason}"}],
        "completionTime": "2026-11-27T11:30:00Z",
    }


@pytest.mark.parametrize(
    "native, samples, condition",
    [
        (ended("AllTrialsCompleted"), 3, ("Succeeded", "ExperimentMaxTrialsReached")),
        (ended("AllTrialsCompleted"), 12, ("Succeeded", "ExperimentSuggestionEndReached")),  # a grid ran out
        (ended("GoalReached"), 12, ("Succeeded", "ExperimentGoalReached")),
        (ended("MaxFailedTrialsExceeded", "Failed"), 12, ("Failed", "ExperimentMaxFailedTrialsReached")),
        (ended("AllTrialsFailed", "Failed"), 12, ("Failed", "ExperimentFailed")),
    ],
)
def test_the_native_end_is_katibs_condition_and_reason(native, samples, condition):
    trials = [native_trial(f"random-0000{i}", "Succeeded", "Completed", lastResult={"loss": i}) for i in range(3)]
    status = status_of(native, trials, samples)
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Created", "True", "ExperimentCreated"),
        ("Running", "False", condition[1]),
        (condition[0], "True", condition[1]),
    ]
    assert status["completionTime"] == "2026-11-27T11:30:00Z"


def test_counts_lists_and_the_optimal_trial():
    trials = [
        native_trial("random-00000", "Succeeded", "Completed", lastResult={"loss": 0.5}),
        native_trial("random-00001", "Succeeded", "EarlyStopped", lastResult={"loss": 0.9}),
        native_trial("random-00002", "Running", "Running", lastResult={"loss": 0.7}),
        native_trial("random-00003", "Pending", "Starting"),
        native_trial("random-00004", "Failed", "Error", message="exit code 1"),
    ]
    running = {
        "phase": "Running",
        "bestTrial": {"name": "random-00000", "metricValue": 0.5},
        "conditions": [{"type": "Running", "status": "True", "reason": "TrialsRunning"}],
    }
    status = status_of(running, trials)
    assert {k: v for k, v in status.items() if k.startswith("trials") or k == "trials"} == {
        "trials": 5,
        "trialsSucceeded": 1,
        "trialsEarlyStopped": 1,
        "trialsRunning": 1,
        "trialsPending": 1,
        "trialsFailed": 1,
    }
    assert status["failedTrialList"] == ["random-00004"] and status["pendingTrialList"] == ["random-00003"]
    assert status["currentOptimalTrial"] == {
        "bestTrialName": "random-00000",
        "parameterAssignments": [{"name": "lr", "value": "0.0125"}, {"name": "momentum", "value": "0.5"}],
        "observation": {"metrics": [{"name": "loss", "latest": "0.5"}]},
    }
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running"] and "completionTime" not in status
    later = ka.katib_status(
        {**katib(), "status": status},
        {"spec": {"numSamples": 12}, "status": running},
        [ka.katib_trial(katib(), t) for t in trials],
        datetime(2026, 11, 28, tzinfo=timezone.utc),
    )
    assert later == status  # an Experiment that did not change gets the same status: no write


def test_a_refused_experiment_is_failed_with_the_reason():
    status = ka.refused_status(katib(), "spec.algorithm.algorithmName: pbt is ...", NOW)
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Created", "False", "ExperimentRefused"),
        ("Failed", "True", "ExperimentRefused"),
    ]
    assert all("pbt" in c["message"] for c in status["conditions"])


# Katib's SDK reads what kubetune wrote: its models, its condition check (utils.has_condition).
READ = """
import json, sys
from kubeflow.katib import models
from kubeflow.katib.api_client import ApiClient
from kubeflow.katib.utils import utils
objects = json.loads(sys.stdin.read())
api = ApiClient()
experiment = api.deserialize(utils.FakeResponse(objects["experiment"]), models.V1beta1Experiment)
trial = api.deserialize(utils.FakeResponse(objects["trial"]), models.V1beta1Trial)
best = experiment.status.current_optimal_trial
print(json.dumps({
    "succeeded": utils.has_condition(experiment.status.conditions, "Succeeded"),
    "trialSucceeded": utils.has_condition(trial.status.conditions, "Succeeded"),
    "best": [best.best_trial_name, [[p.name, p.value] for p in best.parameter_assignments]],
    "metrics": [[m.name, m.latest] for m in trial.status.observation.metrics],
    "label": trial.metadata.labels["katib.kubeflow.org/experiment"],
}))
"""


def test_katibs_sdk_reads_the_experiment_and_trials_kubetune_writes():
    source = katib()
    trial = ka.katib_trial(source, native_trial("random-00000", "Succeeded", "Completed", lastResult={"loss": 0.5}))
    native = {
        "spec": {"numSamples": 1},
        "status": {**ended("AllTrialsCompleted"), "bestTrial": {"name": "random-00000"}},
    }
    experiment = copy.deepcopy(source)
    experiment["status"] = ka.katib_status(source, native, [trial], NOW)
    done = subprocess.run(
        outside_a_pod([str(ROOT / ".venv-katib/bin/python"), "-c", READ]),
        input=json.dumps({"experiment": experiment, "trial": trial}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {
        "succeeded": True,
        "trialSucceeded": True,
        "best": ["random-00000", [["lr", "0.0125"], ["momentum", "0.5"]]],
        "metrics": [["loss", "0.5"]],
        "label": "random",
    }
