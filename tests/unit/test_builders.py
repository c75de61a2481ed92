"""Names and manifests the operator creates: trial and pod names, Trial objects, trial pods."""

from __future__ import annotations

import copy
import json
import re

import pytest
from conftest_crds import root_schema, validate

from devcluster.testkit import experiment_object
from kubetune.env import TERMINATION_MESSAGE_PATH, CheckpointPolicy, read_trial_env
from kubetune_operator.builders import (
    DECISION_WAIT_S,
    build_pod,
    build_token_secret,
    build_trial,
    owner_reference,
    pod_resources,
    trial_dir_uri,
)
from kubetune_operator.labels import (
    LABEL_ATTEMPT,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    LABEL_TRIAL,
    MAX_TRIAL_NAME_LENGTH,
    label_value,
    pod_name,
    trial_name,
)
from kubetune_operator.settings import CollectorSettings, Settings, StorageSettings, TrialSettings

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def experiment(**spec) -> dict:
    base = {
        "trainable": {"entrypoint": "mytrain:Trainable"},
        "config": {"lr": {"loguniform": [1e-4, 1e-1]}},
        "metric": "acc",
        "mode": "max",
        "storage": {"uri": "s3://bucket/runs/"},
    }
    base.update(spec)
    return experiment_object("mnist", "exp-uid-1", namespace="team-a", **base)


def trial(exp: dict | None = None, index: int = 3, **status) -> dict:
    obj = build_trial(exp or experiment(), index, {"lr": 0.01, "layers": 2}, "3_lr=0.01,layers=2")
    obj["metadata"]["uid"] = "trial-uid-3"
    if status:
        obj["status"] = status
    return obj


def pod(
    exp: dict | None = None, tr: dict | None = None, attempt: int = 0, settings: Settings | None = None, **kwargs
) -> dict:
    exp = exp or experiment()
    return build_pod(exp, tr or trial(exp), attempt, settings or Settings(), **kwargs)


def container(p: dict) -> dict:
    (c,) = p["spec"]["containers"]
    return c


def env_of(p: dict) -> dict:
    return {e["name"]: e.get("value") for e in container(p)["env"]}


# ------------------------------------------------------------------ names


def test_trial_name_is_experiment_and_zero_padded_index():
    assert trial_name("mnist", 0) == "mnist-00000"
    assert trial_name("mnist", 42) == "mnist-00042"
    assert trial_name("mnist", 123456) == "mnist-123456"


def test_trial_name_is_deterministic_and_a_dns_label():
    for name in ("a", "mnist", "x" * 253, "with.dots.in.it", "a-" * 100 + "b"):
        first = trial_name(name, 7)
        assert first == trial_name(name, 7)
        assert DNS_LABEL.match(first) and len(first) <= MAX_TRIAL_NAME_LENGTH, first


def test_long_experiment_names_are_cut_and_hashed():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    name_a, name_b = trial_name(a, 1), trial_name(b, 1)
    assert name_a != name_b
    assert len(name_a) == MAX_TRIAL_NAME_LENGTH and name_a.startswith("xxxx") and name_a.endswith("-00001")
    assert re.fullmatch(r"x+-[0-9a-f]{8}-00001", name_a)


def test_dots_become_dashes_without_colliding_with_the_dashed_name():
    assert "." not in trial_name("a.b", 0)
    assert trial_name("a.b", 0) != trial_name("a-b", 0) == "a-b-00000"


def test_experiment_name_fitting_exactly_is_kept():
    name = "e" * (MAX_TRIAL_NAME_LENGTH - 6)
    assert trial_name(name, 1) == name + "-00001"
    assert trial_name(name + "e", 1) != name + "e-00001"


def test_trial_name_rejects_bad_input():
    with pytest.raises(ValueError):
        trial_name("mnist", -1)
    with pytest.raises(ValueError):
        trial_name("", 0)


def test_pod_name_is_trial_and_attempt_and_fits_a_dns_label():
    assert pod_name("mnist-00003", 0) == "mnist-00003-0"
    assert pod_name("mnist-00003", 12) == "mnist-00003-12"
    longest = trial_name("y" * 253, 99999)
    assert len(pod_name(longest, 999999)) <= 63 and pod_name(longest, 999999).endswith("-999999")
    long_trial = "t" * 100
    assert DNS_LABEL.match(pod_name(long_trial, 3)) and pod_name(long_trial, 3) != pod_name("t" * 101, 3)
    with pytest.raises(ValueError):
        pod_name("mnist-00003", -1)


def test_label_value_keeps_short_names_and_bounds_long_ones():
    assert label_value("with.dots-1") == "with.dots-1"
    long = label_value("n" * 253)
    assert len(long) == 63 and LABEL_VALUE.match(long) and long != label_value("n" * 252)


# ------------------------------------------------------------------ Trial


def test_build_trial_manifest():
    exp = experiment()
    t = build_trial(exp, 3, {"lr": 0.01}, "3_lr=0.01")
    assert t["apiVersion"] == "kubetune.io/v1alpha1" and t["kind"] == "Trial"
    assert t["metadata"]["name"] == "mnist-00003" and t["metadata"]["namespace"] == "team-a"
    assert t["metadata"]["labels"] == {LABEL_EXPERIMENT: "mnist", LABEL_MANAGED_BY: "kubetune"}
    assert t["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubetune.io/v1alpha1",
            "kind": "Experiment",
            "name": "mnist",
            "uid": "exp-uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert t["spec"] == {"experiment": "mnist", "index": 3, "config": {"lr": 0.01}, "tag": "3_lr=0.01"}
    assert validate(t["spec"], root_schema("Trial")["properties"]["spec"], ".spec") == []


def test_build_trial_copies_the_config_and_cuts_the_tag():
    config = {"nested": {"a": [1, 2]}}
    t = build_trial(experiment(), 0, config, "x" * 1000)
    config["nested"]["a"].append(3)
    assert t["spec"]["config"] == {"nested": {"a": [1, 2]}}
    assert len(t["spec"]["tag"]) == 256
    assert "tag" not in build_trial(experiment(), 0, {}, None)["spec"]


def test_owner_reference_needs_a_uid():
    exp = experiment()
    del exp["metadata"]["uid"]
    with pytest.raises(ValueError, match="uid"):
        build_trial(exp, 0, {})
    with pytest.raises(ValueError, match="uid"):
        owner_reference({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})


# ------------------------------------------------------------------ Pod: identity and runtime contract


def test_pod_identity_owner_and_labels():
    p = pod(attempt=2)
    meta = p["metadata"]
    assert (p["apiVersion"], p["kind"]) == ("v1", "Pod")
    assert meta["name"] == "mnist-00003-2" and meta["namespace"] == "team-a"
    assert meta["labels"] == {
        LABEL_EXPERIMENT: "mnist",
        LABEL_TRIAL: "mnist-00003",
        LABEL_ATTEMPT: "2",
        LABEL_MANAGED_BY: "kubetune",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "kubetune.io/v1alpha1",
            "kind": "Trial",
            "name": "mnist-00003",
            "uid": "trial-uid-3",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_pod_runs_the_runtime_in_the_experiment_image_or_the_default():
    assert container(pod())["command"] == ["python", "-m", "kubetune.runtime"]
    assert container(pod())["image"] == Settings().trials.default_image
    assert container(pod(experiment(image="reg/mnist:2")))["image"] == "reg/mnist:2"


def test_pod_env_is_the_runtime_contract():
    exp = experiment(
        stop={"training_iteration": 10},
        checkpoint={"frequency": 5, "atEnd": False, "keep": 2, "scoreAttribute": "min-loss"},
        storage={"uri": "s3://bucket/runs/", "endpoint": "http://127.0.0.1:9000", "region": "eu-1"},
    )
    settings = Settings(collector=CollectorSettings(url="http://collector.kubetune-system.svc:8080"))
    p = build_pod(exp, trial(exp), 1, settings)
    secret = build_token_secret(p, trial(exp), "secret-token")
    env = read_trial_env(env_of(p), secret["stringData"]["config.json"])
    assert (env.namespace, env.experiment, env.trial, env.attempt) == ("team-a", "mnist", "mnist-00003", 1)
    assert env.config == {"lr": 0.01, "layers": 2}
    assert env_of(p)["KUBETUNE_CONFIG_FILE"] == "/var/run/kubetune/config.json"
    assert {"name": "kubetune-attempt", "mountPath": "/var/run/kubetune", "readOnly": True} in container(p)[
        "volumeMounts"
    ]
    assert {"name": "kubetune-attempt", "secret": {"secretName": "mnist-00003-1-trial-ui", "defaultMode": 0o444}} in p[
        "spec"
    ]["volumes"]
    assert env.trial_dir_uri == "s3://bucket/runs/team-a/mnist/exp-uid-/mnist-00003"  # the uid's first 8
    assert env.entrypoint == "mytrain:Trainable" and env.source is None and env.pickle_uri is None
    assert env.stop == {"training_iteration": 10}
    assert env.checkpoint == CheckpointPolicy(frequency=5, atEnd=False, keep=2, scoreAttribute="min-loss")
    assert (env.metric, env.mode) == ("acc", "max")
    assert (env.storage_endpoint, env.storage_region) == ("http://127.0.0.1:9000", "eu-1")
    assert env.collector_url == "http://collector.kubetune-system.svc:8080"
    assert env.token is None and env.pod_name == "mnist-00003-1"  # the token comes from the attempt's Secret
    token_var = next(e for e in container(p)["env"] if e["name"] == "KUBETUNE_TOKEN")
    assert token_var == {
        "name": "KUBETUNE_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "mnist-00003-1-trial-ui", "key": "token"}},
    }  # <pod>-<the Trial uid's first 8>
    assert secret["metadata"]["name"] == "mnist-00003-1-trial-ui" and secret["stringData"]["token"] == "secret-token"
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "Trial"
    assert "secret-token" not in json.dumps(p)
    assert env.restore_from is None


def test_trials_wait_for_the_answer_to_each_result_when_the_operator_may_stop_them_there():
    assert read_trial_env(env_of(pod()), "{}").decision_wait_s == 0  # fifo, no stoppers: nothing to wait for
    for spec in (
        {"scheduler": {"name": "asha"}},
        {"stoppers": [{"name": "maximum_iteration", "params": {"max_iter": 3}}]},
    ):
        assert read_trial_env(env_of(pod(experiment(**spec))), "{}").decision_wait_s == DECISION_WAIT_S


def test_pod_env_for_inline_source_and_pickled_trainables():
    src = experiment(trainable={"source": "def train(config): pass", "name": "train"})
    env = read_trial_env(env_of(pod(src)), "{}")
    assert (env.source, env.name, env.entrypoint) == ("def train(config): pass", "train", None)
    pickled = experiment(trainable={"pickleURI": "s3://bucket/fn.pkl"})
    assert read_trial_env(env_of(pod(pickled)), "{}").pickle_uri == "s3://bucket/fn.pkl"


def test_checkpoint_policy_defaults_when_the_spec_has_none():
    assert read_trial_env(env_of(pod()), "{}").checkpoint == CheckpointPolicy()


def test_collector_url_defaults_to_loopback_on_the_bind_port():
    settings = Settings(collector=CollectorSettings(bind_port=9123))
    assert read_trial_env(env_of(pod(settings=settings)), "{}").collector_url == "http://127.0.0.1:9123"


def test_storage_falls_back_to_the_operator_default_and_is_required():
    exp = experiment()
    del exp["spec"]["storage"]
    settings = Settings(
        storage=StorageSettings(default_uri="file:///data/", default_endpoint=None, default_region="local")
    )
    env = read_trial_env(env_of(pod(exp, settings=settings)), "{}")
    assert env.trial_dir_uri == "file:///data/team-a/mnist/exp-uid-/mnist-00003" and env.storage_region == "local"
    with pytest.raises(ValueError, match="storage"):
        pod(exp)


def test_trial_dir_uri_joins_without_a_double_slash():
    assert trial_dir_uri("s3://b/p/", "ns", "e", "0123456789", "t") == "s3://b/p/ns/e/01234567/t"
    assert trial_dir_uri("file:///x", "ns", "e", "0123456789", "t") == "file:///x/ns/e/01234567/t"


@pytest.mark.parametrize(
    "status, restore_from, expected",
    [
        ({}, None, "s3://bucket/other/checkpoint_000004"),
        (
            {"checkpoint": {"uri": "s3://bucket/runs/team-a/mnist/mnist-00003/checkpoint_000002", "iteration": 2}},
            None,
            None,
        ),
        ({"checkpoint": {"uri": "s3://x/checkpoint_000002", "iteration": 2}}, "s3://explicit/ck", "s3://explicit/ck"),
    ],
)
def test_restore_from(status, restore_from, expected):
    exp = experiment()
    tr = trial(exp, **status)
    tr["spec"]["restoreFrom"] = "s3://bucket/other/checkpoint_000004"
    assert read_trial_env(env_of(build_pod(exp, tr, 1, Settings(), restore_from)), "{}").restore_from == expected


# ------------------------------------------------------------------ Pod: security and lifecycle


def test_pod_meets_the_restricted_pod_security_standard():
    p = pod()
    spec = p["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container(p)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert spec["automountServiceAccountToken"] is False
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert forbidden not in spec


def test_template_security_context_overrides_the_pod_defaults():
    exp = experiment(template={"securityContext": {"runAsUser": 2000, "fsGroup": 3000}})
    ctx = pod(exp)["spec"]["securityContext"]
    assert ctx == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "fsGroup": 3000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    settings = Settings(trials=TrialSettings(run_as_user=4242))
    assert pod(settings=settings)["spec"]["securityContext"]["runAsUser"] == 4242


def test_pod_lifecycle_fields():
    p = pod(settings=Settings(trials=TrialSettings(termination_grace_period_s=17)))
    assert p["spec"]["restartPolicy"] == "Never"
    assert p["spec"]["terminationGracePeriodSeconds"] == 17
    assert container(p)["terminationMessagePolicy"] == "File"  # never the log tail: it may hold secrets
    assert container(p)["terminationMessagePath"] == TERMINATION_MESSAGE_PATH


def test_the_credentials_secret_and_the_attempts_own_token_are_the_only_secrets_we_add():
    exp = experiment(storage={"uri": "s3://b", "credentialsSecret": "s3-creds"})
    assert container(pod(exp))["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert "envFrom" not in container(pod())
    assert [e["valueFrom"] for e in container(pod(exp))["env"] if "valueFrom" in e] == [
        {"secretKeyRef": {"name": "mnist-00003-0-trial-ui", "key": "token"}}
    ]


# ------------------------------------------------------------------ Pod: resources


def test_resources_without_gpu():
    assert pod_resources({"cpu": 2, "memory": "4Gi", "gpu": 0}) == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert pod_resources(None) == {"requests": {"cpu": "1"}}
    assert pod_resources({"cpu": "500m"}) == {"requests": {"cpu": "500m"}}


def test_gpus_are_an_extended_resource_with_requests_equal_to_limits():
    res = pod_resources({"cpu": "4", "memory": "16Gi", "gpu": 2})
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "2"
    assert "cpu" not in res["limits"]
    amd = pod_resources({"gpu": 1, "gpuResourceName": "amd.com/gpu"})
    assert amd == {"requests": {"cpu": "1", "amd.com/gpu": "1"}, "limits": {"amd.com/gpu": "1"}}


def test_pod_uses_resources_per_trial():
    exp = experiment(resourcesPerTrial={"cpu": "250m", "memory": 1 << 30, "gpu": 1})
    assert container(pod(exp))["resources"] == {
        "requests": {"cpu": "250m", "memory": str(1 << 30), "nvidia.com/gpu": "1"},
        "limits": {"memory": str(1 << 30), "nvidia.com/gpu": "1"},
    }


# ------------------------------------------------------------------ Pod: template overlay

TEMPLATE = {
    "labels": {"team": "vision", LABEL_TRIAL: "hijack", LABEL_MANAGED_BY: "someone"},
    "annotations": {"cost-center": "42"},
    "nodeSelector": {"accelerator": "h100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
    "priorityClassName": "batch-low",
    "runtimeClassName": "nvidia",
    "serviceAccountName": "s3-reader",
    "imagePullSecrets": [{"name": "registry"}],
    "env": [
        {"name": "OMP_NUM_THREADS", "value": "1"},
        {"name": "WANDB_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}},
    ],
    "envFrom": [{"configMapRef": {"name": "settings"}}],
    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
}


def test_template_overlay_reaches_every_field():
    exp = experiment(template=copy.deepcopy(TEMPLATE), storage={"uri": "s3://b", "credentialsSecret": "creds"})
    p = pod(exp)
    spec, c = p["spec"], container(p)
    for field in (
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "runtimeClassName",
        "serviceAccountName",
        "imagePullSecrets",
    ):
        assert spec[field] == TEMPLATE[field], field
    assert spec["volumes"][2:] == TEMPLATE["volumes"]
    assert [v["name"] for v in spec["volumes"][:2]] == ["kubetune-attempt", "kubetune-scratch"]
    assert c["volumeMounts"][2:] == TEMPLATE["volumeMounts"]
    assert [m["name"] for m in c["volumeMounts"][:2]] == ["kubetune-attempt", "kubetune-scratch"]
    assert p["metadata"]["annotations"] == {"cost-center": "42"}
    assert c["envFrom"] == [{"secretRef": {"name": "creds"}}, {"configMapRef": {"name": "settings"}}]
    assert spec["automountServiceAccountToken"] is False  # even with a service account


def test_the_attempt_and_scratch_volume_names_are_reserved():
    for name in ("kubetune-attempt", "kubetune-scratch"):
        with pytest.raises(ValueError, match=name):
            pod(experiment(template={"volumes": [{"name": name, "emptyDir": {}}]}))


def test_the_read_only_root_gets_a_writable_tmp_that_is_also_home():
    p = pod()
    env = {e["name"]: e.get("value") for e in container(p)["env"]}
    assert {"name": "kubetune-scratch", "mountPath": "/tmp"} in container(p)["volumeMounts"]
    assert {"name": "kubetune-scratch", "emptyDir": {}} in p["spec"]["volumes"] and env["HOME"] == "/tmp"
    own = pod(
        experiment(
            template={
                "env": [{"name": "HOME", "value": "/work"}],
                "volumes": [{"name": "fast", "emptyDir": {"medium": "Memory"}}],
                "volumeMounts": [{"name": "fast", "mountPath": "/tmp/"}],
            }
        )
    )
    assert [e["value"] for e in container(own)["env"] if e["name"] == "HOME"] == ["/work"]  # theirs, not ours too
    assert "kubetune-scratch" not in [v["name"] for v in own["spec"]["volumes"]]  # their own /tmp instead


def test_a_config_larger_than_an_environment_string_travels_in_the_attempt_secret():
    exp = experiment()
    big = {"table": "x" * (200 * 1024)}  # over Linux's 128 KiB per environment string (MAX_ARG_STRLEN)
    tr = trial(exp)
    tr["spec"]["config"] = big
    p = build_pod(exp, tr, 0, Settings())
    assert max(len(e.get("value") or "") for e in container(p)["env"]) < 4096
    secret = build_token_secret(p, tr, "t")
    assert read_trial_env(env_of(p), secret["stringData"]["config.json"]).config == big


def test_the_queue_name_is_kueues_label_and_scheduling_gates_reach_the_pod():
    gates = [{"name": "example.com/admission"}]
    p = pod(experiment(queueName="team-a", template={"schedulingGates": gates, "labels": {"team": "a"}}))
    assert p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and p["metadata"]["labels"]["team"] == "a"
    assert p["spec"]["schedulingGates"] == gates
    assert "kueue.x-k8s.io/queue-name" not in pod()["metadata"]["labels"] and "schedulingGates" not in pod()["spec"]
    schema = root_schema("Experiment")["properties"]["spec"]
    assert validate(experiment(queueName="team-a", template={"schedulingGates": gates})["spec"], schema) == []
    assert validate(experiment(queueName="no spaces")["spec"], schema)  # not a label value


def test_template_env_comes_after_ours():
    p = pod(experiment(template={"env": copy.deepcopy(TEMPLATE["env"])}))
    names = [e["name"] for e in container(p)["env"]]
    assert names[-2:] == ["OMP_NUM_THREADS", "WANDB_KEY"]
    assert all(n.startswith("KUBETUNE_") for n in names[:-3]) and names[-3] == "HOME"
    assert container(p)["env"][-1] == TEMPLATE["env"][1]


def test_template_env_may_not_set_kubetune_variables():
    exp = experiment(template={"env": [{"name": "KUBETUNE_TOKEN", "value": "forged"}]})
    with pytest.raises(ValueError, match="KUBETUNE_TOKEN"):
        pod(exp)


def test_template_labels_cannot_override_ours():
    labels = pod(experiment(template={"labels": dict(TEMPLATE["labels"])}))["metadata"]["labels"]
    assert labels["team"] == "vision"
    assert labels[LABEL_TRIAL] == "mnist-00003" and labels[LABEL_MANAGED_BY] == "kubetune"


def test_empty_template_adds_nothing():
    p = pod()
    assert set(p["spec"]) == {
        "restartPolicy",
        "automountServiceAccountToken",
        "terminationGracePeriodSeconds",
        "securityContext",
        "containers",
        "volumes",
    }
    assert "annotations" not in p["metadata"]
    assert [v["name"] for v in p["spec"]["volumes"]] == ["kubetune-attempt", "kubetune-scratch"]  # ours only
    assert [m["name"] for m in container(p)["volumeMounts"]] == ["kubetune-attempt", "kubetune-scratch"]


def test_build_pod_does_not_change_or_alias_its_inputs():
    exp = experiment(template=copy.deepcopy(TEMPLATE))
    tr = trial(exp)
    before = copy.deepcopy((exp, tr))
    p = build_pod(exp, tr, 0, Settings())
    assert (exp, tr) == before
    p["spec"]["tolerations"].append({"key": "x"})
    container(p)["env"][-1]["name"] = "CHANGED"
    assert (exp, tr) == before


def test_pod_names_and_labels_stay_valid_for_long_experiment_names():
    exp = experiment()
    exp["metadata"]["name"] = "a-very-long-experiment-name." + "x" * 200
    tr = trial(exp, index=12)
    p = build_pod(exp, tr, 5, Settings())
    assert DNS_LABEL.match(p["metadata"]["name"]) and p["metadata"]["name"].endswith("-00012-5")
    for value in p["metadata"]["labels"].values():
        assert len(value) <= 63 and LABEL_VALUE.match(value)
    assert read_trial_env(env_of(p), "{}").experiment == exp["metadata"]["name"]
