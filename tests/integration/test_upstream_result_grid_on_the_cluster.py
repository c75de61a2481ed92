"""Ray Tune's own ``ResultGrid`` tests, ported onto the local cluster (issue 23.5): each runs ``tune.run`` or
``Tuner.fit``, so none runs without a cluster.

Source: ``python/ray/tune/tests/test_result_grid.py`` of Ray 2.x, the newest copy of the reference index (it
reports through ``ray.train.report``; Ray 2.60's wheel ships no tests). The assertions are Ray's, unchanged;
the setup is kubetune's: ``import kubetune as tune``, each run named and given the test's namespace and
storage (:mod:`tests.integration.upstream_setup`; Ray's ``RunConfig(storage_path=...)``), ``tune.report`` for
``train.report``, and Ray 2.60's ``AUTO_RESULT_KEYS`` (``ray.tune.result``) and ``BLACKLISTED_KEYS``
(``ray.tune.experimental.output``) written out below, as kubetune has no such modules.

Ported: ``test_result_grid_no_checkpoint``, ``test_best_result_no_report``, ``test_result_repr``,
``test_no_metric_mode_one_trial``, ``test_result_grid_df``, ``test_num_errors_terminated``.

Left out (docs/ray-tune.md, "Upstream tests: function API, ResultGrid, searchers"): ``test_result_grid_api``
(``experiment_path`` is ``<storage>/<namespace>/<name>/<uid>``, not ``<storage_path>/<name>``),
``test_result_grid_repr`` (another ``repr``: a ``Result`` shows its path as a URI and no checkpoint, a
``ResultGrid`` its size, errors and path); ``test_result_grid_moved_experiment_path`` is skipped in Ray ("Not
implemented yet") and has nothing to port.
"""

from __future__ import annotations

import pytest

import kubetune as tune
from kubetune.sdk.analysis import ResultGrid
from tests.integration.upstream_setup import on_cluster  # noqa: F401 - fixture

#: Ray 2.60's ``ray.tune.result.AUTO_RESULT_KEYS``.
AUTO_RESULT_KEYS = (
    "training_iteration",
    "time_total_s",
    "episodes_total",
    "timesteps_total",
    "node_ip",
    "hostname",
    "pid",
    "time_total_s",
    "time_this_iter_s",
    "timestamp",
    "date",
    "time_since_restore",
    "timesteps_since_restore",
    "iterations_since_restore",
    "config",
    "checkpoint_dir_name",
)
#: Ray 2.60's ``ray.tune.experimental.output.BLACKLISTED_KEYS``.
BLACKLISTED_KEYS = {
    "config",
    "date",
    "done",
    "hostname",
    "iterations_since_restore",
    "node_ip",
    "pid",
    "time_since_restore",
    "timestamp",
    "trial_id",
    "experiment_tag",
    "should_checkpoint",
    "_report_on",
}


def test_result_grid_no_checkpoint(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_result_grid_no_checkpoint``."""

    def f(config):
        pass

    analysis = tune.run(f, name="no-checkpoint", **on_cluster.run)
    result_grid = ResultGrid(analysis)
    result = result_grid[0]
    assert result.checkpoint is None


def test_best_result_no_report(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_best_result_no_report``."""

    def f(config):
        pass

    analysis = tune.run(f, config={"x": tune.grid_search([1, 2])}, name="no-report", **on_cluster.run)
    result_grid = ResultGrid(analysis)
    with pytest.raises(RuntimeError, match="No best trial found*"):
        result_grid.get_best_result(metric="x", mode="max")


def test_result_repr(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_result_repr``."""

    def f(config):
        tune.report({"loss": 1})

    tuner = tune.Tuner(
        f, param_space={"x": tune.grid_search([1, 2])}, run_config=tune.RunConfig(name="repr"), **on_cluster.tuner
    )
    result_grid = tuner.fit()
    result = result_grid[0]

    representation = result.__repr__()
    assert not any(key in representation for key in AUTO_RESULT_KEYS)
    assert not any(key in representation for key in BLACKLISTED_KEYS)


def test_no_metric_mode_one_trial(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_no_metric_mode_one_trial``."""

    def f(config):
        tune.report(dict(x=1))

    results = tune.Tuner(
        f,
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=tune.RunConfig(name="one-trial"),
        **on_cluster.tuner,
    ).fit()
    # This should not throw any exception
    best_result = results.get_best_result()
    assert best_result


def test_result_grid_df(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_result_grid_df``."""

    def f(config):
        tune.report(dict(metric=config["nested"]["param"] * 1))
        tune.report(dict(metric=config["nested"]["param"] * 4))
        tune.report(dict(metric=config["nested"]["param"] * 3))

    analysis = tune.run(f, config={"nested": {"param": tune.grid_search([1, 2])}}, name="df", **on_cluster.run)
    result_grid = ResultGrid(analysis)

    assert len(result_grid) == 2

    # Last result
    df = result_grid.get_dataframe()
    assert sorted(df["metric"]) == [3, 6]

    # Best result (max)
    df = result_grid.get_dataframe(filter_metric="metric", filter_mode="max")
    assert sorted(df["metric"]) == [4, 8]

    # Best result (min)
    df = result_grid.get_dataframe(filter_metric="metric", filter_mode="min")
    assert sorted(df["metric"]) == [1, 2]

    assert sorted(df["config/nested/param"]) == [1, 2]


def test_num_errors_terminated(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_result_grid.py::test_num_errors_terminated``."""

    def train_fn(config):
        if config["id"] == 1:
            raise RuntimeError()
        else:
            tune.report({"score": config["id"]})

    tuner = tune.Tuner(
        train_fn,
        param_space={"id": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(name="errors"),
        **on_cluster.tuner,
    )

    result_grid = tuner.fit()
    assert result_grid.num_errors == 1
    assert result_grid.num_terminated == 1
    assert isinstance(result_grid.errors[0], RuntimeError)
