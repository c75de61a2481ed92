"""Operator settings: defaults, parsing from KUBETUNE_OPERATOR_* variables, range checks, documentation."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from kubetune.env import MAX_BATCH_BYTES
from kubetune_operator import settings as settings_module
from kubetune_operator.settings import Settings


def test_defaults_without_environment():
    s = Settings.from_env({})
    assert s == Settings()
    assert s.watch.namespaces == ()
    assert (s.collector.bind_host, s.collector.bind_port) == ("0.0.0.0", 8080)
    assert s.collector.max_body_bytes == MAX_BATCH_BYTES
    assert s.collector.base_url() == "http://127.0.0.1:8080"
    assert s.trials.run_as_user == 1000 and s.storage.default_uri is None
    assert s.metrics.auth == "kubernetes"  # /metrics is closed unless asked otherwise


def test_every_field_is_read_from_its_variable():
    env = {
        "KUBETUNE_OPERATOR_WATCH_NAMESPACES": "team-a, team-b,,",
        "KUBETUNE_OPERATOR_COLLECTOR_BIND_HOST": "127.0.0.1",
        "KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT": "9000",
        "KUBETUNE_OPERATOR_COLLECTOR_URL": "http://kubetune-operator.kubetune-system.svc:9000",
        "KUBETUNE_OPERATOR_COLLECTOR_MAX_BODY_BYTES": "65536",
        "KUBETUNE_OPERATOR_COLLECTOR_MAX_RESULTS_PER_BATCH": "50",
        "KUBETUNE_OPERATOR_COLLECTOR_KEY_SECRET_NAME": "key",
        "KUBETUNE_OPERATOR_COLLECTOR_KEY_SECRET_NAMESPACE": "ops",
        "KUBETUNE_OPERATOR_METRICS_AUTH": "none",
        "KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S": "0.5",
        "KUBETUNE_OPERATOR_TRIALS_DEFAULT_IMAGE": "reg/runtime:1",
        "KUBETUNE_OPERATOR_TRIALS_DEFAULT_MAX_CONCURRENT_TRIALS": "3",
        "KUBETUNE_OPERATOR_TRIALS_TERMINATION_GRACE_PERIOD_S": "120",
        "KUBETUNE_OPERATOR_TRIALS_RUN_AS_USER": "2000",
        "KUBETUNE_OPERATOR_TRIALS_POD_SECURITY_LEVEL": "baseline",
        "KUBETUNE_OPERATOR_TRIALS_GANG_SCHEDULING": "podgroup",
        "KUBETUNE_OPERATOR_STORAGE_DEFAULT_URI": "s3://tune/",
        "KUBETUNE_OPERATOR_STORAGE_DEFAULT_ENDPOINT": "http://127.0.0.1:5000",
        "KUBETUNE_OPERATOR_STORAGE_DEFAULT_REGION": "us-east-1",
        "KUBETUNE_OPERATOR_KATIB_ENABLED": "true",
        "UNRELATED": "ignored",
    }
    s = Settings.from_env(env)
    assert s.watch.namespaces == ("team-a", "team-b")
    assert (s.collector.bind_host, s.collector.bind_port, s.collector.max_body_bytes) == ("127.0.0.1", 9000, 65536)
    assert s.collector.base_url() == "http://kubetune-operator.kubetune-system.svc:9000"
    assert (s.collector.max_results_per_batch, s.collector.key_secret_name) == (50, "key")
    assert s.collector.key_secret_namespace == "ops"
    assert s.status.write_interval_s == 0.5 and s.metrics.auth == "none"
    assert (s.trials.default_image, s.trials.default_max_concurrent_trials) == ("reg/runtime:1", 3)
    assert (s.trials.termination_grace_period_s, s.trials.run_as_user) == (120, 2000)
    assert s.trials.gang_scheduling == "podgroup"
    assert s.trials.pod_security_level == "baseline"
    assert (s.storage.default_uri, s.storage.default_endpoint, s.storage.default_region) == (
        "s3://tune/",
        "http://127.0.0.1:5000",
        "us-east-1",
    )
    assert s.katib.enabled is True and Settings.from_env({}).katib.enabled is False
    # the test above names every field: adding one without a test fails here
    fields = [(g.name, f.name) for g in dataclasses.fields(Settings) for f in dataclasses.fields(getattr(s, g.name))]
    assert {f"KUBETUNE_OPERATOR_{g}_{f}".upper() for g, f in fields} == {k for k in env if k != "UNRELATED"}


def test_empty_optional_variable_means_none():
    s = Settings.from_env({"KUBETUNE_OPERATOR_COLLECTOR_URL": "", "KUBETUNE_OPERATOR_STORAGE_DEFAULT_URI": " "})
    assert s.collector.url is None and s.storage.default_uri is None


@pytest.mark.parametrize(
    "var, value",
    [
        ("KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT", "http"),
        ("KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT", "70000"),
        ("KUBETUNE_OPERATOR_COLLECTOR_MAX_BODY_BYTES", "0"),
        ("KUBETUNE_OPERATOR_COLLECTOR_MAX_RESULTS_PER_BATCH", "-1"),
        ("KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S", "soon"),
        ("KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S", "-1"),
        ("KUBETUNE_OPERATOR_TRIALS_DEFAULT_MAX_CONCURRENT_TRIALS", "0"),
        ("KUBETUNE_OPERATOR_TRIALS_TERMINATION_GRACE_PERIOD_S", "-5"),
        ("KUBETUNE_OPERATOR_TRIALS_RUN_AS_USER", "0"),
        ("KUBETUNE_OPERATOR_METRICS_AUTH", "open"),
    ],
)
def test_bad_values_are_refused(var, value):
    with pytest.raises(ValueError):
        Settings.from_env({var: value})


def test_parse_errors_name_the_variable():
    with pytest.raises(ValueError, match="KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT"):
        Settings.from_env({"KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT": "x"})


def test_settings_are_frozen():
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.collector.bind_port = 1  # type: ignore[misc]


def test_every_field_has_a_docstring():
    tree = ast.parse(inspect.getsource(settings_module))
    groups = {type(getattr(Settings(), g.name)).__name__ for g in dataclasses.fields(Settings)}
    checked = 0
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in groups):
        assert ast.get_docstring(cls), cls.name
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                following = body[i + 1] if i + 1 < len(body) else None
                assert (
                    isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)
                    and following.value.value.strip()
                ), f"{cls.name}.{node.target.id} has no docstring"
                checked += 1
    assert checked == sum(len(dataclasses.fields(getattr(Settings(), g.name))) for g in dataclasses.fields(Settings))
