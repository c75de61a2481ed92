"""The scheduler registry (kubetune_operator.schedulers): names, parameters, lazy imports, FIFO."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kubetune_operator.algorithms import SCHEDULERS, create_scheduler, scheduler_class
from kubetune_operator.schedulers import CONTINUE
from kubetune_operator.schedulers.asha import AsyncHyperBandScheduler
from kubetune_operator.schedulers.fifo import FIFOScheduler
from kubetune_operator.schedulers.hyperband import HyperBandScheduler
from kubetune_operator.schedulers.hyperband_bohb import HyperBandForBOHB
from kubetune_operator.schedulers.katib_medianstop import KatibMedianStop
from kubetune_operator.schedulers.median_stopping import MedianStoppingRule
from kubetune_operator.schedulers.pb2 import PB2
from kubetune_operator.schedulers.pbt import PopulationBasedTraining, PopulationBasedTrainingReplay


def test_names_are_the_crd_enum_values():
    assert {name: scheduler_class(name) for name in SCHEDULERS} == {
        "fifo": FIFOScheduler,
        "asha": AsyncHyperBandScheduler,
        "median_stopping_rule": MedianStoppingRule,
        "katib-medianstop": KatibMedianStop,
        "hyperband": HyperBandScheduler,
        "hyperband_bohb": HyperBandForBOHB,
        "pbt": PopulationBasedTraining,
        "pb2": PB2,
        "pbt_replay": PopulationBasedTrainingReplay,
    }


def test_parameters_use_rays_names():
    scheduler = create_scheduler(
        "asha",
        metric="loss",
        mode="min",
        time_attr="time_total_s",
        max_t=600,
        grace_period=10,
        reduction_factor=3,
        brackets=2,
        stop_last_trials=False,
    )
    assert (scheduler.time_attr, scheduler.max_t, scheduler.grace_period, scheduler.reduction_factor) == (
        "time_total_s",
        600,
        10,
        3,
    )
    assert len(scheduler.rungs) == 2 and scheduler.stop_last_trials is False


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(
        ValueError,
        match="unknown scheduler 'pb3'; valid: asha, fifo, hyperband, hyperband_bohb, katib-medianstop, "
        "median_stopping_rule, pb2, pbt, pbt_replay",
    ):
        create_scheduler("pb3")


def test_unknown_parameter_lists_the_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown parameter\(s\) grace, rf for scheduler 'asha'; valid: "
        r"time_attr, max_t, grace_period, reduction_factor, brackets, "
        r"stop_last_trials",
    ):
        create_scheduler("asha", metric="m", mode="max", grace=1, rf=2)
    with pytest.raises(ValueError, match="valid: none"):
        create_scheduler("fifo", max_t=3)


def test_fifo_always_continues_and_needs_no_metric():
    scheduler = create_scheduler("fifo")
    scheduler.on_trial_add("a")
    assert scheduler.on_trial_result("a", {"training_iteration": 10**6, "acc": -1}) == CONTINUE
    assert scheduler.get_state() == {}
    assert scheduler.choose_trial_to_run(["p1", "p2"]) is None
    assert scheduler.choose_trial_to_run(["p1", "p2"], search_finished=True) == "p1"


def test_registry_imports_schedulers_lazily():
    code = (
        "import sys, kubetune_operator.algorithms as s; "
        "assert not any(m in sys.modules for m in ('kubetune_operator.schedulers.asha', "
        "'kubetune_operator.schedulers.hyperband', 'kubetune_operator.schedulers.median_stopping')); "
        "s.create_scheduler('asha', metric='m', mode='max'); "
        "assert 'kubetune_operator.schedulers.asha' in sys.modules; "
        "assert 'kubetune_operator.schedulers.hyperband' not in sys.modules; "
        "assert not any(m.split('.')[0] in ('kopf', 'kubernetes') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("name", "params", "reason"),
    [
        ("asha", {"max_t": "10"}, "scheduler 'asha': max_t: Input should be a valid number"),
        ("asha", {"brackets": 1.0}, "scheduler 'asha': brackets: Input should be a valid integer"),
        ("asha", {"stop_last_trials": "yes"}, "scheduler 'asha': stop_last_trials: Input should be a valid boolean"),
        ("hyperband", {"max_t": float("inf")}, "scheduler 'hyperband': max_t: Input should be a finite number"),
        ("pbt", {"perturbation_factors": [1.2]}, "perturbation_factors: Tuple should have at least 2 items"),
        ("pbt", {"quantile_fraction": 0.7}, "quantile_fraction: Input should be less than or equal to 0.5"),
    ],
)
def test_a_mistyped_or_out_of_range_parameter_is_one_line_naming_it(name, params, reason):
    extra = {"hyperparam_mutations": {"lr": [0.1, 0.2]}} if name == "pbt" else {}
    with pytest.raises(ValueError) as info:
        create_scheduler(name, metric="loss", mode="min", **extra, **params)
    assert reason in str(info.value) and "\n" not in str(info.value)
    assert type(info.value) is ValueError  # described, not pydantic's multi-line error
