"""The Helm chart's files, checked without a cluster or helm: its CRDs are the
ones in ``crds/``, values.yaml meets values.schema.json (and the schema refuses
what it should), every value is documented, and its versions and defaults agree
with the packages and the operator's settings. Rendering and installing are
proven in ``tests/integration/test_helm.py``."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import tomllib
import yaml

from kubetune_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kubetune"
# Objects whose keys are Kubernetes fields (documented by Kubernetes), not the chart's own settings.
KUBERNETES_SHAPED = {"livenessProbe", "readinessProbe"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_chart_crds_are_byte_identical_to_crds_folder():
    source = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    copied = sorted(p.name for p in (CHART / "crds").iterdir())
    assert source and copied == source
    for name in source:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"helm/kubetune/crds/{name} differs from crds/{name}: cp crds/*.yaml helm/kubetune/crds/"
        )


def test_chart_katib_crds_are_byte_identical_to_crds_kubeflow_org():
    """Katib's CRDs (katib.enabled) are templates from files/katib, copies of crds/kubeflow.org."""
    source = sorted(p.name for p in (ROOT / "crds" / "kubeflow.org").glob("*.yaml"))
    assert source and sorted(p.name for p in (CHART / "files" / "katib").iterdir()) == source
    for name in source:
        assert (CHART / "files" / "katib" / name).read_bytes() == (
            ROOT / "crds" / "kubeflow.org" / name
        ).read_bytes(), (
            f"helm/kubetune/files/katib/{name} differs: cp crds/kubeflow.org/*.yaml helm/kubetune/files/katib/"
        )


def test_values_yaml_meets_the_schema(schema, values):
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(values)
    assert set(values) == set(schema["properties"]) - {"global"}  # no value without a schema, and vice versa


@pytest.mark.parametrize(
    "path, bad",
    [
        (("image", "pullPolicy"), "Sometimes"),
        (("collector", "port"), 70000),
        (("collector", "url"), "tuner:8080"),
        (("storage", "uri"), "gs://bucket/prefix"),
        (("watchNamespaces",), ["Team_A"]),
        (("watchNamespaces",), "team-a"),
        (("trials", "runAsUser"), 0),
        (("trials", "maxConcurrentTrials"), 0),
        (("serviceAccount", "create"), "yes"),
        (("collector", "keySecret", "rotate"), True),
        (("imageTag",), "1.0"),
        (("dashboard", "enabled"), "yes"),
        (("dashboard", "port"), 70000),
        (("dashboard", "refreshSeconds"), 0),
        (("dashboard", "serviceType"), "NodePort"),  # the dashboard's Service is ClusterIP, not a value
        (("dashboard", "storageCredentialsSecret"), "S3_Creds"),
    ],
)
def test_schema_refuses_bad_values(schema, values, path, bad):
    changed = copy.deepcopy(values)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(changed)


def _described(node: dict, where: str) -> list[str]:
    missing = [] if node.get("description") else [where]
    for key, child in (node.get("properties") or {}).items():
        missing += _described(child, f"{where}.{key}")
    return missing


def test_every_value_in_the_schema_has_a_description(schema):
    assert _described(schema, "values") == []


def test_every_value_of_the_chart_has_a_comment_in_values_yaml(schema):
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    undocumented = []
    for i, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][\w-]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        stack = [(n, k) for n, k in stack if n < indent]
        parent = schema
        for _, k in stack:
            parent = (parent.get("properties") or {}).get(k, {})
        stack.append((indent, key))
        if (
            parent.get("additionalProperties") is not False
            or (stack[-2][1] if len(stack) > 1 else "") in KUBERNETES_SHAPED
        ):
            continue  # a key inside a free-form Kubernetes object (resources, securityContext, ...)
        if not lines[i - 1].lstrip().startswith("#"):
            undocumented.append(".".join(k for _, k in stack))
    assert undocumented == []


def test_chart_versions_and_defaults_agree_with_the_packages(values):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for pyproject in ("operator/pyproject.toml", "trainable-runtime/pyproject.toml"):
        version = tomllib.loads((ROOT / pyproject).read_text())["project"]["version"]
        assert chart["appVersion"] == version, pyproject
    defaults = Settings()
    trial_image = f"{values['trials']['image']['repository']}:{values['trials']['image']['tag'] or chart['appVersion']}"
    assert trial_image == defaults.trials.default_image
    assert values["trials"]["maxConcurrentTrials"] == defaults.trials.default_max_concurrent_trials
    assert values["trials"]["terminationGracePeriodSeconds"] == defaults.trials.termination_grace_period_s
    assert values["trials"]["runAsUser"] == defaults.trials.run_as_user
    assert values["collector"]["port"] == defaults.collector.bind_port
    assert values["statusWriteIntervalSeconds"] == defaults.status.write_interval_s


def test_every_operator_setting_the_chart_sets_exists():
    """Each KUBETUNE_OPERATOR_* variable of the Deployment names a field of the operator's settings."""
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"name: (KUBETUNE_OPERATOR_\w+)", template))
    environ = {name: "1" for name in names}
    environ.update(
        {
            "KUBETUNE_OPERATOR_WATCH_NAMESPACES": "a,b",
            "KUBETUNE_OPERATOR_COLLECTOR_URL": "http://x:1",
            "KUBETUNE_OPERATOR_COLLECTOR_BIND_HOST": "0.0.0.0",
            "KUBETUNE_OPERATOR_TRIALS_POD_SECURITY_LEVEL": "baseline",
            "KUBETUNE_OPERATOR_TRIALS_GANG_SCHEDULING": "none",
            "KUBETUNE_OPERATOR_METRICS_AUTH": "none",
            "KUBETUNE_OPERATOR_KATIB_ENABLED": "true",
        }
    )
    known = {
        f"KUBETUNE_OPERATOR_{group}_{field}".upper()
        for group, cls in Settings.__dataclass_fields__.items()
        for field in cls.default_factory.__dataclass_fields__
    }
    assert names and names <= known, sorted(names - known)
    Settings.from_env(environ)  # and every one parses
