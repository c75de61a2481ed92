"""Declarative stoppers (kubetune_operator.builtin_stoppers): Ray Tune 2.x's rules, their state, their use."""

from __future__ import annotations

import math

import pytest

from kubetune_operator.builtin_stoppers import create_stoppers
from kubetune_operator.controller import ExperimentController
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec
from tests.unit.test_controller import KEY, T0, adopt_created, experiment


def feed(stoppers, trial, values, metric="loss"):
    return [stoppers(trial, {metric: v}) for v in values]


def test_maximum_iteration_counts_the_results_it_saw():
    stoppers = create_stoppers([{"name": "maximum_iteration", "params": {"max_iter": 3}}], None, None)
    assert feed(stoppers, "a", [1, 2, 3, 4]) == [False, False, True, True]
    assert feed(stoppers, "b", [1]) == [False]


def test_trial_plateau_as_ray_grace_window_and_population_std():
    stoppers = create_stoppers(
        [{"name": "trial_plateau", "params": {"std": 0.01, "num_results": 3, "grace_period": 4}}], "loss", "min"
    )
    # the window [1.0, 1.001, 1.002] is flat from the 3rd result, but the grace period is 4 results
    assert feed(stoppers, "a", [5.0, 1.0, 1.001, 1.002, 1.003]) == [False, False, False, True, True]
    assert feed(stoppers, "b", [1.0, 2.0, 3.0, 4.0, 5.0]) == [False] * 5  # std 0.82: no plateau


def test_trial_plateau_waits_for_the_threshold_in_the_mode():
    stoppers = create_stoppers(
        [{"name": "trial_plateau", "params": {"num_results": 2, "grace_period": 2, "metric_threshold": 0.5}}],
        "acc",
        "max",
    )
    assert feed(stoppers, "a", [0.3, 0.3, 0.3], "acc") == [False] * 3  # flat, but worse than 0.5
    assert feed(stoppers, "b", [0.6, 0.6], "acc") == [False, True]


def test_experiment_plateau_stops_all_when_the_top_values_agree_for_patience_results():
    stoppers = create_stoppers(
        [{"name": "experiment_plateau", "params": {"top": 3, "std": 0.01, "patience": 2}}], "loss", "min"
    )
    assert feed(stoppers, "a", [1.0, 0.5, 0.5]) == [False, False, False]  # top 3: [0.5, 0.5, 1.0]
    assert not stoppers.stop_all()
    assert stoppers("b", {"loss": 0.5}) is False  # top [0.5, 0.5, 0.5]: the 1st plateaued result of 2
    assert stoppers("b", {"loss": 0.9}) is True and stoppers.stop_all()


def test_nan_and_missing_values_never_make_a_plateau():
    stoppers = create_stoppers(
        [{"name": "trial_plateau", "params": {"num_results": 2, "grace_period": 1}}], "loss", "min"
    )
    assert feed(stoppers, "a", [math.nan, math.nan, None, None]) == [False] * 4


@pytest.mark.parametrize(
    "specs, words",
    [
        ([{"name": "patience"}], "unknown stopper"),
        ([{"name": "maximum_iteration", "params": {"max_iter": 0}}], "max_iter"),
        ([{"name": "trial_plateau", "params": {"metric": "loss", "sdt": 0.1}}], "sdt"),
        ([{"name": "trial_plateau"}], "needs a metric"),
        ([{"name": "trial_plateau", "params": {"metric": "loss", "std": "0.1"}}], "trial_plateau: std: Input should"),
    ],
)
def test_bad_stoppers_are_named(specs, words):
    with pytest.raises(ValueError, match=words):
        create_stoppers(specs, None, None)


def test_state_round_trip():
    specs = [
        {"name": "trial_plateau", "params": {"num_results": 2, "grace_period": 1}},
        {"name": "experiment_plateau", "params": {"top": 2}},
        {"name": "maximum_iteration", "params": {"max_iter": 9}},
    ]
    one, two = create_stoppers(specs, "loss", "min"), create_stoppers(specs, "loss", "min")
    feed(one, "a", [1.0, math.inf, 0.5])
    two.set_state(one.get_state())
    assert two.get_state() == one.get_state()
    assert feed(two, "a", [0.5, 0.5]) == feed(one, "a", [0.5, 0.5])


def test_the_controller_stops_a_trial_at_a_plateau_and_ends_the_experiment_on_stop_all():
    spec = experiment(
        stoppers=[
            {"name": "trial_plateau", "params": {"num_results": 2, "grace_period": 2}},
            {"name": "experiment_plateau", "params": {"top": 2, "std": 0.0}},
        ],
        metric="acc",
        mode="max",
    )
    ctl = ExperimentController(spec, Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    assert ctl.record_results("exp-00000", 0, [{"training_iteration": 1, "acc": 0.2}], None) == "continue"
    assert ctl.record_results("exp-00000", 0, [{"training_iteration": 2, "acc": 0.2}], None) == "stop"
    assert ctl.stopping_reason(T0 + 2) == "StopperStoppedAll"  # the top 2 values agree exactly


def test_stoppers_cannot_change_while_the_experiment_runs():
    spec = experiment(stoppers=[{"name": "maximum_iteration", "params": {"max_iter": 3}}])
    ctl = ExperimentController(spec, Settings(), KEY)
    edited = experiment(stoppers=[{"name": "maximum_iteration", "params": {"max_iter": 30}}])
    with pytest.raises(InvalidSpec, match="stoppers cannot change"):
        ctl.update(edited)
