"""Result keys, numbers and modes: the one home of the rules every part applies to a result.

Owns Ray's flattened keys (:func:`flatten`, ``{"a": {"b": 1}}`` → ``{"a/b": 1}``, and
:func:`lookup` of one such key without flattening the whole result), what counts as a number
(:func:`is_number`, :func:`finite_number`), whether a result reports the experiment's metric
(:func:`missing_metrics`, Ray's strict metric check), metric modes (:func:`check_mode`,
:func:`mode_sign`, :func:`goal_reached`), and the objectives of a multi-objective experiment
(:func:`objectives`: ``metric``/``mode`` given as lists) with their Pareto front
(:func:`non_dominated`, for the operator's ``status.paretoFront`` and the SDK's analysis).
Callers: the in-pod runtime (stop criteria, the result log, TensorBoard), the SDK (status
table, analysis), and the operator (schedulers, searchers, stoppers, status), so that they
all read a result the same way.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = [
    "flatten",
    "lookup",
    "missing_metrics",
    "is_number",
    "finite_number",
    "check_mode",
    "mode_sign",
    "goal_reached",
    "MAX_OBJECTIVES",
    "is_multi_objective",
    "objectives",
    "spec_objectives",
    "objectives_spec",
    "dominates",
    "non_dominated",
]

#: Most objectives of a multi-objective experiment (``metric: [a, b, ...]``).
MAX_OBJECTIVES = 8


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


#: Keys a result may carry that say nothing of training: Ray's ``DEBUG_METRICS`` and ``done``.
_NOT_CHECKED = frozenset(
    {"trial_id", "experiment_id", "date", "timestamp", "pid", "hostname", "node_ip", "config", "done"}
)


def missing_metrics(result: Mapping[str, Any], metrics: Sequence[str]) -> list[str]:
    """The ``metrics`` (flattened keys) that ``result`` does not report, as Ray's controller finds them
    (``_validate_result_metrics``, when a metric is set): none for a result with at most one key besides
    ``done`` and Ray's ``DEBUG_METRICS`` (a function trainable that returned without reporting).

    Args:
        result: one training result.
        metrics: the experiment's metric, or its objectives.

    Returns:
        The missing ones, in the order given; a top-level key present with the value None counts as
        reported (a nested one does not).
    """
    if sum(1 for key in result if key not in _NOT_CHECKED) <= 1:
        return []
    return [m for m in metrics if m not in result and lookup(result, m) is None]


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


def is_multi_objective(metric: Any) -> bool:
    """Whether ``metric`` names several objectives (a list or tuple, as Ray's ``OptunaSearch(metric=[...])``)."""
    return isinstance(metric, (list, tuple))


def objectives(metric: Any, mode: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The metrics and modes of a multi-objective experiment, checked.

    Args:
        metric: a list of result keys, e.g. ``["loss", "latency"]``.
        mode: a list of the same length of ``"max"``/``"min"``, e.g. ``["min", "min"]``.

    Returns:
        ``(metrics, modes)`` as tuples.

    Raises:
        ValueError: ``metric`` or ``mode`` is not a list; fewer than 2 or more than :data:`MAX_OBJECTIVES`
            metrics; a metric that is not a non-empty string, or one named twice; a mode other than
            ``"max"``/``"min"``; lengths that differ.
    """
    if not is_multi_objective(metric) or not is_multi_objective(mode):
        raise ValueError(
            f"metric and mode of several objectives are both lists (one mode per metric), "
            f"got metric={metric!r}, mode={mode!r}"
        )
    if not 2 <= len(metric) <= MAX_OBJECTIVES:
        raise ValueError(
            f"metric: a list of 2 to {MAX_OBJECTIVES} result keys (one metric is a string), got {metric!r}"
        )
    if any(not isinstance(m, str) or not m for m in metric) or len(set(metric)) != len(metric):
        raise ValueError(f"metric: the objectives must be distinct non-empty strings, got {metric!r}")
    if len(mode) != len(metric):
        raise ValueError(f"mode must give one of max/min per metric: {len(metric)} metrics, got mode={mode!r}")
    for m in mode:
        check_mode(None, m, required=False)
        if m is None:
            raise ValueError(f"mode must give one of max/min per metric, got mode={mode!r}")
    return tuple(metric), tuple(mode)


def spec_objectives(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """An Experiment ``spec``'s metric and mode as the Python API gives them: ``spec.metric``/``spec.mode``,
    or for a multi-objective experiment the lists read from ``spec.objectives`` (``[{"metric", "mode"}, ...]``,
    Kubernetes' typed form of Ray's ``metric=[...]``, ``mode=[...]``). Unchecked: :func:`objectives` checks.
    """
    items = spec.get("objectives")
    if items:
        return [o.get("metric") for o in items], [o.get("mode") for o in items]
    return spec.get("metric"), spec.get("mode")


def objectives_spec(metric: Any, mode: Any) -> dict[str, Any]:
    """The Experiment spec fields for ``metric``/``mode`` (inverse of :func:`spec_objectives`): ``{"metric",
    "mode"}`` (None values left out), or ``{"objectives": [{"metric", "mode"}, ...]}`` when they are lists."""
    if is_multi_objective(metric) and is_multi_objective(mode):
        return {"objectives": [{"metric": m, "mode": d} for m, d in zip(metric, mode)]}
    return {k: v for k, v in (("metric", metric), ("mode", mode)) if v is not None}


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether values ``a`` Pareto-dominate ``b``: at least as good in every objective, better in one.

    Args:
        a, b: one value per objective.
        modes: ``"max"``/``"min"`` per objective.

    Raises:
        ValueError: a mode is neither.
    """
    better = False
    for x, y, mode in zip(a, b, modes):
        sign = mode_sign(mode)
        if sign * x < sign * y:
            return False
        better |= sign * x > sign * y
    return better


def non_dominated(points: Sequence[tuple[Any, Sequence[float]]], modes: Sequence[str]) -> list[Any]:
    """The keys of the ``(key, values)`` points no other point dominates (:func:`dominates`), in input order:
    the Pareto front, as Optuna's ``Study.best_trials`` (Deb et al., NSGA-II, IEEE TEVC 2002). Points with equal
    values dominate neither each other, so all of them are kept. Values must be finite (callers leave out
    missing, NaN and infinite ones). O(n * front size) comparisons.

    Raises:
        ValueError: a mode is not ``"max"`` or ``"min"``.
    """
    front: list[tuple[int, Any, Sequence[float]]] = []
    for i, (key, values) in enumerate(points):
        if any(dominates(other, values, modes) for _, _, other in front):
            continue
        front = [item for item in front if not dominates(values, item[2], modes)] + [(i, key, values)]
    return [key for _, key, _ in sorted(front, key=lambda item: item[0])]
