"""The ``median_stopping_rule`` scheduler (Ray's ``MedianStoppingRule``).

Owns :class:`MedianStoppingRule`. Rule: Golovin et al., "Google Vizier: A
Service for Black-Box Optimization" (KDD 2017), §3.2.2; defaults and details
as Ray Tune 2.x ``schedulers/median_stopping_rule.py``. Created through
``kubetune_operator.schedulers.create_scheduler``.

Differences from Ray, both in corner cases: a trial without enough peers
continues (Ray may pause it to yield resources to queued trials, which only
its own trial runner can see; hence no ``min_time_slice``), and peers with no
result inside ``[grace_period, t]`` are left out of the median instead of
contributing NaN.
"""

from __future__ import annotations

import math
import statistics

from kubetune_operator.schedulers.base import CONTINUE, PAUSE, STOP, TrialScheduler, is_number
from kubetune_operator.search.base import check_mode, decode_number, encode_number

__all__ = ["MedianStoppingRule"]


class MedianStoppingRule(TrialScheduler):
    """Stop a trial whose best result is worse than the median of its peers' running means.

    At a result with time ``t >= grace_period``, the peers are the other trials
    whose latest result has time ``>= t``; with at least ``min_samples_required``
    of them, each peer's running mean of ``metric`` over its results with time in
    ``[grace_period, t]`` is computed, and the trial stops (or pauses, with
    ``hard_stop=False``) when the median of those means is better than the best
    value the trial has reported. Ties continue. A trial paused this way is
    never judged again.

    Args:
        metric, mode: required.
        time_attr: result key measuring time (``time_total_s``).
        grace_period: no decision before this time (60).
        min_samples_required: peers needed to decide (3).
        hard_stop: STOP (True) or PAUSE (False) bad trials.

    Raises:
        ValueError: missing metric/mode, negative ``grace_period``, ``min_samples_required < 1``.

    The state keeps every ``(time, value)`` of every trial (the running mean needs
    them): about 40 bytes of JSON per result.
    """

    def __init__(self, metric: str | None = None, mode: str | None = None, time_attr: str = "time_total_s",
                 grace_period: float = 60.0, min_samples_required: int = 3, hard_stop: bool = True):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        if not is_number(grace_period) or not math.isfinite(grace_period) or grace_period < 0:
            raise ValueError(f"grace_period must be a number >= 0, got {grace_period!r}")
        if isinstance(min_samples_required, bool) or not isinstance(min_samples_required, int) \
                or min_samples_required < 1:
            raise ValueError(f"min_samples_required must be an integer >= 1, got {min_samples_required!r}")
        self.time_attr, self.grace_period = time_attr, grace_period
        self.min_samples_required, self.hard_stop = min_samples_required, hard_stop
        self._results: dict[str, list[tuple[float, float]]] = {}
        self._stopped: set[str] = set()

    def _record(self, trial_id: str, result: dict | None) -> bool:
        if not result or not is_number(result.get(self.time_attr)) or not is_number(result.get(self.metric)):
            return False
        self._results.setdefault(trial_id, []).append((result[self.time_attr], result[self.metric]))
        return True

    def _running_mean(self, trial_id: str, time: float) -> float:
        values = [v for t, v in self._results[trial_id] if self.grace_period <= t <= time]
        return statistics.fmean(values) if values else math.nan

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE, or STOP/PAUSE for a trial worse than the median; unusable results CONTINUE."""
        if trial_id in self._stopped or not self._record(trial_id, result):
            return CONTINUE
        time = result[self.time_attr]
        if time < self.grace_period:
            return CONTINUE
        peers = [t for t, rs in self._results.items() if t != trial_id and rs[-1][0] >= time]
        means = [m for m in (self._running_mean(t, time) for t in peers) if not math.isnan(m)]
        own = [v for _, v in self._results[trial_id] if not math.isnan(v)]
        if len(means) < self.min_samples_required or not own:
            return CONTINUE
        median = statistics.median(means)
        best = max(own) if self.mode == "max" else min(own)
        if self._metric_op * median > self._metric_op * best:
            self._stopped.add(trial_id)
            return STOP if self.hard_stop else PAUSE
        return CONTINUE

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        """Keep the final result: finished trials stay peers of later ones."""
        self._record(trial_id, result)

    def get_state(self) -> dict:
        """``{"results": {trial_id: [[time, value], ...]}, "stopped": [trial_id, ...]}``, strict JSON."""
        results = {t: [[encode_number(x), encode_number(v)] for x, v in rs] for t, rs in self._results.items()}
        return {"results": results, "stopped": sorted(self._stopped)}

    def set_state(self, state: dict) -> None:
        self._results = {t: [(decode_number(x), decode_number(v)) for x, v in rs]
                         for t, rs in state["results"].items()}
        self._stopped = set(state["stopped"])
