"""kubetune.resultkeys: flattened keys, numbers and modes, as every part of kubetune reads a result."""

from __future__ import annotations

import math

import pytest

from kubetune.resultkeys import finite_number, goal_reached, is_number, lookup, mode_sign


def test_lookup_reads_a_flattened_key_without_flattening():
    result = {"a": {"b": {"c": 3}}, "x/y": 1, "top": 2}
    assert lookup(result, "a/b/c") == 3 and lookup(result, "x/y") == 1 and lookup(result, "top") == 2
    assert lookup(result, "a/missing") is None and lookup(result, "top/deeper") is None
    assert lookup(None, "a") is None and lookup({}, "a") is None


def test_numbers():
    assert is_number(1) and is_number(1.5) and is_number(math.nan) and not is_number(True) and not is_number("1")
    assert finite_number(2) == 2.0 and finite_number(math.inf) is None and finite_number(math.nan) is None
    assert finite_number(False) is None and finite_number(10**400) is None


@pytest.mark.parametrize(
    "value, goal, mode, reached",
    [
        (0.95, 0.95, "max", True),
        (0.96, 0.95, "max", True),
        (0.94, 0.95, "max", False),
        (0.1, 0.1, "min", True),
        (0.05, 0.1, "min", True),
        (0.2, 0.1, "min", False),
        (None, 0.1, "min", False),
        (math.nan, 0.1, "max", False),
        (0.5, None, "max", False),
    ],
)
def test_goal_reached(value, goal, mode, reached):
    assert goal_reached(value, goal, mode) is reached


def test_modes():
    assert mode_sign("max") == 1 and mode_sign("min") == -1
    for bad in ("maximize", None):
        with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
            mode_sign(bad)
