"""The CRDs in ``crds/``: structure, documentation, defaults, CEL rules, printer columns, and the contracts
they share with the Python code (phases, checkpoint policy, search domains, builder defaults).

A kube-apiserver is the final judge of a CRD; these tests catch what can be
seen without one and keep the YAML and the code from drifting apart.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest_crds import load_crd, node_at, root_schema, validate, version_of, walk

from kubetune.env import CheckpointPolicy
from kubetune.resultkeys import MAX_OBJECTIVES
from kubetune.search.sample import DOMAIN_NAMES
from kubetune_operator import builders, labels, status

KINDS = ("Experiment", "Trial")


def _spec(kind: str) -> dict:
    return root_schema(kind)["properties"]["spec"]


def _status(kind: str) -> dict:
    return root_schema(kind)["properties"]["status"]


def _rules(schema: dict) -> list[tuple[str, dict]]:
    return [(path, rule) for path, node in walk(schema) for rule in node.get("x-kubernetes-validations", ())]


@pytest.mark.parametrize("kind, plural, short", [("Experiment", "experiments", ["exp"]), ("Trial", "trials", ["tr"])])
def test_names_group_and_version(kind, plural, short):
    crd = load_crd(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{labels.GROUP}"
    assert crd["spec"]["group"] == labels.GROUP and crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (kind, plural, kind.lower())
    assert names["shortNames"] == short and names["categories"] == ["kubetune"]
    version = version_of(crd)
    assert version["served"] and version["storage"] and len(crd["spec"]["versions"]) == 1
    assert version["subresources"] == {"status": {}}


def test_plural_and_kind_constants_match_the_crds():
    assert load_crd("Experiment")["spec"]["names"]["plural"] == labels.EXPERIMENT_PLURAL
    assert load_crd("Trial")["spec"]["names"]["plural"] == labels.TRIAL_PLURAL
    assert (labels.EXPERIMENT_KIND, labels.TRIAL_KIND) == ("Experiment", "Trial")


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_has_a_description(kind):
    missing = [
        path or "<root>"
        for path, node in walk(root_schema(kind))
        if path != ".metadata" and not (node.get("description") or "").strip()
    ]
    assert not missing


@pytest.mark.parametrize("kind", KINDS)
def test_metadata_schema_only_says_object(kind):
    # the API server forbids anything but name/generateName rules under metadata
    assert root_schema(kind)["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind):
    # Kubernetes' structural schema rule: every node has a type, but for x-kubernetes-int-or-string and for
    # x-kubernetes-preserve-unknown-fields (any JSON value: spec.stop's thresholds, a number or a bool)
    for path, node in walk(root_schema(kind)):
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        elif node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            assert set(node) <= {"x-kubernetes-preserve-unknown-fields", "description"}, path
        else:
            assert node.get("type") in ("object", "array", "string", "integer", "number", "boolean"), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type", "object") == "object", path
        assert not ("properties" in node and "additionalProperties" in node), path
        for key in node.get("required", ()):
            assert key in node.get("properties", {}), f"{path}: required {key} is not a property"


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_satisfy_their_own_schema(kind):
    defaults = [(path, node) for path, node in walk(root_schema(kind)) if "default" in node]
    assert defaults or kind == "Trial"
    for path, node in defaults:
        assert validate(node["default"], node, path) == []


def test_experiment_defaults():
    spec = _spec("Experiment")["properties"]
    assert spec["numSamples"]["default"] == 1
    assert spec["suspend"]["default"] is False
    assert spec["searchAlgorithm"]["properties"]["name"]["default"] == "basic"
    assert spec["scheduler"]["properties"]["name"]["default"] == "fifo"
    resources = spec["resourcesPerTrial"]["properties"]
    assert str(resources["cpu"]["default"]) == builders.DEFAULT_CPU
    assert resources["gpu"]["default"] == 0
    assert resources["gpuResourceName"]["default"] == builders.DEFAULT_GPU_RESOURCE
    # objects default to {} so their fields' defaults show up in the stored spec
    for name in ("checkpoint", "failure", "resourcesPerTrial"):
        assert spec[name]["default"] == {}
    assert spec["failure"]["properties"]["maxFailures"]["default"] == 0


def test_checkpoint_schema_is_the_runtime_checkpoint_policy_and_a_container_trials_folder():
    schema = dict(_spec("Experiment")["properties"]["checkpoint"]["properties"])
    assert "default" not in schema.pop("path")  # a container trial's folder: unset without checkpoints
    fields = {f.name: f.default for f in dataclasses.fields(CheckpointPolicy)}
    assert {name: node["default"] for name, node in schema.items()} == fields


def test_enums():
    spec = _spec("Experiment")["properties"]
    assert spec["mode"]["enum"] == ["max", "min"]
    assert spec["objectives"]["items"]["properties"]["mode"]["enum"] == ["max", "min"]
    assert spec["searchAlgorithm"]["properties"]["name"]["enum"] == [
        "basic",
        "random",
        "optuna",
        "bohb",
        "katib-hyperband",
        "driver",
    ]
    assert spec["scheduler"]["properties"]["name"]["enum"] == [
        "fifo",
        "asha",
        "median_stopping_rule",
        "katib-medianstop",
        "hyperband",
        "hyperband_bohb",
        "pbt",
        "pb2",
        "pbt_replay",
    ]
    assert tuple(_status("Experiment")["properties"]["phase"]["enum"]) == status.EXPERIMENT_PHASES
    assert tuple(_status("Trial")["properties"]["phase"]["enum"]) == status.TRIAL_PHASES


def test_config_documents_every_search_domain():
    description = _spec("Experiment")["properties"]["config"]["description"]
    assert not [name for name in DOMAIN_NAMES if not re.search(rf"\b{name}\b", description)]


def test_kubernetes_typed_fields_are_preserved_not_pruned():
    template = _spec("Experiment")["properties"]["template"]["properties"]
    assert set(template) == {
        "labels",
        "annotations",
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "runtimeClassName",
        "serviceAccountName",
        "imagePullSecrets",
        "schedulingGates",
        "securityContext",
        "env",
        "envFrom",
        "volumes",
        "volumeMounts",
        "containers",
    }
    for name in ("affinity", "securityContext"):
        assert template[name]["x-kubernetes-preserve-unknown-fields"] is True
    for name in ("tolerations", "env", "envFrom", "volumes", "volumeMounts", "containers"):
        assert template[name]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    for path in (".spec.config", ".spec.scheduler.params", ".spec.searchAlgorithm.params", ".status.bestTrial.config"):
        assert node_at(root_schema("Experiment"), path)["x-kubernetes-preserve-unknown-fields"] is True
    for path in (".spec.config", ".status.lastResult"):
        assert node_at(root_schema("Trial"), path)["x-kubernetes-preserve-unknown-fields"] is True


def test_conditions_have_the_metav1_condition_shape():
    conditions = _status("Experiment")["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    for type_ in status.CONDITION_TYPES:
        assert type_ in conditions["description"]
    assert conditions["maxItems"] >= len(status.CONDITION_TYPES)


def test_experiment_status_has_counts_and_no_per_trial_lists():
    props = _status("Experiment")["properties"]
    assert set(props["trials"]["properties"]) == {"total", "pending", "running", "paused", "succeeded", "failed"}
    assert set(props["bestTrial"]["properties"]) == {"name", "config", "metricValue", "iteration", "checkpoint"}
    arrays = [path for path, node in walk(_status("Experiment")) if node.get("type") == "array"]
    assert sorted(arrays) == sorted([".conditions", ".paretoFront.trials", ".paretoFront.trials[].values"])
    front = props["paretoFront"]["properties"]
    assert set(front) == {"count", "trials"}
    assert front["trials"]["maxItems"] == status.MAX_PARETO_TRIALS
    assert set(front["trials"]["items"]["properties"]) == {"trial", "values"}
    assert front["trials"]["items"]["properties"]["values"]["maxItems"] == MAX_OBJECTIVES


def test_objectives_are_a_typed_list_of_distinct_metrics_each_with_its_mode():
    objectives = _spec("Experiment")["properties"]["objectives"]
    assert (objectives["minItems"], objectives["maxItems"]) == (2, MAX_OBJECTIVES)
    assert objectives["x-kubernetes-list-type"] == "map" and objectives["x-kubernetes-list-map-keys"] == ["metric"]
    assert objectives["items"]["required"] == ["metric", "mode"]


def test_the_trial_reason_description_names_every_reason_the_operator_writes():
    """Every Trial ``status.reason`` the lifecycle table, the controller and the waiting causes can write (the
    pod's own reasons aside: they are Kubernetes' open set), and the Experiment's ending reasons a stopped
    trial takes, are named in ``kubectl explain trial.status.reason``."""
    import inspect

    from kubetune_operator import lifecycle, pbt_perturbation, podview, trial_lifecycle

    described = set(re.findall(r"[A-Z][A-Za-z]+", _status("Trial")["properties"]["reason"]["description"]))
    written = {t.reason for t in lifecycle.TRANSITIONS.values() if t.reason != lifecycle.STOP_REASON}
    for module in (trial_lifecycle, pbt_perturbation):  # what ExperimentController wrote, in its modules now
        written |= set(re.findall(r'reason="([A-Za-z]+)"', inspect.getsource(module)))
    written |= {"GoalReached", "TimeBudgetExhausted", "MaxFailedTrialsExceeded", "StopperStoppedAll"}
    written |= {"Unschedulable", "ErrImagePull"}  # two of podview.WAITING_CAUSES, named as examples
    assert set(podview.WAITING_CAUSES) >= {"Unschedulable", "ErrImagePull"}
    assert written - described == set()


def test_trial_status_bounds_match_the_code():
    props = _status("Trial")["properties"]
    assert props["message"]["maxLength"] == status.MAX_TRIAL_MESSAGE_BYTES
    assert set(props["checkpoint"]["properties"]) == {"uri", "iteration"}
    assert props["metricRange"]["maxProperties"] == status.MAX_RANGE_KEYS
    assert _spec("Trial")["properties"]["tag"]["maxLength"] == builders.MAX_TAG_LENGTH


@pytest.mark.parametrize(
    "kind, expected",
    [
        (
            "Experiment",
            {
                "Phase": ".status.phase",
                "Running": ".status.trials.running",
                "Succeeded": ".status.trials.succeeded",
                "Failed": ".status.trials.failed",
                "Best": ".status.bestTrial.metricValue",
                "Age": ".metadata.creationTimestamp",
            },
        ),
        (
            "Trial",
            {
                "Phase": ".status.phase",
                "Iteration": ".status.iteration",
                "Metric": ".status.metricValue",
                "Age": ".metadata.creationTimestamp",
            },
        ),
    ],
)
def test_printer_columns(kind, expected):
    columns = version_of(load_crd(kind))["additionalPrinterColumns"]
    default = {c["name"]: c["jsonPath"] for c in columns if not c.get("priority")}
    assert default == expected
    assert columns[-1]["name"] == "Age" and columns[-1]["type"] == "date"
    schema = root_schema(kind)
    for column in columns:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = node_at(schema, column["jsonPath"])
        assert node is not None, column
        assert column["type"] == node["type"], column


def _rule_with(kind: str, text: str) -> tuple[str, dict]:
    found = [(path, rule) for path, rule in _rules(root_schema(kind)) if text in rule["message"]]
    assert len(found) == 1, (text, found)
    return found[0]


@pytest.mark.parametrize(
    "message, path, fields",
    [
        (
            "exactly one of entrypoint, source, pickleURI or command",
            ".spec.trainable",
            ("entrypoint", "source", "pickleURI", "command"),
        ),
        ("args is allowed only with command", ".spec.trainable", ("args", "command")),
        ("workerEntrypoint is not allowed with command", ".spec.trainable", ("command", "workerEntrypoint")),
        ("trainable.command needs metric and mode", ".spec", ("trainable.command", "metric", "objectives")),
        ("metricsCollector is only for a container trial", ".spec", ("metricsCollector", "trainable.command")),
        ("name is required with source", ".spec.trainable", ("source", "name")),
        ("trainable is immutable", ".spec.trainable", ("oldSelf",)),
        ("metric and mode must be set together", ".spec", ("metric", "mode")),
        ("goal needs metric", ".spec", ("goal", "metric")),
        ("bestTrialScope all needs metric", ".spec", ("bestTrialScope", "metric")),
        ("bestTrialScope cannot change", ".spec", ("oldSelf.bestTrialScope",)),
        ("scheduler other than fifo needs metric", ".spec", ("scheduler", "fifo", "metric")),
        ("optuna needs metric", ".spec", ("searchAlgorithm", "optuna", "metric", "objectives")),
        ("objectives takes the place of metric", ".spec", ("objectives", "metric")),
        (
            "metric, mode and objectives cannot change",
            ".spec",
            ("oldSelf.metric", "oldSelf.mode", "oldSelf.objectives"),
        ),
        ("scheduler.name cannot change", ".spec", ("oldSelf.scheduler", "oldSelf.searchAlgorithm")),
        ("seed cannot change", ".spec.searchAlgorithm", ("oldSelf.seed",)),
        ("timeBudget must be longer than 0s", ".spec.timeBudget", ("duration(self)",)),
        ("cannot be set in template.env", ".spec.template.env", ("KUBETUNE_",)),
    ],
)
def test_experiment_cel_rules(message, path, fields):
    where, rule = _rule_with("Experiment", message)
    assert where == path
    for field in fields:
        assert field in rule["rule"], (field, rule)


def test_trial_identity_is_immutable():
    where, rule = _rule_with("Trial", "experiment and index are immutable")
    assert where == ".spec" and "oldSelf.experiment" in rule["rule"] and "oldSelf.index" in rule["rule"]


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_name_existing_fields_and_have_messages(kind):
    schema = root_schema(kind)
    for path, rule in _rules(schema):
        assert rule.get("message"), rule
        node = node_at(schema, path) if path else schema
        for chain in re.findall(r"\b(?:self|oldSelf)((?:\.[A-Za-z_]\w*)+)", rule["rule"]):
            names = chain.strip(".").split(".")
            cursor = node
            for name in names:
                if name in ("size", "all", "startsWith", "filter"):
                    break
                cursor = (cursor.get("properties") or {}).get(name)
                assert cursor is not None, f"{kind}{path}: rule names unknown field {chain}"


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_iterate_only_bounded_lists(kind):
    # the API server refuses rules whose estimated cost is unbounded
    for path, rule in _rules(root_schema(kind)):
        if ".all(" in rule["rule"]:
            node = node_at(root_schema(kind), path)
            assert node["type"] == "array" and node["maxItems"] <= 256, path
            assert node["items"]["properties"]["name"]["maxLength"] <= 256, path


@pytest.mark.parametrize(
    "value, ok",
    [
        ("1h30m", True),
        ("45m", True),
        ("90s", True),
        ("1.5h", True),
        ("10", False),
        ("1d", False),
        ("-1h", False),
    ],
)
def test_time_budget_pattern(value, ok):
    node = node_at(root_schema("Experiment"), ".spec.timeBudget")
    assert (validate(value, node) == []) is ok


@pytest.mark.parametrize(
    "field, value, ok",
    [
        ("cpu", "500m", True),
        ("cpu", 2, True),
        ("cpu", "1.5", True),
        ("cpu", "lots", False),
        ("cpu", -1, False),
        ("memory", "4Gi", True),
        ("memory", "512M", True),
        ("memory", 1 << 30, True),
        ("memory", "4GB", False),
        ("gpuResourceName", "nvidia.com/gpu", True),
        ("gpuResourceName", "amd.com/gpu", True),
        ("gpuResourceName", "gpu", False),
    ],
)
def test_resource_patterns(field, value, ok):
    node = node_at(root_schema("Experiment"), f".spec.resourcesPerTrial.{field}")
    assert (validate(value, node) == []) is ok


@pytest.mark.parametrize(
    "uri, ok",
    [("s3://bucket/prefix", True), ("file:///data/tune", True), ("gs://bucket", False), ("bucket/prefix", False)],
)
def test_storage_uri_pattern(uri, ok):
    assert (validate(uri, node_at(root_schema("Experiment"), ".spec.storage.uri")) == []) is ok


def test_a_full_example_experiment_fits_the_schema():
    spec = {
        "trainable": {"entrypoint": "mytrain.models:MnistTrainable"},
        "image": "registry/mnist:1",
        "config": {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"grid_search": [1, 2]}, "batch": 64},
        "numSamples": 4,
        "metric": "mean_accuracy",
        "mode": "max",
        "stop": {"training_iteration": 20},
        "goal": 0.98,
        "timeBudget": "1h30m",
        "maxConcurrentTrials": 4,
        "searchAlgorithm": {"name": "basic", "seed": 7},
        "scheduler": {"name": "asha", "params": {"max_t": 20}},
        "checkpoint": {"frequency": 5, "atEnd": True, "keep": 2, "scoreAttribute": "mean_accuracy"},
        "failure": {"maxFailures": 2, "maxFailedTrials": 3},
        "resourcesPerTrial": {"cpu": "500m", "memory": "2Gi", "gpu": 1},
        "template": {
            "labels": {"team": "ml"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        },
        "storage": {"uri": "s3://tune/exp", "endpoint": "http://minio:9000", "credentialsSecret": "s3-creds"},
        "suspend": False,
    }
    assert validate(spec, _spec("Experiment"), ".spec") == []
    spec["template"]["env"][0].pop("name")
    spec["numSamples"] = 0
    assert validate(spec, _spec("Experiment"), ".spec") == [
        ".spec.numSamples: 0 < minimum 1",
        ".spec.template.env[0].name: required",
    ]


@pytest.mark.parametrize(
    "reason, ok",
    [
        ("Completed", True),
        ("OOMKilled", True),
        ("SchedulerPaused", True),
        ("not camel", False),
        ("", False),
        ("Error: boom", False),
    ],
)
def test_trial_reason_takes_kubernetes_reasons(reason, ok):
    # reasons come from us and from pod statuses (kubelet's OOMKilled, Evicted, ...): metav1's reason syntax
    assert (validate(reason, node_at(root_schema("Trial"), ".status.reason")) == []) is ok
