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
