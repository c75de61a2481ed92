"""Stop criteria and the experiment goal (kubetune.stop_criteria)."""

from __future__ import annotations

import math

import pytest

from kubetune.resultkeys import flatten, goal_reached
from kubetune.stop_criteria import should_stop


def test_flatten_nested_results():
    result = {"a": {"b": 1, "c": {"d": [1, 2]}}, "e": 3, "empty": {}}
    assert flatten(result) == {"a/b": 1, "a/c/d": [1, 2], "e": 3}
    assert flatten(result, sep=".") == {"a.b": 1, "a.c.d": [1, 2], "e": 3}
    assert result["a"] == {"b": 1, "c": {"d": [1, 2]}}


def test_stops_at_threshold_inclusive_whatever_the_direction():
    stop = {"training_iteration": 10, "mean_loss": 0.5}
    assert should_stop({"training_iteration": 9, "mean_loss": 0.1}, stop) == (False, None)
    assert should_stop({"training_iteration": 10, "mean_loss": 0.1}, stop) == (True, "training_iteration")
    # ">=" even for a loss: as Ray, stop criteria do not look at the mode.
    assert should_stop({"training_iteration": 1, "mean_loss": 0.5}, stop) == (True, "mean_loss")


def test_first_matching_key_in_stop_order():
    assert should_stop({"a": 5, "b": 5}, {"b": 1, "a": 1}) == (True, "b")


def test_nested_results_match_flattened_or_nested_criteria():
    result = {"info": {"episode_reward": 200}}
    assert should_stop(result, {"info/episode_reward": 195}) == (True, "info/episode_reward")
    assert should_stop(result, {"info": {"episode_reward": 195}}) == (True, "info/episode_reward")
    assert should_stop(result, {"info/episode_reward": 201}) == (False, None)


@pytest.mark.parametrize("value", [None, "high", math.nan, [1]])
def test_missing_or_non_numeric_values_never_stop(value):
    assert should_stop({"x": value}, {"x": 0}) == (False, None)
    assert should_stop({"y": 1}, {"x": 0}) == (False, None)


def test_empty_or_absent_criteria():
    assert should_stop({"x": 1}, {}) == (False, None)
    assert should_stop({"x": 1}, None) == (False, None)


def test_done_is_not_a_stop_criterion_here():
    assert should_stop({"done": True}, {"x": 1}) == (False, None)


def test_goal_by_mode():
    assert goal_reached(0.95, 0.9, "max") and goal_reached(0.9, 0.9, "max")
    assert not goal_reached(0.85, 0.9, "max")
    assert goal_reached(0.1, 0.2, "min") and goal_reached(0.2, 0.2, "min")
    assert not goal_reached(0.3, 0.2, "min")


@pytest.mark.parametrize("value", [None, math.nan, "x"])
def test_goal_without_a_value(value):
    assert not goal_reached(value, 0.5, "max")
    assert not goal_reached(value, 0.5, "min")


def test_goal_none_and_bad_mode():
    assert not goal_reached(1.0, None, "max")
    with pytest.raises(ValueError, match="mode"):
        goal_reached(1.0, 0.5, "maximize")


def test_a_bool_threshold_compares_as_ray_does():
    """Ray's ``result[key] >= value``: a bool is 0 or 1 on either side (``pbt_example.py``'s ``{"done": True}``)."""
    stop = {"done": True, "training_iteration": 10}
    assert should_stop({"done": False, "training_iteration": 9}, stop) == (False, None)
    assert should_stop({"done": True, "training_iteration": 3}, stop) == (True, "done")
    assert should_stop({"done": False, "training_iteration": 10}, stop) == (True, "training_iteration")
    assert should_stop({"converged": 1}, {"converged": True}) == (True, "converged")
    assert should_stop({"converged": 0.5}, {"converged": True}) == (False, None)
    assert should_stop({"converged": True}, {"converged": 0.5}) == (True, "converged")
    assert should_stop({"converged": False}, {"converged": False}) == (True, "converged")  # False >= False


def test_a_bool_stop_goes_from_the_sdk_through_the_crd_to_the_operator_and_the_trial_pod():
    from kubetune.env import TrialEnv, encode_trial_env, read_trial_env
    from kubetune.sdk.tuner import build_experiment
    from kubetune_operator.controller import ExperimentController
    from kubetune_operator.settings import Settings
    from tests.unit.conftest_crds import root_schema, validate
    from tests.unit.test_controller import KEY, T0, adopt_created, experiment

    stop = {"done": True, "training_iteration": 10, "info": {"converged": True}}
    spec = build_experiment("exp", "m:T", stop=stop, storage="s3://bucket/prefix")["spec"]
    assert spec["stop"] == {"done": True, "training_iteration": 10, "info/converged": True}
    assert validate(spec["stop"], root_schema("Experiment")["properties"]["spec"]["properties"]["stop"]) == []
    ctl = ExperimentController(experiment(stop=spec["stop"]), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    first = {"acc": 0.1, "training_iteration": 1, "done": False}
    assert ctl.record_results("exp-00000", 0, [first], None) == "continue"
    converged = {"acc": 0.2, "training_iteration": 2, "done": False, "info": {"converged": True}}
    assert ctl.record_results("exp-00000", 0, [converged], None) == "stop"
    trial = TrialEnv("ns", "exp", "exp-00000", 0, {}, "s3://bucket/prefix/t", stop=spec["stop"])
    pod_env = read_trial_env(encode_trial_env(trial), config_text="{}")  # what the trial pod applies
    assert pod_env.stop == spec["stop"] and should_stop(converged, pod_env.stop) == (True, "info/converged")


@pytest.mark.parametrize("value", ["yes", None, [1], {"a": "b"}, math.nan])
def test_a_stop_threshold_neither_a_number_nor_a_bool_is_refused_by_the_sdk_and_the_operator(value):
    from kubetune.sdk.tuner import build_experiment
    from kubetune_operator.experiment_spec import ExperimentSpec

    with pytest.raises(ValueError, match=r"stop\['x.*'\] must be a number or a bool"):
        build_experiment("exp", "m:T", stop={"x": value}, storage="s3://bucket/prefix")
    if not isinstance(value, dict):  # the SDK flattens a dict; the operator gets JSON from the API server
        with pytest.raises(ValueError, match=r"spec.stop.x must be a number or a bool"):
            ExperimentSpec.parse({"trainable": {"entrypoint": "m:T"}, "stop": {"x": value}})
