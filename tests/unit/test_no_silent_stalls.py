"""Issue 22.4, no silent stalls. A result without the experiment's metric fails the Experiment at once, as
Ray's run raises at it (``MetricMissing``), with a condition and a Warning event; the operator that restarts
meanwhile keeps the verdict from the status. Storage that does not answer is reported by the runtime (the
storage's reachability watch, the reporter's ``stalled``) and shown by the operator (the Trial's reason, the
Experiment's ``TrialsStalled`` condition and one Warning event)."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from botocore.config import Config
from conftest_runtime import TOKEN, Collector, wait_for
from conftest_storage import RestartableMotoServer, aws_env, new_bucket  # noqa: F401 - fixtures

from devcluster.testkit import experiment_object
from kubetune.env import OUTCOME_TERMINATED
from kubetune.resultkeys import missing_metrics
from kubetune.runtime.reporter import Reporter
from kubetune.sdk.progress import status_lines
from kubetune.storage import S3Storage, open_storage
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podview import PodView
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
    return experiment_object(uid="u-1", **base)


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
    decide = ctl.decisions.scheduler.on_trial_result
    ctl.decisions.scheduler.on_trial_result = lambda trial, result: seen.append(trial) or decide(trial, result)
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
    assert restarted.decisions.metric_missing == message and restarted.projection.metric_missing_told
    # killed before that status was written: the verdict is in the journal, committed before the "stop" went out
    assert ["metric_missing", message] in ctl.journal.pending
    replayed = ExperimentController(experiment(), Settings(), KEY)
    for entry in ctl.journal.pending:
        replayed.decisions.replay(entry)
    # its event is still owed
    assert replayed.decisions.metric_missing == message and not replayed.projection.metric_missing_told
    assert ExperimentController(experiment(), Settings(), KEY).snapshot()["metricMissing"] is None
    restored = ExperimentController(experiment(), Settings(), KEY)
    restored.decisions.load_snapshot(ctl.snapshot())
    assert restored.decisions.metric_missing == message

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
    assert ctl.decisions.metric_missing is None


# ----------------------------------------------------------------------------- storage that does not answer


def test_storage_reports_an_outage_after_a_while_and_its_end(aws_env):  # noqa: F811
    server = RestartableMotoServer()
    server.start()
    try:
        uri = f"s3://{new_bucket(server.endpoint)}/x"
        storage = open_storage(uri, server.endpoint, outage_timeout_s=60)
        reports: list = []
        storage.watch_reachability(reports.append, after_s=1.0)
        storage.put_bytes(uri, b"1")
        server.stop()
        got: list = []
        reader = threading.Thread(target=lambda: got.append(storage.get_bytes(uri)))
        reader.start()
        deadline = time.monotonic() + 20
        while not reports and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(reports) == 1 and reports[0].startswith(f"storage endpoint {server.endpoint} has not answered for ")
        assert "EndpointConnectionError" in reports[0]
        server.start()
        reader.join(30)
        assert got == [b"1"] and reports[1:] == [None]
    finally:
        server.stop()


def test_the_aws_default_endpoint_is_named_as_such():
    client = boto3.client(
        "s3",
        endpoint_url="http://s3.amazonaws.com.invalid",  # like AWS's, and never resolved (RFC 2606)
        region_name="us-east-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    storage = S3Storage(client, None, outage_timeout_s=0.1, endpoint_set=False)
    reports: list = []
    storage.watch_reachability(reports.append, after_s=0.0)
    with pytest.raises(Exception, match="Could not connect"):
        storage.exists("s3://bucket/x")
    assert reports[0].startswith(
        "storage endpoint http://s3.amazonaws.com.invalid (AWS S3: spec.storage.endpoint is not set) has not "
        "answered for 0 s: EndpointConnectionError: Could not connect to the endpoint URL"
    )


def test_the_reporter_sends_a_stall_at_once_and_its_end():
    collector = Collector().start()
    reporter = Reporter(collector.url, TOKEN, namespace="ns", experiment="exp", trial="t-1", attempt=0)
    reporter.start()
    reporter.set_stall("StorageUnreachable", "storage endpoint x has not answered for 20 s")
    wait_for(lambda: len(collector.batches) == 1, 5, "the stall's batch")
    reporter.report({"training_iteration": 1, "acc": 0.5})
    wait_for(lambda: len(collector.batches) == 2, 5, "the result's batch")
    reporter.set_stall("StorageUnreachable", None)
    assert reporter.close(5.0)
    collector.stop()
    stalled = [(b["results"], b.get("stalled")) for b in collector.batches]
    stall = {"reason": "StorageUnreachable", "message": "storage endpoint x has not answered for 20 s"}
    assert stalled[:2] == [([], stall), ([{"training_iteration": 1, "acc": 0.5}], stall)]
    assert all(b.get("stalled") is None for b in collector.batches[2:])


def test_a_stalled_trial_shows_in_a_condition_with_one_warning_event():
    ctl, running = running_controller()
    stall = {"reason": "StorageUnreachable", "message": "storage endpoint https://s3.amazonaws.com ... 20 s"}
    ctl.trial_stalled("exp-00001", stall)
    plan = ctl.plan(running, T0 + 3)
    message = "1 trial(s) stalled; exp-00001: " + stall["message"]
    assert (None, "Warning", "StorageUnreachable", message) in plan.events
    assert plan.trial_status["exp-00001"]["reason"] == "StorageUnreachable"
    condition = next(c for c in ctl.exp_status["conditions"] if c["type"] == "TrialsStalled")
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "StorageUnreachable", message)
    ctl.trial_stalled("exp-00000", stall)
    plan = ctl.plan(running, T0 + 5)
    assert [e for e in plan.events if e[2] == "StorageUnreachable"] == []  # told once while it lasts
    assert next(c for c in ctl.exp_status["conditions"] if c["type"] == "TrialsStalled")["message"].startswith("2 ")

    restarted = ExperimentController({**experiment(), "status": ctl.exp_status}, Settings(), KEY)
    assert restarted.projection.stall_told == "StorageUnreachable"

    ctl.trial_stalled("exp-00000", None)
    ctl.trial_stalled("exp-00001", None)
    plan = ctl.plan(running, T0 + 7)
    assert ctl.trials["exp-00001"].status["reason"] == "Running" and "message" not in ctl.trials["exp-00001"].status
    condition = next(c for c in ctl.exp_status["conditions"] if c["type"] == "TrialsStalled")
    assert (condition["status"], condition["reason"]) == ("False", "NoTrialStalled")


def test_a_stall_reported_before_the_pod_is_seen_running_stays():
    ctl = ExperimentController(experiment(), Settings(), KEY)
    for manifest in ctl.plan({}, T0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    ctl.plan({}, T0 + 1)
    ctl.trial_stalled("exp-00000", {"reason": "StorageUnreachable", "message": "m"})
    ctl.plan({n: pod(n, "Running") for n in ("exp-00000-0", "exp-00001-0")}, T0 + 2)
    assert ctl.trials["exp-00000"].phase == "Running"
    assert ctl.trials["exp-00000"].status["reason"] == "StorageUnreachable"


def test_the_status_table_shows_a_stall_and_an_end_for_a_reason():
    exp = {**experiment(), "status": {"phase": "Running", "conditions": []}}
    exp["status"]["conditions"] = [
        {"type": "Running", "status": "True", "reason": "MetricMissing", "message": "trial exp-00001 returned ..."},
        {"type": "TrialsStalled", "status": "True", "reason": "StorageUnreachable", "message": "1 trial(s) stalled"},
        {"type": "Ready", "status": "True", "reason": "SpecValid", "message": "the spec is valid"},
    ]
    lines = status_lines(exp, [])
    assert lines[1:3] == [
        "Running (MetricMissing): trial exp-00001 returned ...",
        "TrialsStalled (StorageUnreachable): 1 trial(s) stalled",
    ]
    exp["status"]["conditions"][0]["reason"] = "TrialsRunning"
    assert "Running (TrialsRunning)" not in "\n".join(status_lines(exp, []))
