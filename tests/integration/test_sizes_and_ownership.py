"""Issue 22.2 and 22.3 (and issue 21's config size) on the local cluster: a config larger than an environment
string may be runs, an oversized one is refused before anything is created and its Experiment can still be
deleted, a deleting Experiment creates nothing more and loses its finalizer although its status cannot be
written, and an Experiment created again after ``kubectl delete --cascade=orphan`` never adopts the earlier
one's Trials."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

import kubetune as tune
from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from kubetune.limits import MAX_FIELD_BYTES, SpecTooLarge
from tests.integration.test_operator import (
    GROUP,
    VERSION,
    events,
    experiment,
    get,
    phase_is,
    posted,
    result_lines,
    trials,
)


def create(custom, namespace, body):
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)


def condition(custom, namespace, name, type_):
    conditions = get(custom, namespace, "experiments", name).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == type_), {})


def owned_by(trial: dict) -> str | None:
    return next((r["uid"] for r in trial["metadata"].get("ownerReferences") or () if r.get("controller")), None)


def test_a_150_kb_config_runs_to_succeeded(cluster, operator, custom, s3, namespace, storage_secret):
    blob = "b" * 150_000  # over Linux's 128 KiB per environment string (MAX_ARG_STRLEN)
    create(custom, namespace, experiment("large", cluster, storage_secret, config={"x": 1, "blob": blob}))
    wait_for(lambda: phase_is(custom, namespace, "large", "Succeeded", "Failed"), timeout=180, what="the end")
    exp = get(custom, namespace, "experiments", "large")
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    (trial,) = trials(custom, namespace).values()
    assert trial["status"]["phase"] == "Succeeded" and trial["status"]["iteration"] == 3
    last = result_lines(s3, namespace, "large", trial["metadata"]["name"])[-1]
    assert last["config"]["blob"] == blob  # the trainable got the whole config, from the attempt's Secret


def test_an_oversized_config_is_refused_before_anything_is_created_and_its_experiment_deletes(
    cluster, operator, custom, core, namespace, storage_secret
):
    big = {"x": 1, "blob": "b" * 420_000}  # the 420 KB: over the limit, and over kopf's old annotation
    grid = {"x": {"grid_search": list(range(200_000))}}  # the 200,000 values: about 1.3 MB
    create(custom, namespace, experiment("big", cluster, storage_secret, config=big))
    create(custom, namespace, experiment("grid", cluster, storage_secret, config=grid))
    for name in ("big", "grid"):
        wait_for(
            lambda name=name: condition(custom, namespace, name, "Ready").get("reason") == "InvalidSpec",
            timeout=60,
            what=f"{name}'s InvalidSpec condition",
        )
        message = condition(custom, namespace, name, "Ready")["message"]
        assert message.startswith(f"spec.config is over {MAX_FIELD_BYTES // 1024} KiB") and "with_parameters" in message
        annotations = get(custom, namespace, "experiments", name)["metadata"].get("annotations") or {}
        assert sum(len(k) + len(v) for k, v in annotations.items()) < 4096  # kopf's state stays small
    assert trials(custom, namespace) == {}  # nothing was created
    posted(core, namespace, "InvalidSpec", match="spec.config is over")
    for name in ("big", "grid"):  # kopf can patch them: their finalizer goes with the delete
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)
    wait_for(lambda: not get(custom, namespace, "experiments", "big"), timeout=30, what="big to be deleted")
    wait_for(lambda: not get(custom, namespace, "experiments", "grid"), timeout=30, what="grid to be deleted")


def quadratic(config):
    return {"score": -((config["x"] - 3) ** 2)}


def test_a_10_mb_config_through_tune_run_is_refused_before_anything_is_uploaded(
    cluster, operator, custom, namespace, storage_secret, s3, monkeypatch
):
    for key, value in cluster.env().items():  # the user's shell after `eval $(python -m devcluster up)`
        monkeypatch.setenv(key, value)
    started = time.perf_counter()
    with pytest.raises(SpecTooLarge, match=r"^spec.config is over 192 KiB .*tune.with_parameters"):
        tune.run(
            quadratic,
            name="tenmb",
            namespace=namespace,
            storage={"uri": f"s3://{S3_BUCKET}/sized", "credentialsSecret": storage_secret},
            config={"x": tune.uniform(0, 5), "table": ["r" * 1000] * 10_000},
            verbose=0,
        )
    assert time.perf_counter() - started < 5  # one line at once, not an SSLEOFError after 10 s
    assert "Contents" not in s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=f"sized/{namespace}/")  # nothing left
    assert not get(custom, namespace, "experiments", "tenmb")


def deny_status_writes(cluster, namespace: str) -> str:
    """A ValidatingAdmissionPolicy (the API server's own admission) refusing every write of an Experiment's
    status in ``namespace``; returns its name."""
    name = f"deny-experiment-status-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["UPDATE"],
                        "resources": ["experiments/status"],
                    }
                ]
            },
            "validations": [{"expression": "false", "message": "status writes are refused by the test"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]})
    )
    return name


def test_a_deleting_experiment_creates_nothing_more_and_loses_its_finalizer_without_its_status(
    cluster, operator, custom, namespace, storage_secret
):
    spec = experiment(
        "doomed",
        cluster,
        storage_secret,
        config={"x": {"uniform": [0, 1]}},
        numSamples=500,
        maxConcurrentTrials=4,
        stop={"training_iteration": 1},  # short trials: slots free all the time, new Trials keep coming
    )
    exp = create(custom, namespace, spec)
    wait_for(lambda: len(trials(custom, namespace)) >= 8, timeout=120, what="trials to come and go")
    policy = deny_status_writes(cluster, namespace)
    try:

        def refused():
            try:
                custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, "experiments", "doomed", {"status": {"phase": "Running"}}
                )
            except client.ApiException as exc:
                return exc.status in (400, 403, 422) and "refused by the test" in (exc.body or "")
            return False

        wait_for(refused, timeout=30, what="status writes to be refused")
        time.sleep(2)  # the operator's own status writes fail now
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "experiments", "doomed", propagation_policy="Orphan"
        )  # orphan: the Trials stay to be counted
        deleted_at = time.time()
        deletion = get(custom, namespace, "experiments", "doomed")["metadata"]["deletionTimestamp"]
        wait_for(lambda: not get(custom, namespace, "experiments", "doomed"), timeout=30, what="the finalizer to go")
        gone_after = time.time() - deleted_at
        count = len(trials(custom, namespace))
        time.sleep(5)
        after = trials(custom, namespace)
        assert len(after) == count, "Trials were created after the Experiment was gone"
        late = sorted(n for n, t in after.items() if t["metadata"]["creationTimestamp"] > deletion)
        assert not late, f"created after the deletion began ({deletion}): {late}"
        assert all(owned_by(t) in (None, exp["metadata"]["uid"]) for t in after.values())
        assert gone_after < 15, gone_after
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy)


def test_an_experiment_created_again_after_an_orphaning_delete_never_adopts_the_earlier_trials(
    cluster, operator, custom, core, namespace, storage_secret
):
    first = create(
        custom,
        namespace,
        experiment(
            "same",
            cluster,
            storage_secret,
            config={"x": {"grid_search": [1, 2, 3]}, "sleep": 1.0},
            stop={"training_iteration": 60},
        ),
    )
    wait_for(
        lambda: sum(t.get("status", {}).get("phase") == "Running" for t in trials(custom, namespace).values()) == 3,
        timeout=120,
        what="three running trials",
    )
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", "same", propagation_policy="Orphan"
    )
    wait_for(lambda: not get(custom, namespace, "experiments", "same"), timeout=30, what="the first to be deleted")
    wait_for(lambda: all(owned_by(t) is None for t in trials(custom, namespace).values()), timeout=30, what="orphans")
    old = {name: t["metadata"]["uid"] for name, t in trials(custom, namespace).items()}
    assert sorted(old) == ["same-00000", "same-00001", "same-00002"]

    second = create(
        custom,
        namespace,
        experiment("same", cluster, storage_secret, config={"x": {"grid_search": [10, 20, 30]}}),
    )
    wait_for(
        lambda: condition(custom, namespace, "same", "Ready").get("reason") == "TrialNameTaken",
        timeout=60,
        what="the TrialNameTaken condition",
    )
    message = condition(custom, namespace, "same", "Ready")["message"]
    assert "already exists and is not this Experiment's" in message and "no owner (orphaned)" in message
    posted(core, namespace, "TrialNameTaken")
    time.sleep(3)
    now = trials(custom, namespace)
    assert {name: t["metadata"]["uid"] for name, t in now.items()} == old  # none taken over, none created
    assert all(owned_by(t) is None for t in now.values())
    pods = core.list_namespaced_pod(namespace, label_selector="kubetune.io/experiment=same").items
    assert pods and all(p.metadata.owner_references[0].uid in old.values() for p in pods)
    assert all(p.metadata.deletion_timestamp is None for p in pods)  # the earlier pods: not stopped by it
    assert not [
        e for e in events(core, namespace, "TrialsCreated") if e.involved_object.uid == second["metadata"]["uid"]
    ]

    # the user deletes the leftovers: the new Experiment runs its own three trials
    custom.delete_collection_namespaced_custom_object(
        GROUP, VERSION, namespace, "trials", label_selector="kubetune.io/experiment=same"
    )
    wait_for(lambda: phase_is(custom, namespace, "same", "Succeeded", "Failed"), timeout=240, what="the second's end")
    assert get(custom, namespace, "experiments", "same")["status"]["phase"] == "Succeeded"
    mine = trials(custom, namespace)
    assert sorted(mine) == ["same-00000", "same-00001", "same-00002"]
    assert {owned_by(t) for t in mine.values()} == {second["metadata"]["uid"]} != {first["metadata"]["uid"]}
    assert sorted(t["spec"]["config"]["x"] for t in mine.values()) == [10, 20, 30]
    assert all(t["status"]["iteration"] == 3 for t in mine.values())
    assert condition(custom, namespace, "same", "Ready")["status"] == "True"


def test_an_experiment_deleted_while_the_operator_is_down_goes_when_it_is_back_and_gets_no_new_trial(
    cluster, operator, custom, namespace, storage_secret
):
    spec = experiment(
        "downdel",
        cluster,
        storage_secret,
        config={"x": {"uniform": [0, 1]}},
        numSamples=500,
        maxConcurrentTrials=4,
        stop={"training_iteration": 1},
    )
    create(custom, namespace, spec)
    wait_for(lambda: len(trials(custom, namespace)) >= 6, timeout=120, what="trials to come and go")
    operator.kill()  # SIGKILL: nothing of its memory survives
    try:
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "experiments", "downdel", propagation_policy="Orphan"
        )
        deletion = get(custom, namespace, "experiments", "downdel")["metadata"]["deletionTimestamp"]
        count = len(trials(custom, namespace))
    finally:
        operator.start()
    wait_for(lambda: not get(custom, namespace, "experiments", "downdel"), timeout=60, what="the finalizer to go")
    time.sleep(3)
    after = trials(custom, namespace)
    assert len(after) == count
    assert not [n for n, t in after.items() if t["metadata"]["creationTimestamp"] > deletion]
