"""Issue 22.1 and 22.5 on the local cluster: a trial pod that posts a poisoned batch with its own collector
token cannot wedge its Experiment, and the end of an Experiment is announced once, also by an operator that
restarts before the terminal status is written."""

from __future__ import annotations

from devcluster.testkit import wait_for
from kubetune_operator.kube import end_event_name
from tests.integration.test_operator import GROUP, VERSION, events, experiment, get, phase_is, trials


def test_a_poisoned_batch_posted_with_a_trial_pods_own_token_is_refused_and_the_experiment_finishes(
    cluster, operator, custom, core, namespace, storage_secret
):
    spec = experiment(
        "poisoned",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2]}},
        trainable={"entrypoint": "tests.integration.trainables:Poisoner"},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(
        lambda: phase_is(custom, namespace, "poisoned", "Succeeded", "Failed"),
        timeout=180,
        what="the experiment with poisoned batches to finish",
    )
    exp = get(custom, namespace, "experiments", "poisoned")
    assert exp["status"]["phase"] == "Succeeded" and exp["status"]["trials"]["succeeded"] == 2
    for name, trial in trials(custom, namespace).items():
        status = trial["status"]
        assert status["phase"] == "Succeeded", name
        assert status["iteration"] == 3 and status["lastResult"]["training_iteration"] == 3, name
        assert status["lastResult"]["poison_status"] == 400, name  # the collector refused it with a 400
    refused = events(core, namespace, "ResultsRefused")
    assert {e.involved_object.name for e in refused} == {"poisoned-00000", "poisoned-00001"}
    assert all(e.type == "Warning" and "training_iteration must be an integer" in e.message for e in refused)
    assert [e.involved_object.name for e in events(core, namespace, "ExperimentSucceeded")] == ["poisoned"]


def test_the_end_is_announced_once_across_an_operator_restart_before_the_terminal_status(
    cluster, operator, custom, core, namespace, storage_secret
):
    spec = experiment("announced", cluster, storage_secret, config={"x": {"grid_search": [1, 2]}})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(lambda: phase_is(custom, namespace, "announced", "Succeeded"), timeout=180, what="the experiment to end")
    wait_for(lambda: events(core, namespace, "ExperimentSucceeded"), timeout=30, what="the end event")
    uid = get(custom, namespace, "experiments", "announced")["metadata"]["uid"]
    (event,) = events(core, namespace, "ExperimentSucceeded")
    assert event.metadata.name == end_event_name(uid) and event.involved_object.uid == uid
    # an operator killed after it posted the end event and before the terminal status went out: its successor
    # finds the Experiment Running, decides the end again, and writes the terminal status without a second event
    operator.kill()
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "experiments", "announced", {"status": {"phase": "Running", "completionTime": None}}
    )
    operator.start()
    wait_for(
        lambda: get(custom, namespace, "experiments", "announced")["status"].get("completionTime"),
        timeout=120,
        what="the restarted operator to write the terminal status again",
    )
    assert phase_is(custom, namespace, "announced", "Succeeded")
    assert [e.metadata.name for e in events(core, namespace, "ExperimentSucceeded")] == [end_event_name(uid)]
    assert not [e for e in core.list_namespaced_event(namespace).items if "cancelled" in (e.message or "")]
