"""The ``asha`` scheduler: asynchronous successive halving (Ray's ``AsyncHyperBandScheduler``).

Owns :class:`AsyncHyperBandScheduler` (alias ``ASHAScheduler``) and the
percentile it cuts at. Algorithm: Li et al., "A System for Massively Parallel
Hyperparameter Tuning" (MLSys 2020); defaults, rung formula and per-result
rule as Ray Tune 2.x ``schedulers/async_hyperband.py``. Created through
``kubetune_operator.algorithms.create_scheduler``; the collector calls
``on_trial_result`` for every result.
"""

from __future__ import annotations

import hashlib
import math
from typing import Annotated, Iterable

from pydantic import Field

from kubetune.resultkeys import check_mode, is_number
from kubetune_operator.params import Count, Flag, Number, Positive, checked
from kubetune_operator.schedulers.base import CONTINUE, STOP, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["AsyncHyperBandScheduler", "ASHAScheduler", "nanpercentile"]


def nanpercentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` ignoring NaN, linear interpolation (numpy's default).

    Returns NaN when no value is left.
    """
    data = sorted(v for v in values if not math.isnan(v))
    if not data:
        return math.nan
    position = (len(data) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    if low == high or data[low] == data[high]:
        return data[low]
    return data[low] + (data[high] - data[low]) * (position - low)


class AsyncHyperBandScheduler(TrialScheduler):
    """ASHA: stop a trial at a rung when it is below the top ``1/reduction_factor`` recorded there.

    Each bracket ``s`` has rungs at ``grace_period * reduction_factor**(k + s)`` for
    ``k`` in ``reversed(range(int(log(max_t / grace_period) / log(reduction_factor) - s + 1)))``
    (defaults: 64, 16, 4, 1). On a result at time ``t``: STOP once ``t >= max_t``
    (with ``stop_last_trials``); otherwise take the highest rung with
    ``t >= milestone`` this trial has no value recorded at yet, compute the
    cutoff = NaN-ignoring percentile ``(1 - 1/reduction_factor) * 100`` of the
    values recorded there so far, STOP if the trial's value (negated for
    ``mode="min"``) is below it, and record the value. One rung per result.
    A new trial joins bracket ``b`` with probability ∝ ``exp(len(rungs_b))``, as
    Ray, but drawn from a hash of its id, so decisions are reproducible.

    Args:
        metric, mode: required.
        time_attr: result key measuring progress (``training_iteration``).
        max_t: trials stop at this time (100).
        grace_period: first rung (1).
        reduction_factor: keep the top ``1/reduction_factor`` at each rung (4).
        brackets: number of brackets (1).
        stop_last_trials: stop trials at ``max_t`` (True).

    Raises:
        ValueError: missing metric/mode, ``max_t <= 0``, ``grace_period <= 0`` or
            ``> max_t``, ``reduction_factor <= 1``, ``brackets < 1``.
    """

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "training_iteration",
        max_t: Positive = 100,
        grace_period: Positive = 1,
        reduction_factor: Annotated[Number, Field(gt=1)] = 4,
        brackets: Count = 1,
        stop_last_trials: Flag = True,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        if grace_period > max_t:
            raise ValueError(f"grace_period ({grace_period}) must be <= max_t ({max_t})")
        self.time_attr, self.max_t, self.grace_period = time_attr, max_t, grace_period
        self.reduction_factor, self.stop_last_trials = reduction_factor, stop_last_trials
        #: Per bracket, its rungs from the highest milestone down: ``[milestone, {trial_id: value}]``.
        self.rungs: list[list[tuple[float, dict[str, float]]]] = []
        for s in range(brackets):
            count = int(math.log(max_t / grace_period) / math.log(reduction_factor) - s + 1)
            self.rungs.append([(grace_period * reduction_factor ** (k + s), {}) for k in reversed(range(count))])
        self._trial_bracket: dict[str, int] = {}
        self.num_stopped = 0

    def on_trial_add(self, trial_id: str) -> None:
        if trial_id in self._trial_bracket:
            return
        sizes = [len(rungs) for rungs in self.rungs]
        weights = [math.exp(size - max(sizes)) for size in sizes]
        draw = int.from_bytes(hashlib.sha256(trial_id.encode()).digest()[:8], "big") / 2**64 * sum(weights)
        index = 0
        while index < len(weights) - 1 and draw >= weights[index]:
            draw -= weights[index]
            index += 1
        self._trial_bracket[trial_id] = index

    def _on_rung(self, trial_id: str, time: float, value: float) -> str:
        self.on_trial_add(trial_id)
        for milestone, recorded in self.rungs[self._trial_bracket[trial_id]]:
            if time >= milestone and trial_id in recorded and not self.stop_last_trials:
                break  # already past this rung: the decision to go on was made then
            if time < milestone or trial_id in recorded:
                continue
            cutoff = nanpercentile(recorded.values(), (1 - 1 / self.reduction_factor) * 100) if recorded else None
            recorded[trial_id] = value
            return STOP if cutoff is not None and value < cutoff else CONTINUE
        return CONTINUE

    def _usable(self, result: dict | None) -> bool:
        return bool(result) and is_number(result.get(self.time_attr)) and is_number(result.get(self.metric))

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE or STOP; results without ``time_attr`` or ``metric`` (as numbers) CONTINUE."""
        if not self._usable(result):
            return CONTINUE
        time = result[self.time_attr]
        if time >= self.max_t and self.stop_last_trials:
            action = STOP
        else:
            action = self._on_rung(trial_id, time, self._metric_op * result[self.metric])
        if action == STOP:
            self.num_stopped += 1
        return action

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        """Record the final result at its rung (no decision), then forget the trial."""
        if self._usable(result):
            self._on_rung(trial_id, result[self.time_attr], self._metric_op * result[self.metric])
        self._trial_bracket.pop(trial_id, None)

    def on_trial_remove(self, trial_id: str) -> None:
        self._trial_bracket.pop(trial_id, None)

    def get_state(self) -> dict:
        """``{"rungs": [[{trial_id: value}, ...] per bracket], "trials": {trial_id: bracket}, "num_stopped"}``."""
        rungs = [[{t: encode_number(v) for t, v in recorded.items()} for _, recorded in b] for b in self.rungs]
        return {"rungs": rungs, "trials": dict(self._trial_bracket), "num_stopped": self.num_stopped}

    def set_state(self, state: dict) -> None:
        """Resume; the parameters must give the same rungs as when the state was taken.

        Raises:
            ValueError: the state's rung layout does not match these parameters.
        """
        layout = [len(b) for b in self.rungs]
        if [len(b) for b in state["rungs"]] != layout:
            raise ValueError(f"scheduler state has rungs {[len(b) for b in state['rungs']]}, parameters give {layout}")
        self.rungs = [
            [
                (milestone, {t: decode_number(v) for t, v in recorded.items()})
                for (milestone, _), recorded in zip(bracket, saved)
            ]
            for bracket, saved in zip(self.rungs, state["rungs"])
        ]
        self._trial_bracket = dict(state["trials"])
        self.num_stopped = state["num_stopped"]


ASHAScheduler = AsyncHyperBandScheduler
