"""Declarative stoppers (``spec.stoppers``): Ray Tune's built-in ``tune.stopper`` classes, run in the operator.

They need no user code, so the operator runs them on every result it applies
(``JournaledDecisions._apply_results`` in ``decisions.py``, live and when the journal is replayed, so they continue
exactly where they were after a restart; their state is in the journal's snapshots). A stopper
that says a trial should stop makes the collector's answer ``stop``; one that says the whole
experiment should stop ends it (reason ``StopperStoppedAll``). Several stoppers combine as Ray's
``CombinedStopper``: any of them stops. Rules and defaults as Ray Tune 2.x ``tune/stopper/``.
``spec.stop`` (result thresholds) and ``spec.timeBudget`` cover Ray's dict stop criteria and
``TimeoutStopper``.
"""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Any, Mapping, Sequence

from pydantic import Field, StrictInt, ValidationError

from kubetune.resultkeys import check_mode, is_number
from kubetune_operator.params import Count, NonNegative, Number, checked, describe
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["STOPPERS", "Stoppers", "create_stoppers"]


class MaximumIterationStopper:
    """Stop a trial after ``max_iter`` results (Ray's ``MaximumIterationStopper``; it counts the results
    the stopper saw, not ``training_iteration``).

    Raises:
        ValueError: ``max_iter`` is not an integer >= 1.
    """

    @checked
    def __init__(self, max_iter: Count):
        self.max_iter = max_iter
        self.seen: dict[str, int] = {}

    def __call__(self, trial_id: str, result: Mapping) -> bool:
        self.seen[trial_id] = self.seen.get(trial_id, 0) + 1
        return self.seen[trial_id] >= self.max_iter

    def stop_all(self) -> bool:
        return False

    def get_state(self) -> dict:
        return {"seen": dict(self.seen)}

    def set_state(self, state: dict) -> None:
        self.seen = dict(state["seen"])


class TrialPlateauStopper:
    """Stop a trial once the population standard deviation of its last ``num_results`` values of
    ``metric`` is below ``std``, after ``grace_period`` results and (with ``metric_threshold``) once its
    latest value is at least as good as the threshold (Ray's ``TrialPlateauStopper``).

    Raises:
        ValueError: ``metric_threshold`` without a ``mode``, or counts below 1.
    """

    @checked
    def __init__(
        self,
        metric: str,
        std: NonNegative = 0.01,
        num_results: Count = 4,
        grace_period: Count = 4,
        metric_threshold: Number | None = None,
        mode: str | None = None,
    ):
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError("trial_plateau: metric_threshold needs a mode, min or max")
        self.metric, self.std, self.num_results, self.grace_period = metric, std, num_results, grace_period
        self.metric_threshold, self.mode = metric_threshold, mode
        self.seen: dict[str, int] = {}
        self.last: dict[str, list] = {}  # trial -> its last num_results values of metric

    def __call__(self, trial_id: str, result: Mapping) -> bool:
        value = result.get(self.metric)
        window = self.last.setdefault(trial_id, [])
        window.append(value)
        del window[: -self.num_results]
        self.seen[trial_id] = self.seen.get(trial_id, 0) + 1
        if self.seen[trial_id] < self.grace_period or len(window) < self.num_results:
            return False
        if (
            self.metric_threshold is not None
            and is_number(value)
            and (value > self.metric_threshold if self.mode == "min" else value < self.metric_threshold)
        ):
            return False
        if not all(is_number(v) and math.isfinite(v) for v in window):
            return False  # Ray's numpy gives nan or fails here: no plateau
        return statistics.pstdev(window) < self.std

    def stop_all(self) -> bool:
        return False

    def get_state(self) -> dict:
        return {"seen": dict(self.seen), "last": {t: [encode_number(v) for v in w] for t, w in self.last.items()}}

    def set_state(self, state: dict) -> None:
        self.seen = dict(state["seen"])
        self.last = {t: [decode_number(v) for v in w] for t, w in state["last"].items()}


class ExperimentPlateauStopper:
    """Stop the whole experiment once the ``top`` best values of ``metric`` seen so far (any trial) have a
    population standard deviation of at most ``std`` at ``max(patience, 1)`` results in a row (Ray's
    ``ExperimentPlateauStopper``, whose count includes the current result).

    Raises:
        ValueError: a bad ``mode``, ``top < 1`` or ``patience < 0``.
    """

    @checked
    def __init__(
        self,
        metric: str,
        std: NonNegative = 0.001,
        top: Count = 10,
        mode: str = "min",
        patience: Annotated[StrictInt, Field(ge=0)] = 0,
    ):
        check_mode(metric, mode, required=True)
        self.metric, self.std, self.top, self.mode, self.patience = metric, std, top, mode, patience
        self.top_values: list[float] = []
        self.iterations = 0

    def __call__(self, trial_id: str, result: Mapping) -> bool:
        value = result.get(self.metric)
        if is_number(value) and not math.isnan(value):
            values = sorted([*self.top_values, value])
            self.top_values = values[: self.top] if self.mode == "min" else values[-self.top :]
        self.iterations = self.iterations + 1 if self._plateaued() else 0
        return self.stop_all()

    def _plateaued(self) -> bool:
        return (
            len(self.top_values) == self.top
            and all(math.isfinite(v) for v in self.top_values)
            and statistics.pstdev(self.top_values) <= self.std
        )

    def stop_all(self) -> bool:
        return self._plateaued() and self.iterations >= self.patience

    def get_state(self) -> dict:
        return {"top": [encode_number(v) for v in self.top_values], "iterations": self.iterations}

    def set_state(self, state: dict) -> None:
        self.top_values = [decode_number(v) for v in state["top"]]
        self.iterations = state["iterations"]


#: ``spec.stoppers[].name`` -> class.
STOPPERS = {
    "maximum_iteration": MaximumIterationStopper,
    "trial_plateau": TrialPlateauStopper,
    "experiment_plateau": ExperimentPlateauStopper,
}


class Stoppers:
    """The Experiment's stoppers, combined as Ray's ``CombinedStopper`` (any of them stops)."""

    def __init__(self, stoppers: Sequence[Any]):
        self.stoppers = list(stoppers)

    def __call__(self, trial_id: str, result: Mapping) -> bool:
        """Whether ``trial_id`` should stop at ``result``; every stopper sees every result."""
        return any([stopper(trial_id, result) for stopper in self.stoppers])

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop."""
        return any(stopper.stop_all() for stopper in self.stoppers)

    def get_state(self) -> list:
        return [stopper.get_state() for stopper in self.stoppers]

    def set_state(self, state: list) -> None:
        for stopper, part in zip(self.stoppers, state, strict=True):
            stopper.set_state(part)


def create_stoppers(specs: Sequence[Mapping] | None, metric: str | None, mode: str | None) -> Stoppers:
    """Build ``spec.stoppers``: ``[{"name": ..., "params": {...}}]``; ``metric`` and ``mode`` default to the
    Experiment's where the stopper takes them.

    Raises:
        ValueError: an unknown name, or bad or unknown parameters (the message names them).
    """
    built = []
    for spec in specs or ():
        name, params = spec.get("name"), dict(spec.get("params") or {})
        cls = STOPPERS.get(name)
        if cls is None:
            raise ValueError(f"unknown stopper {name!r}; valid: {', '.join(sorted(STOPPERS))}")
        if cls is not MaximumIterationStopper:
            params.setdefault("metric", metric)
            if params["metric"] is None:
                raise ValueError(f"stopper {name} needs a metric (params.metric or spec.metric)")
            if cls is ExperimentPlateauStopper or "metric_threshold" in params:
                params.setdefault("mode", mode or "min")
        try:
            built.append(cls(**params))
        except ValidationError as exc:  # a missing, unknown, mistyped or out-of-range parameter
            raise ValueError(f"stopper {name}: {describe(exc)}") from None
    return Stoppers(built)
