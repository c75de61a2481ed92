"""Container trials on the local cluster: a command that prints its metrics, parameters substituted, results read
from the pod's log while it runs (the operator follows it through the API server and the kubelet), ASHA deciding on
them, and the operator SIGKILLed every few seconds deciding as an uninterrupted run would."""

from __future__ import annotations

import json
import sys

from devcluster.testkit import wait_for
from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.status import compact_result
from tests.integration.test_faults import ASHA, MAX_T, operator_scheduler, run_with_kills
from tests.integration.test_operator import GROUP, VERSION, experiment, get, phase_is, posted, trials

# Prints `epoch <i>: score=<x * i>` every 0.4 s for MAX_T epochs, as a training script would; no kubetune inside.
SCRIPT = f"""
import sys, time
x = float(sys.argv[1])
for i in range(1, {MAX_T} + 1):
    print(f"epoch {{i}}: score={{x * i}} lr=0.1", flush=True)
    time.sleep(0.4)
"""


def container_experiment(name, cluster, secret, **spec):
    body = experiment(
        name,
        cluster,
        secret,
        config=spec.pop("config"),
        trainable={"command": [sys.executable, "-c", SCRIPT], "args": ["${trialParameters.x}"]},
        checkpoint={},
        stop={"training_iteration": MAX_T},
        **spec,
    )
    return body


def test_a_killed_operator_stops_the_container_trials_an_uninterrupted_asha_stops(
    cluster, operator, custom, core, namespace, storage_secret
):
    xs = [3, 1, 4, 2, 6, 5, 0.5]
    spec = container_experiment(
        "boxes", cluster, storage_secret, config={"x": {"grid_search": xs}}, maxConcurrentTrials=1, scheduler=ASHA
    )
    found = run_with_kills(custom, operator, namespace, spec, len(xs))
    replay = create_scheduler("asha", "score", "max", **ASHA["params"])
    stops = 0
    for name, trial in found.items():
        x, status = trial["spec"]["config"]["x"], trial["status"]
        assert status["lastResult"]["score"] == x * status["iteration"] and status["lastResult"]["lr"] == 0.1
        replay.on_trial_add(name)
        decisions = []
        for i in range(1, status["iteration"] + 1):
            if i == MAX_T or "stop" in decisions:  # spec.stop's result is the completion; none after a stop
                break
            decisions.append(replay.on_trial_result(name, {"training_iteration": i, "score": x * i, "lr": 0.1}))
        if status["reason"] == "EarlyStopped":
            stops += 1
            assert "stop" in decisions, (name, decisions)
            replay.on_trial_remove(name)
        else:
            assert status["reason"] == "Completed" and status["iteration"] == MAX_T, (name, status)
            replay.on_trial_complete(name, compact_result({"score": x * MAX_T, "training_iteration": MAX_T}, "score"))
    assert stops >= 2
    assert json.dumps(operator_scheduler(custom, core, namespace, "boxes").get_state(), sort_keys=True) == json.dumps(
        replay.get_state(), sort_keys=True
    )


def test_a_container_trial_runs_its_command_as_written_with_json_lines_and_one_that_prints_no_metric_fails(
    cluster, operator, custom, core, namespace, storage_secret
):
    json_script = (
        "import json, sys\n"
        "for i in range(1, 4):\n"
        "    print(json.dumps({'loss': str(float(sys.argv[1]) / i), 'step': i}), flush=True)\n"
    )
    spec = container_experiment(
        "jsonlines",
        cluster,
        storage_secret,
        config={"lr": {"grid_search": [0.5, 2.0]}},
        metric="loss",
        mode="min",
        metricsCollector={"format": "JSON", "iterationKey": "step"},
        podRetentionPolicy={"whenSucceeded": "Retain"},
    )
    spec["spec"]["trainable"] = {"command": [sys.executable, "-c", json_script, "${config.lr}"]}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(lambda: phase_is(custom, namespace, "jsonlines", "Succeeded", "Failed"), timeout=120, what="jsonlines")
    found = {t["spec"]["config"]["lr"]: t["status"] for t in trials(custom, namespace).values()}
    assert {lr: (s["phase"], s["iteration"], s["lastResult"]["loss"]) for lr, s in found.items()} == {
        0.5: ("Succeeded", 3, 0.5 / 3),
        2.0: ("Succeeded", 3, 2.0 / 3),
    }
    pod = core.read_namespaced_pod(found[0.5]["podName"], namespace)
    (container,) = pod.spec.containers
    assert container.command == [sys.executable, "-c", json_script, "0.5"] and not container.args
    assert not container.env and not container.volume_mounts and not pod.spec.init_containers

    silent = container_experiment(
        "silent", cluster, storage_secret, config={"x": 1}, failure={"maxFailures": 0}, numSamples=1
    )
    silent["spec"]["trainable"] = {"command": [sys.executable, "-c", "print('training, but saying nothing')"]}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", silent)
    wait_for(lambda: phase_is(custom, namespace, "silent", "Succeeded", "Failed"), timeout=120, what="silent")
    (trial,) = [t for t in trials(custom, namespace).values() if t["metadata"]["name"].startswith("silent-")]
    assert (trial["status"]["phase"], trial["status"]["reason"]) == ("Failed", "MetricMissing")
    assert "no line of its output reported score" in trial["status"]["message"]
    assert get(custom, namespace, "experiments", "silent")["status"]["trials"]["failed"] == 1
    posted(core, namespace, "TrialFailed", match="MetricMissing")
