"""Issue 22.4, no silent stalls: a result without the experiment's metric fails the Experiment at once, as
Ray's run raises at it (``MetricMissing``), with a condition and a Warning event; the operator that restarts
meanwhile keeps the verdict from the status."""

from __future__ import annotations

import json

from kubetune.env import OUTCOME_TERMINATED
from kubetune.resultkeys import missing_metrics
from kubetune_operator.controller import ExperimentController, PodView
from kubetune_operator.settings import Settings

KEY = b"k" * 32
T0 = 1_700_000_000.0


def experiment(**spec):
    base = {
        "trainable": {"entrypoint": "m:T"},
        "image": "img",
        "config": {"lr": {"grid_search": [1, 2, 3, 4]}},
        "metric": "acc",
        "mode": "max",
        "maxConcurrentTrials": 2,
        "storage": {"uri": "s3://bucket/prefix"},
        "scheduler": {"name": "asha", "params": {"max_t": 10, "grace_period": 1}},
    }
    base.update(spec)
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "exp", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": base,
    }


def pod(name, phase, outcome=None):
    trial, attempt = name.rsplit("-", 1)
    message = json.dumps({"outcome": outcome, "iteration": 1}) if outcome else None
    return PodView(name, trial, int(attempt), phase, message=message)


def running_controller(**spec):
    ctl = ExperimentController(experiment(**spec), Settings(), KEY)
    for manifest in ctl.plan({}, T0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    ctl.plan({}, T0 + 1)
    running = {n: pod(n, "Running") for n in ("exp-00000-0", "exp-00001-0")}
    ctl.plan(running, T0 + 2)
    return ctl, running


def test_missing_metrics_follows_rays_check():
    assert missing_metrics({"loss": 1.0, "training_iteration": 1}, ["acc"]) == ["acc"]
    assert missing_metrics({"acc": None, "training_iteration": 1}, ["acc"]) == []  # reported, as None
    assert missing_metrics({"val": {"acc": 0.5}, "training_iteration": 1}, ["val/acc", "loss"]) == ["loss"]
    # a function trainable that returned without reporting: nothing besides one key and Ray's DEBUG_METRICS
    assert missing_metrics({"done": True, "trial_id": "t", "training_iteration": 3}, ["acc"]) == []


def test_a_result_without_the_metric_fails_the_experiment_with_a_condition_and_an_event():
    ctl, running = running_controller()
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.5, "training_iteration": 1}], None) == "continue"
    seen = []
    decide = ctl.scheduler.on_trial_result
    ctl.scheduler.on_trial_result = lambda trial, result: seen.append(trial) or decide(trial, result)
    assert ctl.record_results("exp-00001", 0, [{"loss": 0.3, "training_iteration": 1}], None) == "stop"
    assert seen == []  # as in Ray, the result never reaches the scheduler
    plan = ctl.plan(running, T0 + 3)
    message = (
        "trial exp-00001 returned a result which did not include the specified metric(s) acc that spec.metric "
        "expects: make the trainable report it (the result has loss, training_iteration)"
    )
    assert (None, "Warning", "MetricMissing", message) in plan.events
    assert sorted(n for n, _ in plan.delete_pods) == ["exp-00000-0", "exp-00001-0"]
    assert plan.create_trials == []
    condition = next(c for c in ctl.exp_status["conditions"] if c["type"] == "Running")
    assert (condition["reason"], condition["message"]) == ("MetricMissing", message + "; stopping 2 trials")
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.6, "training_iteration": 2}], None) == "stop"

    restarted = ExperimentController({**experiment(), "status": ctl.exp_status}, Settings(), KEY)
    assert restarted.metric_missing == message and restarted.metric_missing_told

    ended = {n: pod(n, "Succeeded", OUTCOME_TERMINATED) for n in running}
    plan = ctl.plan(ended, T0 + 5)
    assert ctl.exp_status["phase"] == "Failed"
    failed = next(c for c in ctl.exp_status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == ("True", "MetricMissing", message)
    assert plan.experiment_status["phase"] == "Failed"  # its ExperimentFailed event goes out with it (Kube.execute)
    assert [e for e in plan.events if e[2] == "MetricMissing"] == []  # announced once


def test_without_a_metric_nothing_is_checked():
    ctl, _ = running_controller(metric=None, mode=None, scheduler={"name": "fifo"})
    assert ctl.record_results("exp-00000", 0, [{"loss": 0.3, "training_iteration": 1}], None) == "continue"
    assert ctl.metric_missing is None
