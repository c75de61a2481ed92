"""docs/operations.md keeps up with the code: every Helm value (values.yaml and values.schema.json), every
Prometheus metric of ``kubetune_operator.metrics`` and every environment variable ``Settings.from_env`` reads
is named there, in backticks. The lists are parsed from the sources, not written down here."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml
from conftest_crds import root_schema, validate

from kubetune_operator.controller import ExperimentController
from kubetune_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
CHART = ROOT / "helm" / "kubetune"
OPERATOR = ROOT / "operator" / "kubetune_operator"


def _named(text: str) -> set[str]:
    """Every ``code`` span of the Markdown ``text``."""
    return set(re.findall(r"`([^`\n]+)`", text))


def _flatten(values: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of ``values`` (an empty map is a leaf)."""
    keys = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys += _flatten(value, f"{path}.")
        else:
            keys.append(path)
    return keys


def _schema_keys(schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the values a JSON schema of the chart names (objects with ``properties`` recurse)."""
    keys = []
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        if sub.get("properties"):
            keys += _schema_keys(sub, f"{path}.")
        else:
            keys.append(path)
    return keys


def _metric_names() -> list[str]:
    """The name (first argument) of every metric metrics.py constructs (``Counter(...)``, ``Gauge(...)``...)."""
    tree = ast.parse((OPERATOR / "metrics.py").read_text())
    names = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("Counter", "Gauge", "Histogram", "Summary", "Info", "Enum")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(node.args[0].value)
    return names


def _env_vars() -> list[str]:
    """``KUBETUNE_OPERATOR_<GROUP>_<FIELD>`` of every field of every settings group, as settings.py declares
    them: ``Settings``' fields name the groups and their dataclasses, each annotated field of those is read."""
    tree = ast.parse((OPERATOR / "settings.py").read_text())
    prefix = next(
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ENV_PREFIX" for t in node.targets)
    )
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def fields(cls: ast.ClassDef) -> list[tuple[str, str]]:
        return [
            (node.target.id, ast.unparse(node.annotation))
            for node in cls.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        ]

    names = []
    for group, group_cls in fields(classes["Settings"]):
        for field, _ in fields(classes[group_cls]):
            names.append(f"{prefix}{group}_{field}".upper())
    return names


@pytest.fixture(scope="module")
def named() -> set[str]:
    return _named(DOC.read_text())


def test_the_sources_parse_to_something():
    # a parser that found nothing would make the tests below pass vacuously
    assert "trials.podSecurityLevel" in _flatten(yaml.safe_load((CHART / "values.yaml").read_text()))
    assert "kubetune_trials" in _metric_names()
    assert "KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT" in _env_vars()


def test_every_helm_value_is_documented(named):
    missing = [k for k in _flatten(yaml.safe_load((CHART / "values.yaml").read_text())) if k not in named]
    assert not missing, f"docs/operations.md does not name these values of values.yaml: {missing}"


def test_every_value_of_the_schema_is_documented(named):
    # a free-form object of the schema (resources, securityContext) counts as named through its keys
    keys = _schema_keys(json.loads((CHART / "values.schema.json").read_text()))
    missing = [k for k in keys if k not in named and not any(n.startswith(f"{k}.") for n in named)]
    assert not missing, f"docs/operations.md does not name these values of values.schema.json: {missing}"


def test_every_metric_is_documented(named):
    missing = [m for m in _metric_names() if m not in named]
    assert not missing, f"docs/operations.md does not name these metrics: {missing}"


def test_every_operator_setting_is_documented(named):
    missing = [v for v in _env_vars() if v not in named]
    assert not missing, f"docs/operations.md does not name these environment variables: {missing}"


def test_the_docs_link_to_it():
    assert "docs/operations.md" in (ROOT / "README.md").read_text()
    assert "operations.md" in (ROOT / "docs" / "architecture.md").read_text()


def test_the_api_reference_is_generated_from_the_crds_as_they_are():
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "api_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "api-reference.md").read_text() == module.render(), "stale: run `make docs`"


def _api_examples() -> list[dict]:
    text = (ROOT / "docs" / "api.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def test_the_api_page_has_examples_of_every_scheduler_and_search_algorithm():
    specs = [example["spec"] for example in _api_examples()]
    assert {s.get("scheduler", {}).get("name", "fifo") for s in specs} == {
        "fifo",
        "asha",
        "pbt",
        "pb2",
        "hyperband",
        "katib-medianstop",
    }
    assert {s.get("searchAlgorithm", {}).get("name", "basic") for s in specs} == {"basic", "optuna", "katib-hyperband"}


@pytest.mark.parametrize("example", _api_examples(), ids=lambda example: example["metadata"]["name"])
def test_every_api_example_is_accepted_by_the_crd_schema_and_the_operator(example):
    assert validate(example["spec"], root_schema("Experiment")["properties"]["spec"], ".spec") == []
    experiment = {**example, "metadata": {**example["metadata"], "namespace": "default", "uid": "u-1"}}
    ExperimentController(experiment, Settings(), b"k" * 32)  # raises InvalidSpec with the reason if not
