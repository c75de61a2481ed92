"""Helpers for tests that read the CRDs in ``crds/``: loading, walking and a small schema validator.

Imported explicitly by ``test_crds.py``, ``test_builders.py`` and ``test_status.py``
to check that what the operator builds fits the API it serves. The validator
knows only the OpenAPI keywords the CRDs use and refuses any other, so a new
keyword cannot be skipped silently; the real check is a kube-apiserver.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
CRD_FILES = {"Experiment": "experiments.kubetune.io.yaml", "Trial": "trials.kubetune.io.yaml"}

_ANNOTATIONS = {
    "description",
    "default",
    "format",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}
_CHECKED = {
    "type",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
}
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def load_crd(kind: str) -> dict:
    """Return the parsed CRD of ``kind`` (``"Experiment"`` or ``"Trial"``); the file must hold one document."""
    (doc,) = list(yaml.safe_load_all((CRD_DIR / CRD_FILES[kind]).read_text()))
    return doc


def version_of(crd: dict) -> dict:
    """The single ``v1alpha1`` version entry of ``crd``."""
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version


def root_schema(kind: str) -> dict:
    """The ``openAPIV3Schema`` of ``kind``."""
    return version_of(load_crd(kind))["schema"]["openAPIV3Schema"]


def walk(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Yield ``(path, node)`` for ``schema`` and every node under properties, items and additionalProperties."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")


def node_at(schema: dict, path: str) -> dict | None:
    """The schema node at a dotted ``path`` such as ``.status.trials.running``, or None."""
    node = schema
    for part in path.strip(".").split("."):
        node = (node.get("properties") or {}).get(part)
        if node is None:
            return None
    return node


def validate(value: Any, schema: dict, path: str = "") -> list[str]:
    """Return the violations of ``value`` against ``schema`` (empty when valid).

    Raises:
        AssertionError: the schema uses a keyword this validator does not know.
    """
    unknown = set(schema) - _ANNOTATIONS - _CHECKED
    assert not unknown, f"{path}: validator does not know {sorted(unknown)}"
    errors: list[str] = []
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return [f"{path}: {value!r} is not an int or a string"]
    elif "type" in schema:
        expected = _TYPES[schema["type"]]
        if isinstance(value, bool) and schema["type"] != "boolean" or not isinstance(value, expected):
            return [f"{path}: {value!r} is not of type {schema['type']}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: length {len(value)} outside the schema's bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{path}: {len(value)} items > maxItems")
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: {len(value)} items < minItems")
        for i, item in enumerate(value):
            errors += validate(item, schema.get("items") or {}, f"{path}[{i}]")
    if isinstance(value, dict):
        if len(value) > schema.get("maxProperties", len(value)):
            errors.append(f"{path}: {len(value)} properties > maxProperties")
        errors += [f"{path}.{key}: required" for key in schema.get("required", ()) if key not in value]
        props = schema.get("properties") or {}
        for key, item in value.items():
            if key in props:
                errors += validate(item, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(item, schema["additionalProperties"], f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{key}: unknown field (would be pruned)")
    return errors
