"""tune.run's metric and mode as Ray fills and checks them (kubetune.sdk.tuner), before anything is created."""

from __future__ import annotations

import pytest

from kubetune.schedulers import ASHAScheduler, FIFOScheduler, HyperBandScheduler
from kubetune.sdk.tuner import build_experiment
from kubetune.search import OptunaSearch
from kubetune_operator.experiment_spec import ExperimentSpec


def build(**kwargs):
    return build_experiment("exp", {"entrypoint": "pkg.mod:Train"}, storage="s3://bucket/root", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "max"},
        {"mode": "min", "scheduler": ASHAScheduler()},
        {"scheduler": ASHAScheduler(mode="max")},
        {"search_alg": OptunaSearch(mode="min")},
    ],
)
def test_a_mode_without_a_metric_ranks_rays_anonymous_metric(kwargs):
    spec = build(**kwargs)["spec"]
    assert spec["metric"] == "_metric" and spec["mode"] in ("max", "min")
    assert ExperimentSpec.parse(spec).metric == "_metric"  # the CRD's rule holds (both set): no 422


def test_a_metric_without_a_mode_raises_rays_error_for_a_scheduler_that_needs_it():
    with pytest.raises(ValueError, match=r"^AsyncHyperBandScheduler has been instantiated without a valid `metric` "):
        build(metric="acc", scheduler=ASHAScheduler())
    with pytest.raises(ValueError, match=r"^HyperBandScheduler has been instantiated without a valid"):
        build(scheduler=HyperBandScheduler(metric="acc"))


def test_a_metric_without_a_mode_under_fifo_says_what_to_pass():
    for scheduler in (None, FIFOScheduler()):
        with pytest.raises(ValueError, match=r"metric='acc' without a mode: .*pass mode='max' or mode='min'"):
            build(metric="acc", scheduler=scheduler)


def test_neither_stays_neither():
    spec = build()["spec"]
    assert "metric" not in spec and "mode" not in spec
