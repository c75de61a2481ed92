"""Size limits of an Experiment's free-form fields (issue 22.3, issue 21): measured as the SDK and the operator
measure them, refused by the SDK before anything is uploaded and by the operator before anything is created,
and stated with the same number in the CRD and the docs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kubetune.limits import MAX_FIELD_BYTES, SpecTooLarge, check_spec_sizes, json_size
from kubetune.sdk.tuner import create_experiment
from kubetune_operator.controller import ExperimentController
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec

ROOT = Path(__file__).resolve().parents[2]


def test_json_size_is_the_compact_utf8_json_and_stops_past_its_limit():
    value = {"a": [1, 2.5, "é", None, True], "b": {"c": "x" * 10}}
    assert json_size(value) == len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    huge = {"table": ["x" * 1000] * 10_000}  # 10 MB
    started = time.perf_counter()
    assert MAX_FIELD_BYTES < json_size(huge, MAX_FIELD_BYTES) < MAX_FIELD_BYTES + 2000
    assert time.perf_counter() - started < 0.1  # it stopped counting past the limit


@pytest.mark.parametrize("path", [("config",), ("searchAlgorithm", "params"), ("scheduler", "params")])
def test_each_bounded_field_is_refused_past_the_limit_by_name(path):
    def spec_with(size):
        value = {"blob": "x" * (size - len('{"blob":""}'))}
        spec = {"trainable": {"entrypoint": "m:T"}}
        *parents, last = path
        node = spec
        for key in parents:
            node = node.setdefault(key, {"name": "x"})
        node[last] = value
        return spec

    check_spec_sizes(spec_with(MAX_FIELD_BYTES))  # at the limit: accepted
    with pytest.raises(SpecTooLarge) as refused:
        check_spec_sizes(spec_with(MAX_FIELD_BYTES + 1))
    message = str(refused.value)
    assert message.startswith(f"spec.{'.'.join(path)} is over 192 KiB") and "tune.with_parameters" in message


class Unreachable:
    """A cluster the SDK must not reach: the size check comes first."""

    namespace = "ns"

    def create(self, body):
        raise AssertionError("created although its config is over the limit")


def test_the_sdk_refuses_a_10_mb_config_before_uploading_anything_in_well_under_100_ms(tmp_path):
    store = tmp_path / "store"
    config = {"lr": 0.1, "data": ["x" * 1000] * 10_000}

    def trainable(config):
        return {"score": 1}

    started = time.perf_counter()
    with pytest.raises(SpecTooLarge, match=r"spec.config is over 192 KiB.*tune.with_parameters"):
        create_experiment(Unreachable(), trainable, "big", {"uri": f"file://{store}"}, None, config)
    elapsed = time.perf_counter() - started
    assert not store.exists() or not any(store.rglob("*"))  # nothing uploaded
    assert elapsed < 0.5, elapsed  # the whole call; the check's own cost is measured in the report


def test_the_operator_refuses_an_oversized_config_before_creating_anything():
    exp = {
        "metadata": {"name": "big", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {
            "trainable": {"entrypoint": "m:T"},
            "config": {"table": "x" * (MAX_FIELD_BYTES + 1)},
            "storage": {"uri": "s3://b/p"},
        },
    }
    with pytest.raises(InvalidSpec, match="spec.config is over 192 KiB"):
        ExperimentController(exp, Settings(), b"k" * 32)


@pytest.mark.parametrize("doc", ["docs/operations.md", "crds/experiments.kubetune.io.yaml"])
def test_the_limit_is_stated_with_the_number_the_code_checks(doc):
    assert f"{MAX_FIELD_BYTES // 1024} KiB" in (ROOT / doc).read_text()
