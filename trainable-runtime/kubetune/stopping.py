"""Stopping criteria: the per-trial ``stop`` thresholds and the experiment's ``goal``.

Owns the comparison rules, so the in-pod runtime (which applies ``spec.stop``
to every result before asking the collector) and the operator (which checks
``spec.goal`` against the best trial) agree. Callers: ``kubetune.runtime``,
the operator's reconcile loop, the SDK.

Rules follow Ray Tune's ``Trial.should_stop`` (2.x): a trial stops once
``result[key] >= value`` for any key of the stop dict, whatever the
experiment's mode; nested results are matched by their flattened ``a/b`` keys;
a key the result does not hold never stops the trial.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["flatten", "should_stop", "goal_reached"]


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


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def should_stop(result: Mapping[str, Any], stop: Mapping[str, Any] | None) -> tuple[bool, str | None]:
    """Whether ``result`` meets a stop criterion of ``stop`` (``spec.stop``).

    Args:
        result: one training result (may be nested).
        stop: thresholds by result key; nested dicts are flattened like the
            result, so ``{"info": {"loss": 1}}`` and ``{"info/loss": 1}`` agree.

    Returns:
        ``(True, key)`` for the first key (in ``stop``'s order) with
        ``result[key] >= threshold``; else ``(False, None)``. Keys missing from the
        result, and values that are not numbers (None, strings, NaN), never stop.
        ``done`` is not consulted here: the Trainable loop handles it.
    """
    if not stop:
        return False, None
    flat = flatten(result)
    for key, threshold in flatten(stop).items():
        value = flat.get(key)
        if _number(value) and _number(threshold) and value >= threshold:
            return True, key
    return False, None


def goal_reached(value: Any, goal: float | None, mode: str) -> bool:
    """Whether the experiment's best metric ``value`` reaches ``goal`` (``spec.goal``).

    Args:
        value: the best trial's metric value (None or NaN when there is none yet).
        goal: the target; None means no goal.
        mode: ``"max"`` (reached when ``value >= goal``) or ``"min"`` (``value <= goal``).

    Raises:
        ValueError: ``mode`` is neither ``"max"`` nor ``"min"``.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if goal is None or not _number(value):
        return False
    return value >= goal if mode == "max" else value <= goal
