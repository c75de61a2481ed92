"""Container trials without a cluster: Katib's line formats parsed into results, parameters substituted into the
user's command, the spec's refusals, the pod (nothing of kubetune's in the container) and the lifecycle (a stop
deletes the pod; the outcome waits for the output; MetricMissing when no line had the metric)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.output_metrics import KATIB_METRICS_FORMAT, OutputParser
from kubetune_operator.builders import build_pod, sample_pod, trial_object
from kubetune_operator.container_trials import substitute
from kubetune_operator.controller import ExperimentController
from kubetune_operator.experiment_spec import ExperimentSpec
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec
from kubetune_operator.trial_lifecycle import OUTPUT_WAIT_S

KEY = b"k" * 32
T0 = 1_800_000_000.0


# ----- the line formats ------------------------------------------------------------------------------------------
def test_katibs_default_regex_is_the_one_katib_documents():
    assert KATIB_METRICS_FORMAT == r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"


def test_text_lines_make_one_result_per_line_with_the_objective_and_carry_the_other_metrics():
    parser = OutputParser(["loss"])
    lines = [
        "starting training",
        "lr=0.01 momentum=0.9",
        "epoch 1: loss=0.5 Validation-accuracy=0.8",
        "accuracy|top5 = 0.95",
        "loss = 2.5e-1",
        "loss=",  # no number: nothing
    ]
    assert parser.feed_all(lines) == [
        {"lr": 0.01, "momentum": 0.9, "loss": 0.5, "Validation-accuracy": 0.8, "training_iteration": 1},
        {
            "lr": 0.01,
            "momentum": 0.9,
            "loss": 0.25,
            "Validation-accuracy": 0.8,
            "accuracy|top5": 0.95,
            "training_iteration": 2,
        },
    ]


def test_a_leading_rfc3339_time_is_the_results_timestamp():
    parser = OutputParser(["loss"])
    (result,) = parser.feed_all(["2026-11-27T10:00:00Z loss=0.3", ""])
    assert result["timestamp"] == 1795773600
    (result,) = OutputParser(["loss"]).feed_all(["2026-11-27T11:00:00.5+01:00 loss=0.3"])
    assert result["timestamp"] == 1795773600
    (result,) = OutputParser(["loss"]).feed_all(["not-a-time loss=0.3"])
    assert "timestamp" not in result


def test_custom_regexes_take_the_first_group_as_the_name_and_the_second_as_the_value():
    parser = OutputParser(["loss"], metrics_format=[r"(\w+): ([-+.\deE]+)"])
    assert parser.feed_all(["epoch: 3", "loss: 0.125", "loss=9"]) == [
        {"epoch": 3.0, "loss": 0.125, "training_iteration": 1}
    ]
    with pytest.raises(ValueError, match="two groups"):
        OutputParser(["loss"], metrics_format=[r"loss=\d+"])


def test_json_lines_take_numbers_and_numbers_written_as_strings():
    parser = OutputParser(["loss"], format="JSON")
    lines = [
        '{"loss": "0.5", "acc": 0.7, "timestamp": 1795773600.7}',  # Katib's strings, and a plain number
        '{"loss": 0.25, "note": "text", "ok": true}',  # text and booleans are not metrics
        "not json",
        "[1, 2]",
    ]
    assert parser.feed_all(lines) == [
        {"loss": 0.5, "acc": 0.7, "training_iteration": 1, "timestamp": 1795773600},
        {"loss": 0.25, "acc": 0.7, "training_iteration": 2},
    ]


def test_an_iteration_key_sets_training_iteration_and_results_before_it_are_skipped():
    parser = OutputParser(["loss"], iteration_key="epoch")
    assert parser.feed_all(["loss=1", "epoch=4 loss=0.5", "epoch=2.5 loss=0.4", "epoch=6", "loss=0.3"]) == [
        {"epoch": 4.0, "loss": 0.5, "training_iteration": 4},
        {"epoch": 6.0, "loss": 0.3, "training_iteration": 6},
    ]


def test_the_output_cannot_set_the_keys_kubetune_fills_in_and_overlong_lines_are_skipped():
    parser = OutputParser(["loss"])
    (result,) = parser.feed_all(["training_iteration=99 done=1 time_total_s=-4 loss=0.1", "loss=0.2" + " " * 70000])
    assert result == {"loss": 0.1, "training_iteration": 1}


def test_several_objectives_make_a_result_once_each_was_printed():
    parser = OutputParser(["loss", "latency"])
    assert parser.feed_all(["loss=0.5", "latency=3", "loss=0.4"]) == [
        {"loss": 0.5, "latency": 3.0, "training_iteration": 1},
        {"loss": 0.4, "latency": 3.0, "training_iteration": 2},
    ]


def test_reading_a_log_again_from_its_start_makes_the_same_results():
    lines = [f"epoch {i}: loss={1 / i}" for i in range(1, 30)]
    assert OutputParser(["loss"]).feed_all(lines) == OutputParser(["loss"]).feed_all(lines)


# ----- parameters in the command -----------------------------------------------------------------------------------
def test_both_reference_forms_are_substituted_with_strings_as_they_are_and_other_values_as_json():
    config = {"lr": 0.01, "optimizer": {"name": "sgd", "nesterov": True}, "layers": [64, 32], "a.b": 3}
    assert substitute("--lr=${trialParameters.lr}", config) == "--lr=0.01"
    assert substitute("${config.optimizer.name}/${config.optimizer.nesterov}", config) == "sgd/true"
    assert substitute("${config.layers} ${trialParameters.a.b} $HOME $(X)", config) == "[64,32] 3 $HOME $(X)"
    with pytest.raises(ValueError, match=r"\$\{config.momentum\} names no parameter"):
        substitute("${config.momentum}", config)


def test_the_trials_name_and_namespace_are_references_too_and_a_value_is_never_read_again():
    trial = {"name": "exp-00004", "namespace": "team-a"}
    config = {"tag": "${trial.name}"}  # a parameter's value is the user's text: it stays as it is
    assert substitute("--run=${trial.name}@${trial.namespace}", config, trial) == "--run=exp-00004@team-a"
    assert substitute("${config.tag}", config, trial) == "${trial.name}"
    with pytest.raises(ValueError, match=r"\$\{trial.uid\}: a trial reference names the trial's name or namespace"):
        substitute("${trial.uid}", config, trial)


def container_experiment(**spec):
    base = {
        "trainable": {"command": ["python3", "/app/train.py"], "args": ["--lr=${trialParameters.lr}"]},
        "image": "user/train:1",
        "config": {"lr": {"grid_search": [0.1, 0.2]}},
        "metric": "loss",
        "mode": "min",
        "maxConcurrentTrials": 2,
        "storage": {"uri": "s3://bucket/prefix"},
    }
    base.update(spec)
    return experiment_object(**base)


def test_the_spec_reads_the_command_and_collector_and_refuses_what_container_trials_cannot_do():
    parsed = ExperimentSpec.parse(
        container_experiment(metricsCollector={"format": "JSON", "iterationKey": "epoch"})["spec"]
    )
    assert parsed.container.command == ("python3", "/app/train.py") and parsed.container.format == "JSON"
    assert parsed.container.iteration_key == "epoch" and parsed.container.kind == "StdOut"
    assert ExperimentSpec.parse(experiment_object(trainable={"entrypoint": "m:T"})["spec"]).container is None
    refusals = {
        "frequency": {"checkpoint": {"frequency": 2}},
        "Python functions": {"config": {"lr": {"kubetune/pickled_function": "s3://b/f.pkl"}}},
        "momentum": {"trainable": {"command": ["sh", "-c", "train --m ${config.momentum}"]}},
        "two groups": {"metricsCollector": {"metricsFormat": ["loss=.*"]}},
        "format TEXT": {"metricsCollector": {"format": "JSON", "metricsFormat": [r"(\w+)=(\d+)"]}},
        r"refers to the trial by uid: \$\{trial.name\}": {"trainable": {"command": ["x", "${trial.uid}"]}},
    }
    for words, change in refusals.items():
        with pytest.raises(ValueError, match=words):
            ExperimentSpec.parse(container_experiment(**change)["spec"])
    with pytest.raises(ValueError, match="only for a container trial"):
        ExperimentSpec.parse(experiment_object(trainable={"entrypoint": "m:T"}, metricsCollector={})["spec"])
    with pytest.raises(InvalidSpec, match="names no parameter|not in spec.config"):
        ExperimentController(container_experiment(trainable={"command": ["x", "${config.nope}"]}), Settings(), KEY)


def test_the_pod_runs_the_users_command_substituted_with_nothing_of_kubetunes_in_the_container():
    exp = container_experiment(
        template={"env": [{"name": "LR", "value": "${config.lr}"}, {"name": "KEEP", "value": "$(HOME)"}]},
        resourcesPerTrial={"cpu": 2, "memory": "1Gi"},
    )
    trial = trial_object("ns", "exp-00000", "u1", 0, {"lr": 0.1})
    pod = build_pod(exp, trial, 0, Settings())
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "user/train:1"
    assert container["command"] == ["python3", "/app/train.py"] and container["args"] == ["--lr=0.1"]
    assert container["env"] == [{"name": "LR", "value": "0.1"}, {"name": "KEEP", "value": "$(HOME)"}]
    assert "volumeMounts" not in container and "volumes" not in pod["spec"]  # no token, no config file
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "1Gi"}
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"] is True
    assert not spec.get("initContainers") and not spec.get("shareProcessNamespace")
    assert sample_pod(exp, Settings())["spec"]["containers"][0]["args"] == ["--lr=0"]  # admission's sample


# ----- the lifecycle -------------------------------------------------------------------------------------------------
def running(ctl, now=T0):
    plan = ctl.plan({}, now)
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    ctl.plan({}, now + 1)
    pods = {f"exp-0000{i}-0": PodView(f"exp-0000{i}-0", f"exp-0000{i}", 0, "Running") for i in range(2)}
    ctl.plan(pods, now + 2)
    return pods


def test_a_container_trial_a_stopper_stops_has_its_pod_deleted_and_ends_early_stopped():
    stoppers = [{"name": "maximum_iteration", "params": {"max_iter": 2}}]  # Ray's: counts a trial's results
    ctl = ExperimentController(container_experiment(stoppers=stoppers), Settings(), KEY)
    pods = running(ctl)
    assert ctl.record_results("exp-00001", 0, [{"loss": 2.0, "training_iteration": 1}], None) == "continue"
    assert ctl.plan(pods, T0 + 2.5).delete_pods == []
    assert ctl.record_results("exp-00001", 0, [{"loss": 2.0, "training_iteration": 2}], None) == "stop"
    plan = ctl.plan(pods, T0 + 3)
    assert plan.delete_pods == [("exp-00001-0", Settings().trials.termination_grace_period_s)]
    pods["exp-00001-0"] = PodView("exp-00001-0", "exp-00001", 0, "Failed", exit_code=143)  # SIGTERM
    plan = ctl.plan(pods, T0 + 4)
    assert "phase" not in plan.trial_status.get("exp-00001", {})  # waits for the output read to its end
    ctl.output_read_to_end("exp-00001-0", "log")
    plan = ctl.plan(pods, T0 + 5)
    assert plan.trial_status["exp-00001"]["phase"] == "Succeeded"
    assert plan.trial_status["exp-00001"]["reason"] == "EarlyStopped"


def test_a_container_trial_whose_stopped_pod_went_while_the_operator_was_down_ends_early_stopped_not_retried():
    """The operator deleted the pod on a stop decision (durable in its journal) and was killed; the next one lists
    no such pod: the attempt ended on that decision, it did not disappear, so it is not retried (a retry would feed
    the scheduler results of a trial it had stopped)."""
    stoppers = [{"name": "maximum_iteration", "params": {"max_iter": 1}}]
    ctl = ExperimentController(container_experiment(stoppers=stoppers), Settings(), KEY)
    pods = running(ctl)
    assert ctl.record_results("exp-00001", 0, [{"loss": 2.0, "training_iteration": 1}], None) == "stop"
    assert [name for name, _ in ctl.plan(pods, T0 + 3).delete_pods] == ["exp-00001-0"]
    del pods["exp-00001-0"]  # gone, as a restarted operator's first pod list shows it
    plan = ctl.plan(pods, T0 + 4)
    assert plan.trial_status["exp-00001"]["phase"] == "Succeeded"
    assert plan.trial_status["exp-00001"]["reason"] == "EarlyStopped"
    assert not [p for p in plan.create_pods if p["metadata"]["name"].startswith("exp-00001")]


def test_a_container_trial_ended_on_its_stop_whose_status_a_kill_lost_ends_early_stopped_and_never_runs_again():
    """The operator ended a stopped trial (its end journaled), then was killed before the Trial's status said so: the
    next operator finds the Trial Running and its pod gone. The journal says how the attempt ended, so the trial ends
    EarlyStopped; a retry would run it again and feed the scheduler results of a trial it had stopped and removed
    (a flaky ASHA test on the local cluster)."""
    stoppers = [{"name": "maximum_iteration", "params": {"max_iter": 1}}]
    exp = container_experiment(stoppers=stoppers)
    store, trials = ConfigMaps(), {}

    def boot():
        ctl = ExperimentController(exp, Settings(), KEY)
        for trial in copy.deepcopy(list(trials.values())):
            ctl.observe_trial(trial)
        ctl.restore(store.list())
        return ctl

    def carry_out(ctl, pods, now, write_status=True):
        plan = ctl.plan(pods, now)
        asyncio.run(Registry(Settings(), KEY, store.write).commit(ctl))
        for m in plan.create_trials:
            name = m["metadata"]["name"]
            owner = [{"uid": exp["metadata"]["uid"]}]
            trials[name] = {**m, "metadata": {**m["metadata"], "uid": "uid-" + name, "ownerReferences": owner}}
            ctl.trial_created(name, "uid-" + name)
        for name, patch in plan.trial_status.items() if write_status else ():
            trials[name].setdefault("status", {}).update(patch)
            ctl.status_written(name)
        return plan

    ctl = boot()
    pods = {}
    for now in (T0, T0 + 1):
        carry_out(ctl, pods, now)
    pods = {f"exp-0000{i}-0": PodView(f"exp-0000{i}-0", f"exp-0000{i}", 0, "Running") for i in range(2)}
    carry_out(ctl, pods, T0 + 2)
    assert trials["exp-00001"]["status"]["phase"] == "Running"
    assert ctl.record_results("exp-00001", 0, [{"loss": 2.0, "training_iteration": 1}], None) == "stop"
    asyncio.run(Registry(Settings(), KEY, store.write).commit(ctl))
    assert [name for name, _ in carry_out(ctl, pods, T0 + 3).delete_pods] == ["exp-00001-0"]
    del pods["exp-00001-0"]  # deleted on the stop
    ended = carry_out(ctl, pods, T0 + 4, write_status=False)  # the end journaled; killed before the status write
    assert ended.trial_status["exp-00001"]["reason"] == "EarlyStopped"
    assert trials["exp-00001"]["status"]["phase"] == "Running"

    ctl = boot()
    plan = carry_out(ctl, pods, T0 + 5)
    assert (plan.trial_status["exp-00001"]["phase"], plan.trial_status["exp-00001"]["reason"]) == (
        "Succeeded",
        "EarlyStopped",
    )
    assert not [p for p in plan.create_pods if p["metadata"]["name"].startswith("exp-00001")]
    assert ctl.record_results("exp-00001", 0, [{"loss": 1.0, "training_iteration": 2}], None) == "stop"


def test_a_container_that_exits_0_completes_and_one_that_printed_no_metric_fails_metric_missing():
    ctl = ExperimentController(container_experiment(), Settings(), KEY)
    pods = running(ctl)
    ctl.record_results("exp-00000", 0, [{"loss": 0.5, "training_iteration": 1}], None)
    for name in pods:
        pods[name] = PodView(name, name[:-2], 0, "Succeeded", exit_code=0)
        ctl.output_read_to_end(name, "log")
    plan = ctl.plan(pods, T0 + 3)
    assert plan.trial_status["exp-00000"]["phase"] == "Succeeded"
    assert plan.trial_status["exp-00000"]["reason"] == "Completed"
    failed = plan.trial_status["exp-00001"]
    assert failed["phase"] == "Failed" and failed["reason"] == "MetricMissing"
    assert (
        "no line of its output reported loss" in failed["message"] and "kubectl logs exp-00001-0" in failed["message"]
    )


def test_an_output_never_read_to_its_end_holds_the_outcome_for_a_bounded_time_then_says_so():
    ctl = ExperimentController(container_experiment(), Settings(), KEY)
    pods = running(ctl)
    ctl.record_results("exp-00000", 0, [{"loss": 0.5, "training_iteration": 1}], None)
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Succeeded", exit_code=0)
    assert "phase" not in ctl.plan(pods, T0 + 3).trial_status.get("exp-00000", {})
    assert ctl.output_unreadable("exp-00000-0", "HTTP 403: pods/log is forbidden") is False
    assert ctl.output_unreadable("exp-00000-0", "HTTP 403: pods/log is forbidden") is True  # logged once
    plan = ctl.plan(pods, T0 + 3 + OUTPUT_WAIT_S)
    assert plan.trial_status["exp-00000"]["reason"] == "Completed"
    (message,) = [event[3] for event in plan.events if event[2] == "OutputNotRead"]
    assert "the trial ends on the 1 result(s) read; reading it failed with HTTP 403: pods/log" in message


def test_a_failed_container_is_retried_with_its_exit_code_in_the_message():
    ctl = ExperimentController(container_experiment(failure={"maxFailures": 1}), Settings(), KEY)
    pods = running(ctl)
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Failed", exit_code=2)
    ctl.output_read_to_end("exp-00000-0", "log")
    status = ctl.plan(pods, T0 + 3).trial_status["exp-00000"]
    assert status["attempt"] == 1 and "exit code 2; `kubectl logs exp-00000-0`" in status["message"]
    assert "runtime" not in status["message"]


def test_a_container_trial_that_meets_spec_stop_is_stopped_and_reads_as_completed():
    ctl = ExperimentController(container_experiment(stop={"training_iteration": 2}), Settings(), KEY)
    pods = running(ctl)
    assert ctl.record_results("exp-00000", 0, [{"loss": 0.5, "training_iteration": 2}], None) == "stop"
    assert ctl.plan(pods, T0 + 3).delete_pods == [("exp-00000-0", Settings().trials.termination_grace_period_s)]
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Running", deleting=True, gone=True)
    ctl.output_read_to_end("exp-00000-0", "log")
    status = ctl.plan(pods, T0 + 4).trial_status["exp-00000"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Completed")


def test_a_trial_container_that_ended_beside_a_running_proxy_has_its_pod_deleted_before_its_outcome():
    ctl = ExperimentController(container_experiment(), Settings(), KEY)
    pods = running(ctl)
    ctl.record_results("exp-00000", 0, [{"loss": 0.5, "training_iteration": 1}], None)
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Succeeded", exit_code=0, lingering=True)
    plan = ctl.plan(pods, T0 + 3)
    assert plan.delete_pods == [("exp-00000-0", Settings().trials.termination_grace_period_s)]
    assert "phase" not in plan.trial_status.get("exp-00000", {})  # the sidecar's last batch comes as the pod goes
    ctl.output_read_to_end("exp-00000-0", "log")
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Succeeded", exit_code=0, gone=True)
    assert ctl.plan(pods, T0 + 4).trial_status["exp-00000"]["reason"] == "Completed"


def test_a_container_trial_pod_takes_the_queue_gpus_and_placement_a_runtime_trial_pod_takes():
    exp = container_experiment(
        queueName="team-queue",
        resourcesPerTrial={"cpu": 1, "memory": "2Gi", "gpu": 2},
        template={"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
    )
    pod = build_pod(exp, trial_object("ns", "exp-00000", "u1", 0, {"lr": 0.1}), 1, Settings())
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    assert pod["metadata"]["labels"]["kubetune.io/attempt"] == "1"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"memory": "2Gi", "nvidia.com/gpu": "2"}
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"} and pod["spec"]["tolerations"][0]["key"] == "gpu"


def test_a_container_trial_a_stopper_stopped_that_printed_on_to_spec_stop_is_still_early_stopped():
    stoppers = [{"name": "maximum_iteration", "params": {"max_iter": 1}}]
    ctl = ExperimentController(container_experiment(stop={"training_iteration": 3}, stoppers=stoppers), Settings(), KEY)
    pods = running(ctl)
    assert ctl.record_results("exp-00000", 0, [{"loss": 0.5, "training_iteration": 1}], None) == "stop"
    ctl.record_results("exp-00000", 0, [{"loss": 0.4, "training_iteration": 3}], None)  # printed before SIGTERM
    pods["exp-00000-0"] = PodView("exp-00000-0", "exp-00000", 0, "Running", deleting=True, gone=True)
    ctl.output_read_to_end("exp-00000-0", "log")
    status = ctl.plan(pods, T0 + 4).trial_status["exp-00000"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "EarlyStopped")
