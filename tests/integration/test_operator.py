"""The operator end to end on the local cluster: real kube-apiserver, scheduler,
garbage collector, process kubelet, moto S3, the operator as its own process
and trial pods running ``python -m kubetune.runtime``."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client, watch

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from tests.integration.support import trial_prefix

GROUP, VERSION = "kubetune.io", "v1alpha1"
TRAINABLE = "tests.integration.trainables:Counter"


def experiment(name, cluster, secret, *, config, **spec):
    body = {
        "trainable": {"entrypoint": TRAINABLE},
        "image": "kubetune/runtime:test",
        "config": config,
        "metric": "score",
        "mode": "max",
        "stop": {"training_iteration": 3},
        "checkpoint": {"frequency": 1, "atEnd": True},
        "storage": {
            "uri": f"s3://{S3_BUCKET}/experiments",
            "endpoint": cluster.s3_endpoint,
            "region": "us-east-1",
            "credentialsSecret": secret,
        },
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Experiment", "metadata": {"name": name}, "spec": body}


def get(custom, ns, plural, name):
    try:
        return custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def trials(custom, ns):
    items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trials")["items"]
    return {t["metadata"]["name"]: t for t in items}


def phase_is(custom, ns, name, *phases):
    return get(custom, ns, "experiments", name).get("status", {}).get("phase") in phases


def result_lines(s3, ns, exp, trial):
    key = f"{trial_prefix(s3, S3_BUCKET, 'experiments', ns, exp, trial)}/result.json"
    body = s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def events(core, ns, reason):
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


def posted(core, ns, reason, match="", type_=None, timeout=30):
    """The events of ``reason`` (of ``type_``; any when None) whose message holds ``match``, waited for up to
    ``timeout`` s: the operator posts an event after the status write it goes with (kopf sends events from a
    queue), so a test that saw the status waits for the event."""
    return wait_for(
        lambda: [e for e in events(core, ns, reason) if match in (e.message or "") and type_ in (None, e.type)],
        timeout=timeout,
        interval=0.5,
        what=f"a {reason} event" + (f" saying {match!r}" if match else ""),
    )


def test_happy_path_runs_every_trial_and_reports_the_best(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("happy", cluster, storage_secret, config={"x": {"grid_search": [1, 2, 3]}}, maxConcurrentTrials=2),
    )
    wait_for(lambda: phase_is(custom, namespace, "happy", "Succeeded", "Failed"), what="experiment to finish")
    exp = get(custom, namespace, "experiments", "happy")
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    assert exp["status"]["trials"] == {"total": 3, "pending": 0, "running": 0, "paused": 0, "succeeded": 3, "failed": 0}
    best = exp["status"]["bestTrial"]
    assert best["config"] == {"x": 3} and best["metricValue"] == 9.0 and best["iteration"] == 3
    assert best["checkpoint"].startswith(f"s3://{S3_BUCKET}/experiments/{namespace}/happy/")
    found = trials(custom, namespace)
    assert sorted(found) == ["happy-00000", "happy-00001", "happy-00002"]
    for name, trial in found.items():
        assert trial["status"]["phase"] == "Succeeded" and trial["status"]["reason"] == "Completed"
        assert [r["training_iteration"] for r in result_lines(s3, namespace, "happy", name)] == [1, 2, 3]
    conditions = {c["type"]: c for c in exp["status"]["conditions"]}
    assert conditions["Complete"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == exp["metadata"]["generation"]
    assert (conditions["Reconciling"]["status"], conditions["Stalled"]["status"]) == ("False", "False")  # kstatus
    created = events(core, namespace, "TrialsCreated")
    assert sum(int(e.message.split()[1]) for e in created) == 3, [(e.message, e.count) for e in created]
    posted(core, namespace, "TrialSucceeded")
    table = cluster.kubectl("get", "trials", "-n", namespace).stdout
    assert "Succeeded" in table and "ITERATION" in table.upper()

    # each attempt's collector token lived in its own Secret, gone once the attempt ended
    def left():
        return [
            s.metadata.name
            for s in core.list_namespaced_secret(namespace).items
            if s.metadata.name.startswith("happy-")
        ]

    wait_for(lambda: not left(), timeout=30, what=f"the token Secrets to be deleted ({left()} are not)")


def test_a_running_trial_pod_shows_no_token(cluster, operator, custom, core, namespace, storage_secret):
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("tokenless", cluster, storage_secret, config={"x": 1, "sleep": 0.5}, stop={"training_iteration": 6}),
    )
    wait_for(
        lambda: (get(custom, namespace, "trials", "tokenless-00000").get("status", {}).get("iteration") or 0) >= 1,
        what="the trial to report (its runtime read the token from the Secret)",
    )
    pod = json.loads(core.read_namespaced_pod("tokenless-00000-0", namespace, _preload_content=False).data)
    token_var = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "KUBETUNE_TOKEN")
    secret_name = token_var["valueFrom"]["secretKeyRef"]["name"]
    assert "value" not in token_var and secret_name.startswith("tokenless-00000-0-")
    secret = core.read_namespaced_secret(secret_name, namespace)
    assert secret.metadata.owner_references[0].name == "tokenless-00000"
    wait_for(lambda: phase_is(custom, namespace, "tokenless", "Succeeded"), what="the experiment to succeed")


def test_kubectl_explains_the_api(cluster):
    out = cluster.kubectl("explain", "experiment.spec.scheduler").stdout
    assert "DESCRIPTION" in out.upper() and "asha" in out
    out = cluster.kubectl("explain", "trial.status.phase").stdout
    assert "Succeeded" in out


def test_gpu_limited_concurrency_never_exceeds_free_gpus(cluster, operator, custom, core, namespace, storage_secret):
    spec = experiment(
        "gpus",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2, 3]}, "sleep": 0.5},
        maxConcurrentTrials=3,
        resourcesPerTrial={"cpu": "100m", "gpu": 1},
        template={"nodeSelector": {"kubernetes.io/hostname": "devcluster-node-1"}},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    most, done = 0, threading.Event()

    def sample():
        nonlocal most
        while not done.is_set():
            pods = core.list_namespaced_pod(namespace).items
            most = max(most, sum(1 for p in pods if p.status.phase == "Running"))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_for(lambda: phase_is(custom, namespace, "gpus", "Succeeded", "Failed"), what="experiment to finish")
    finally:
        done.set()
        sampler.join()
    assert get(custom, namespace, "experiments", "gpus")["status"]["trials"]["succeeded"] == 3
    assert most == 1  # the node has one GPU; the other trials' pods waited in Pending


def test_a_trial_pod_held_by_a_scheduling_gate_waits_for_admission_then_runs(
    cluster, operator, custom, core, namespace, storage_secret
):
    """A scheduling gate (as Kueue's admission puts on a pod of a LocalQueue, or any admission controller): the
    Trial shows SchedulingGated and the Experiment TrialsWaiting until the gate is lifted, then the trial runs."""
    gate = "example.com/admission"
    spec = experiment(
        "gated",
        cluster,
        storage_secret,
        config={"x": 1},
        queueName="team-a",
        template={"schedulingGates": [{"name": gate}]},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)

    def waiting():
        conditions = (get(custom, namespace, "experiments", "gated").get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c["type"] == "TrialsWaiting" and c["status"] == "True"), None)
        return found if found and found["reason"] == "SchedulingGated" else None

    condition = wait_for(waiting, timeout=60, what="TrialsWaiting=True SchedulingGated")
    assert f"held by scheduling gates {gate}" in condition["message"]
    (trial,) = trials(custom, namespace).values()
    assert trial["status"]["phase"] == "Pending" and trial["status"]["reason"] == "SchedulingGated"
    (pod,) = core.list_namespaced_pod(namespace).items
    assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a" and pod.spec.node_name is None
    core.patch_namespaced_pod(pod.metadata.name, namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])
    wait_for(lambda: phase_is(custom, namespace, "gated", "Succeeded", "Failed"), what="gated to finish")
    assert get(custom, namespace, "experiments", "gated")["status"]["phase"] == "Succeeded"
    assert not waiting()


def test_retry_after_a_crash_and_failure_after_max_failures(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    spec = experiment(
        "flaky",
        cluster,
        storage_secret,
        config={"x": 1, "fail_at": 3},
        stop={"training_iteration": 4},
        failure={"maxFailures": 1},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    bad = experiment(
        "broken", cluster, storage_secret, config={"x": 1, "always_fail": True}, failure={"maxFailures": 1}
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", bad)
    wait_for(lambda: phase_is(custom, namespace, "flaky", "Succeeded", "Failed"), what="flaky to finish")
    trial = get(custom, namespace, "trials", "flaky-00000")
    assert trial["status"]["phase"] == "Succeeded" and trial["status"]["failures"] == 1
    assert trial["status"]["attempt"] == 1
    lines = result_lines(s3, namespace, "flaky", "flaky-00000")
    assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4]  # resumed from checkpoint 2, no line twice
    assert lines[-1]["score"] == 4.0
    posted(core, namespace, "TrialRetried")
    wait_for(lambda: phase_is(custom, namespace, "broken", "Succeeded", "Failed"), what="broken to finish")
    broken = get(custom, namespace, "trials", "broken-00000")
    assert broken["status"]["phase"] == "Failed" and broken["status"]["failures"] == 2
    assert "this trainable always fails" in broken["status"]["message"]
    assert "Traceback" in broken["status"]["message"] or "ValueError" in broken["status"]["message"]
    assert get(custom, namespace, "experiments", "broken")["status"]["phase"] == "Failed"
    # spec.podRetentionPolicy's defaults: a pod that exited 0 goes once recorded, failed attempts stay for their logs
    names = lambda: {p.metadata.name for p in core.list_namespaced_pod(namespace).items}  # noqa: E731
    wait_for(lambda: "flaky-00000-1" not in names(), timeout=30, what="the completed attempt's pod to be deleted")
    assert {"flaky-00000-0", "broken-00000-0", "broken-00000-1"} <= names()


def test_a_killed_pod_resumes_at_its_checkpoint(cluster, operator, custom, core, s3, namespace, storage_secret):
    spec = experiment(
        "resume",
        cluster,
        storage_secret,
        config={"x": 1, "sleep": 0.3},
        stop={"training_iteration": 12},
        failure={"maxFailures": 2},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)

    def checkpointed():
        status = get(custom, namespace, "trials", "resume-00000").get("status", {})
        return (status.get("checkpoint") or {}).get("iteration", 0) >= 3

    wait_for(checkpointed, what="a committed checkpoint at iteration >= 3")
    core.delete_namespaced_pod("resume-00000-0", namespace, grace_period_seconds=0)
    wait_for(lambda: phase_is(custom, namespace, "resume", "Succeeded", "Failed"), what="resume to finish")
    trial = get(custom, namespace, "trials", "resume-00000")
    assert trial["status"]["phase"] == "Succeeded" and trial["status"]["attempt"] == 1
    lines = result_lines(s3, namespace, "resume", "resume-00000")
    iterations = [r["training_iteration"] for r in lines]
    assert iterations == list(range(1, 13))
    assert lines[-1]["score"] == 12.0  # the state came back from the checkpoint, not from zero
    restored = [r for r in lines if r.get("iterations_since_restore") == 1]
    assert len(restored) == 2  # the first attempt's first result, and the second attempt's first after restore


def test_an_evicted_trial_pod_is_retried_with_the_eviction_as_its_reason(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    spec = experiment(
        "evicted", cluster, storage_secret, config={"x": 1, "sleep": 0.3}, stop={"training_iteration": 12}
    )  # failure.maxFailures 0: a disruption counted as a failure would fail the trial
    seen, done = [], threading.Event()

    def watch_trial():  # every status the Trial goes through, not only the last; 2 s requests until done
        version = None
        while not done.is_set():
            for event in watch.Watch().stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                "trials",
                resource_version=version,
                timeout_seconds=2,
            ):
                status = event["object"].get("status") or {}
                seen.append((status.get("attempt"), status.get("phase"), status.get("reason")))
                version = event["object"]["metadata"]["resourceVersion"]

    watcher = threading.Thread(target=watch_trial, daemon=True)
    watcher.start()
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)

    def checkpointed():
        status = get(custom, namespace, "trials", "evicted-00000").get("status", {})
        return (status.get("checkpoint") or {}).get("iteration", 0) >= 3

    wait_for(checkpointed, what="a committed checkpoint at iteration >= 3")
    core.create_namespaced_pod_eviction(
        "evicted-00000-0", namespace, {"metadata": {"name": "evicted-00000-0", "namespace": namespace}}
    )
    wait_for(lambda: phase_is(custom, namespace, "evicted", "Succeeded", "Failed"), what="evicted to finish")
    done.set()
    watcher.join()
    trial = get(custom, namespace, "trials", "evicted-00000")["status"]
    assert (trial["phase"], trial["attempt"], trial.get("failures", 0)) == ("Succeeded", 1, 0)
    assert (1, "Pending", "EvictionByEvictionAPI") in seen, seen
    assert not [s for s in seen if s[2] == "PodDeleted"], seen
    (disrupted,) = events(core, namespace, "TrialDisrupted")
    assert "attempt 0 ended by EvictionByEvictionAPI" in disrupted.message, disrupted.message
    iterations = [r["training_iteration"] for r in result_lines(s3, namespace, "evicted", "evicted-00000")]
    assert iterations == list(range(1, 13))  # resumed from its checkpoint: no iteration lost or repeated


def test_invalid_specs_are_rejected_or_marked(cluster, operator, custom, core, namespace, storage_secret):
    bad_schema = experiment("noschema", cluster, storage_secret, config={"x": 1})
    del bad_schema["spec"]["mode"]
    with pytest.raises(client.ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", bad_schema)
    assert exc.value.status == 422 and "mode" in exc.value.body
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("badspace", cluster, storage_secret, config={"lr": {"loguniform": [0, 1]}}),
    )
    root = experiment("asroot", cluster, storage_secret, config={"x": 1})
    root["spec"]["template"] = {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", root)

    def marked(name):
        conds = get(custom, namespace, "experiments", name).get("status", {}).get("conditions", [])
        return next(
            (
                c["message"]
                for c in conds
                if c["type"] == "Ready" and c["status"] == "False" and c["reason"] == "InvalidSpec"
            ),
            None,
        )

    wait_for(lambda: marked("badspace"), what="the InvalidSpec condition")
    wait_for(lambda: marked("asroot"), what="the InvalidSpec condition of a root template")
    assert "'restricted' Pod Security level" in marked("asroot") and "runAsUser is 0" in marked("asroot")
    posted(core, namespace, "InvalidSpec")
    assert trials(custom, namespace) == {}
    # the operator still serves other experiments
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", experiment("fine", cluster, storage_secret, config={"x": 2})
    )
    wait_for(lambda: phase_is(custom, namespace, "fine", "Succeeded"), what="the valid experiment to succeed")


def test_suspend_and_resume_continue_from_checkpoints(cluster, operator, custom, core, s3, namespace, storage_secret):
    spec = experiment(
        "pausable", cluster, storage_secret, config={"x": 1, "sleep": 0.3}, stop={"training_iteration": 10}
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(
        lambda: (get(custom, namespace, "trials", "pausable-00000").get("status", {}).get("iteration") or 0) >= 2,
        what="some progress",
    )
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", "pausable", {"spec": {"suspend": True}}
    )
    wait_for(lambda: phase_is(custom, namespace, "pausable", "Suspended"), what="Suspended")
    wait_for(
        lambda: get(custom, namespace, "trials", "pausable-00000")["status"]["phase"] == "Paused",
        what="the trial to pause",
    )
    assert not [p for p in core.list_namespaced_pod(namespace).items if p.status.phase in ("Running", "Pending")]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", "pausable", {"spec": {"suspend": False}}
    )
    wait_for(lambda: phase_is(custom, namespace, "pausable", "Succeeded", "Failed"), what="finish after resume")
    trial = get(custom, namespace, "trials", "pausable-00000")
    assert trial["status"]["phase"] == "Succeeded" and trial["status"].get("failures", 0) == 0
    lines = result_lines(s3, namespace, "pausable", "pausable-00000")
    assert [r["training_iteration"] for r in lines] == list(range(1, 11))
    assert lines[-1]["score"] == 10.0


def test_deleting_an_experiment_removes_its_trials_and_pods(cluster, operator, custom, core, namespace, storage_secret):
    spec = experiment(
        "doomed",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2]}, "sleep": 1},
        stop={"training_iteration": 100},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(
        lambda: sum(1 for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running") == 2,
        what="two running trial pods",
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", "doomed")
    wait_for(
        lambda: not trials(custom, namespace) and not core.list_namespaced_pod(namespace).items,
        timeout=90,
        what="trials and pods to be garbage-collected",
    )


def test_operator_killed_mid_experiment_finishes_without_duplicates(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    spec = experiment(
        "survivor",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2, 3, 4, 5, 6]}, "sleep": 0.3},
        stop={"training_iteration": 5},
        maxConcurrentTrials=2,
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(
        lambda: (
            (get(custom, namespace, "experiments", "survivor").get("status", {}).get("trials") or {}).get(
                "succeeded", 0
            )
            >= 2
        ),
        what="two trials done",
    )
    operator.kill()
    time.sleep(2)
    operator.start()
    wait_for(
        lambda: phase_is(custom, namespace, "survivor", "Succeeded", "Failed"),
        timeout=180,
        what="the experiment to finish after the restart",
    )
    exp = get(custom, namespace, "experiments", "survivor")
    assert exp["status"]["phase"] == "Succeeded"
    assert exp["status"]["trials"]["total"] == 6 and exp["status"]["trials"]["succeeded"] == 6
    found = trials(custom, namespace)
    assert sorted(found) == [f"survivor-{i:05d}" for i in range(6)]
    assert sorted(t["spec"]["config"]["x"] for t in found.values()) == [1, 2, 3, 4, 5, 6]
    for name in found:
        assert [r["training_iteration"] for r in result_lines(s3, namespace, "survivor", name)] == [1, 2, 3, 4, 5]
    assert exp["status"]["bestTrial"]["metricValue"] == 30.0


def test_pbt_restarts_the_worst_trial_from_the_best_ones_checkpoint_with_an_explored_config(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    mutations = {"x": [1, 2, 3, 4]}
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment(
            "pbt",
            cluster,
            storage_secret,
            config={"x": {"grid_search": [1, 2, 3, 4]}, "sleep": 0.3},
            maxConcurrentTrials=4,
            stop={"training_iteration": 8},
            checkpoint={"frequency": 0, "atEnd": True},
            scheduler={
                "name": "pbt",
                "params": {
                    "time_attr": "training_iteration",
                    "perturbation_interval": 2,
                    "hyperparam_mutations": mutations,
                    "resample_probability": 0.0,
                },
            },
        ),
    )
    wait_for(
        lambda: phase_is(custom, namespace, "pbt", "Succeeded", "Failed"),
        timeout=240,
        what="the PBT experiment to finish",
    )
    exp = get(custom, namespace, "experiments", "pbt")
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    found = trials(custom, namespace)
    perturbed = {name: t for name, t in found.items() if t["status"].get("perturbations")}
    assert perturbed, {name: t["status"].get("reason") for name, t in found.items()}
    for name, trial in perturbed.items():
        status = trial["status"]
        last = status["perturbations"][-1]
        donor_dir = trial_prefix(s3, S3_BUCKET, "experiments", namespace, "pbt", last["donor"])
        assert status["restoreFrom"] == f"s3://{S3_BUCKET}/{donor_dir}/checkpoint_{last['iteration']:06d}"
        # the new config is the donor's explored as Ray does (a list value moves one step, clamped at the
        # ends), read from the policy line the attempt wrote (Ray's pbt_policy_<trial>.txt); it may equal the
        # trial's own first config (a donor at x=3 shifted left gives a trial that started at 2 its own x)
        policy_key = f"{donor_dir.rsplit('/', 1)[0]}/pbt_policy_{name}.txt"
        policy = s3.get_object(Bucket=S3_BUCKET, Key=policy_key)["Body"].read().decode().splitlines()
        _, donor, _, donor_iteration, donor_config, new_config = json.loads(policy[-1])
        assert (donor, donor_iteration, new_config) == (last["donor"], last["iteration"], status["config"])
        step = mutations["x"].index(new_config["x"]) - mutations["x"].index(donor_config["x"])
        assert step in (-1, 0, 1) and (step != 0 or donor_config["x"] in (1, 4)), (donor_config, new_config)
        lines = result_lines(s3, namespace, "pbt", name)
        iterations = [r["training_iteration"] for r in lines]
        # one lineage: its own lines up to the donor's iteration, then on from there (a donor ahead of the
        # trial makes a jump, as in Ray; one restored at the stop iteration reports once more, then stops)
        assert iterations == sorted(set(iterations)) and iterations[-1] in (8, 9), iterations
        # from the donor's iteration on, the score is the donor's checkpoint plus the new x per step
        donor_score = next(
            r["score"]
            for r in result_lines(s3, namespace, "pbt", last["donor"])
            if r["training_iteration"] == last["iteration"]
        )
        after = [r for r in lines if r["training_iteration"] > last["iteration"]]
        if len(status["perturbations"]) == 1 and after:
            assert after[0]["score"] == donor_score + status["config"]["x"]
    posted(core, namespace, "TrialPerturbed")
    # every exploit's line is in the experiment's pbt_global.txt once, whichever pod appended it first
    experiment_dir = trial_prefix(s3, S3_BUCKET, "experiments", namespace, "pbt", name).rsplit("/", 1)[0]
    global_log = s3.get_object(Bucket=S3_BUCKET, Key=f"{experiment_dir}/pbt_global.txt")["Body"].read().decode()
    lines = [json.loads(line) for line in global_log.splitlines()]
    assert len(lines) == sum(len(t["status"]["perturbations"]) for t in perturbed.values())
    for name in perturbed:
        policy_key = f"{experiment_dir}/pbt_policy_{name}.txt"
        policy = s3.get_object(Bucket=S3_BUCKET, Key=policy_key)["Body"].read().decode().splitlines()
        assert json.loads(policy[-1]) in lines


def test_a_multi_objective_optuna_experiment_reports_its_pareto_front(
    cluster, operator, custom, namespace, storage_secret
):
    body = experiment(
        "moo",
        cluster,
        storage_secret,
        config={"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
        trainable={"entrypoint": "tests.integration.trainables:TwoObjectives"},
        objectives=[{"metric": "accuracy", "mode": "max"}, {"metric": "cost", "mode": "min"}],
        numSamples=6,
        maxConcurrentTrials=2,
        stop={"training_iteration": 2},
        searchAlgorithm={
            "name": "optuna",
            "seed": 11,
            "params": {"sampler": "nsga2", "sampler_args": {"population_size": 4}},
        },
    )
    with pytest.raises(client.ApiException) as both:  # the schema refuses objectives next to metric and mode
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)
    assert both.value.status == 422 and "objectives takes the place of metric and mode" in both.value.body
    del body["spec"]["metric"], body["spec"]["mode"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)
    wait_for(lambda: phase_is(custom, namespace, "moo", "Succeeded", "Failed"), what="experiment to finish")
    exp = get(custom, namespace, "experiments", "moo")
    status = exp["status"]
    assert status["phase"] == "Succeeded", status
    assert status["trials"]["succeeded"] == 6 and "bestTrial" not in status
    found = trials(custom, namespace)
    values = {
        name: [t["status"]["lastResult"]["accuracy"], t["status"]["lastResult"]["cost"]] for name, t in found.items()
    }
    assert all("metricValue" not in t["status"] for t in found.values())
    front = status["paretoFront"]
    on_front = [p["trial"] for p in front["trials"]]
    assert front["count"] == len(on_front) >= 1 and on_front == sorted(on_front)
    for p in front["trials"]:
        assert p["values"] == values[p["trial"]]
    for name, (accuracy, cost) in values.items():
        dominated = any(a >= accuracy and c <= cost and (a, c) != (accuracy, cost) for a, c in values.values())
        assert dominated == (name not in on_front), (name, values, front)
    flipped = [{"metric": "accuracy", "mode": "max"}, {"metric": "cost", "mode": "max"}]
    with pytest.raises(client.ApiException) as changed:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "experiments", "moo", {"spec": {"objectives": flipped}}
        )
    assert changed.value.status == 422 and "objectives cannot change" in changed.value.body
