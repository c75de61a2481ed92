"""Result keys, numbers and modes: the one home of the rules every part applies to a result.

Owns Ray's flattened keys (:func:`flatten`, ``{"a": {"b": 1}}`` → ``{"a/b": 1}``, and
:func:`lookup` of one such key without flattening the whole result), what counts as a number
(:func:`is_number`, :func:`finite_number`), and metric modes (:func:`check_mode`,
:func:`mode_sign`, :func:`goal_reached`). Callers: the in-pod runtime (stop criteria, the result
log, TensorBoard), the SDK (status table, analysis), and the operator (schedulers, searchers,
stoppers, status), so that they all read a result the same way.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["flatten", "lookup", "is_number", "finite_number", "check_mode", "mode_sign", "goal_reached"]


def flatten(result: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """Flatten nested dicts into one level, joining keys with ``sep`` (Ray's ``flatten_dict``).

    ``{"a": {"b": 1}, "c": 2}`` → ``{"a/b": 1, "c": 2}``. Lists are values, not
    flattened; empty nested dicts disappear, as in Ray. The input is not modified.
    """
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, Mapping):
            for sub_key, sub_value in flatten(value, sep).items():
                flat[f"{key}{sep}{sub_key}"] = sub_value
        else:
            flat[str(key)] = value
    return flat


def lookup(result: Mapping[str, Any] | None, key: str) -> Any:
    """The value of the flattened ``key`` (``"a/b"``) in ``result``, or None: ``result[key]`` when present, else
    ``result["a"]["b"]``. Costs the key's depth, not the result's size."""
    if not result:
        return None
    if key in result:
        return result[key]
    node: Any = result
    for part in key.split("/"):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def is_number(value: object) -> bool:
    """Whether ``value`` is an int or float (bools excluded; NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools, non-numbers, NaN, infinities, ints beyond float range)."""
    if not is_number(value):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def check_mode(metric: str | None, mode: str | None, required: bool) -> None:
    """Validate a ``metric``/``mode`` pair.

    Raises:
        ValueError: ``mode`` is not None, ``"max"`` or ``"min"``; or ``required`` and either is missing.
    """
    if mode not in (None, "max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if required and (metric is None or mode is None):
        raise ValueError(f"metric and mode are required, got metric={metric!r}, mode={mode!r}")


def mode_sign(mode: str) -> int:
    """1 for ``"max"``, -1 for ``"min"``: ``sign * value`` is larger for a better value.

    Raises:
        ValueError: ``mode`` is neither.
    """
    check_mode(None, mode, required=False)
    if mode is None:
        raise ValueError("mode must be 'max' or 'min', got None")
    return 1 if mode == "max" else -1


def goal_reached(value: Any, goal: float | None, mode: str) -> bool:
    """Whether the best metric ``value`` reaches ``goal`` (``spec.goal``): ``>=`` for max, ``<=`` for min.

    Args:
        value: the best trial's metric value (None or NaN when there is none yet).
        goal: the target; None means no goal.
        mode: ``"max"`` or ``"min"``.

    Raises:
        ValueError: ``mode`` is neither.
    """
    sign = mode_sign(mode)
    if goal is None or not is_number(value) or math.isnan(value):
        return False
    return sign * value >= sign * goal
