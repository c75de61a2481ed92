"""Ray Tune's own function-API tests that run through ``tune.run``, ported onto the local cluster (issue 23.5).

Source: ``python/ray/tune/tests/test_function_api.py`` of Ray 2.x (the reference index's newest copy; see
``tests/unit/test_upstream_function_api.py``, which has the tests that need no cluster and lists the ones left
out). The assertions are Ray's, unchanged. The setup is kubetune's: ``import kubetune as tune``, each run
named and given the test's namespace and storage (:mod:`tests.integration.upstream_setup`), Ray's
``ray.train.report`` as ``tune.report``; ``testWithParametersTwoRuns1``'s restart of Ray between its runs has
no counterpart (there is no Ray session to restart).

Ported here: ``FunctionApiTest::testWithParametersTwoRuns1``, ``testWithParametersTwoRuns2``,
``testReturnAnonymous``, ``testReturnSpecific``, ``testYieldAnonymous``, ``testYieldSpecific``.
"""

from __future__ import annotations

import kubetune as tune
from kubetune.sdk.tuner import DEFAULT_METRIC
from tests.integration.upstream_setup import on_cluster  # noqa: F401 - fixture


def test_with_parameters_two_runs_1(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testWithParametersTwoRuns1``."""

    # Makes sure two runs in the same script but different ray sessions
    # pass (https://github.com/ray-project/ray/issues/16609)
    def train_fn(config, extra=4):
        tune.report(dict(metric=extra))

    trainable = tune.with_parameters(train_fn, extra=8)
    out = tune.run(trainable, metric="metric", mode="max", name="two-runs-1", **on_cluster.run)
    assert out.best_result["metric"] == 8

    def train_fn_2(config, extra=5):
        tune.report(dict(metric=extra))

    trainable = tune.with_parameters(train_fn_2, extra=9)
    out = tune.run(trainable, metric="metric", mode="max", name="two-runs-1b", **on_cluster.run)
    assert out.best_result["metric"] == 9


def test_with_parameters_two_runs_2(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testWithParametersTwoRuns2``."""

    # Makes sure two runs in the same script
    # pass (https://github.com/ray-project/ray/issues/16609)
    def train_fn(config, extra=4):
        tune.report(dict(metric=extra))

    def train_fn_2(config, extra=5):
        tune.report(dict(metric=extra))

    trainable1 = tune.with_parameters(train_fn, extra=8)
    trainable2 = tune.with_parameters(train_fn_2, extra=9)

    out1 = tune.run(trainable1, metric="metric", mode="max", name="two-runs-2", **on_cluster.run)
    out2 = tune.run(trainable2, metric="metric", mode="max", name="two-runs-2b", **on_cluster.run)
    assert out1.best_result["metric"] == 8
    assert out2.best_result["metric"] == 9


def test_return_anonymous(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testReturnAnonymous``."""

    def train(config):
        return config["a"]

    trial_1, trial_2 = tune.run(
        train, config={"a": tune.grid_search([4, 8])}, name="return-anonymous", **on_cluster.run
    ).trials

    assert trial_1.last_result[DEFAULT_METRIC] == 4
    assert trial_2.last_result[DEFAULT_METRIC] == 8


def test_return_specific(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testReturnSpecific``."""

    def train(config):
        return {"m": config["a"]}

    trial_1, trial_2 = tune.run(
        train, config={"a": tune.grid_search([4, 8])}, name="return-specific", **on_cluster.run
    ).trials

    assert trial_1.last_result["m"] == 4
    assert trial_2.last_result["m"] == 8


def test_yield_anonymous(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testYieldAnonymous``."""

    def train(config):
        for i in range(10):
            yield config["a"] + i

    trial_1, trial_2 = tune.run(
        train, config={"a": tune.grid_search([4, 8])}, name="yield-anonymous", **on_cluster.run
    ).trials

    assert trial_1.last_result[DEFAULT_METRIC] == 4 + 9
    assert trial_2.last_result[DEFAULT_METRIC] == 8 + 9


def test_yield_specific(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testYieldSpecific``."""

    def train(config):
        for i in range(10):
            yield {"m": config["a"] + i}

    trial_1, trial_2 = tune.run(
        train, config={"a": tune.grid_search([4, 8])}, name="yield-specific", **on_cluster.run
    ).trials

    assert trial_1.last_result["m"] == 4 + 9
    assert trial_2.last_result["m"] == 8 + 9
