"""The ``median_stopping_rule`` scheduler (Ray's ``MedianStoppingRule``).

Owns :class:`MedianStoppingRule`. Rule: Golovin et al., "Google Vizier: A
Service for Black-Box Optimization" (KDD 2017), §3.2.2; defaults and details
as Ray Tune 2.x ``schedulers/median_stopping_rule.py``. Created through
``kubetune_operator.algorithms.create_scheduler``.

Differences from Ray, both in corner cases: a trial without enough peers
continues (Ray may pause it to yield resources to queued trials, which only
its own trial runner can see; hence no ``min_time_slice``), and peers with no
result inside ``[grace_period, t]`` are left out of the median instead of
contributing NaN.
"""

from __future__ import annotations

import bisect
import math
import statistics

from kubetune.resultkeys import check_mode, is_number
from kubetune_operator.params import Count, Flag, NonNegative, checked
from kubetune_operator.schedulers.base import CONTINUE, PAUSE, STOP, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

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
    them): about 40 bytes of JSON per result. A decision costs O(trials x log(results
    per trial)): each peer's running mean comes from prefix sums.
    """

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "time_total_s",
        grace_period: NonNegative = 60.0,
        min_samples_required: Count = 3,
        hard_stop: Flag = True,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        self.time_attr, self.grace_period = time_attr, grace_period
        self.min_samples_required, self.hard_stop = min_samples_required, hard_stop
        self._results: dict[str, list[list]] = {}  # trial -> [[time, value], ...] in arrival order, encoded
        self._histories: dict[str, _History] = {}
        self._stopped: set[str] = set()

    def _record(self, trial_id: str, result: dict | None) -> bool:
        if not result or not is_number(result.get(self.time_attr)) or not is_number(result.get(self.metric)):
            return False
        self._add(trial_id, result[self.time_attr], result[self.metric])
        return True

    def _add(self, trial_id: str, time: float, value: float) -> None:
        self._results.setdefault(trial_id, []).append([encode_number(time), encode_number(value)])  # as get_state gives
        if trial_id not in self._histories:
            self._histories[trial_id] = _History(self.mode)
        self._histories[trial_id].add(time, value)

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE, or STOP/PAUSE for a trial worse than the median; unusable results CONTINUE.

        Cost: O(trials x log(results per trial)).
        """
        if trial_id in self._stopped or not self._record(trial_id, result):
            return CONTINUE
        time = result[self.time_attr]
        if time < self.grace_period:
            return CONTINUE
        means = []
        for peer, history in self._histories.items():
            if peer != trial_id and history.last_time >= time:
                mean = history.mean(self.grace_period, time)
                if not math.isnan(mean):
                    means.append(mean)
        best = self._histories[trial_id].best
        if len(means) < self.min_samples_required or best is None:
            return CONTINUE
        median = statistics.median(means)
        if self._metric_op * median > self._metric_op * best:
            self._stopped.add(trial_id)
            return STOP if self.hard_stop else PAUSE
        return CONTINUE

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        """Keep the final result: finished trials stay peers of later ones."""
        self._record(trial_id, result)

    def get_state(self) -> dict:
        """``{"results": {trial_id: [[time, value], ...]}, "stopped": [trial_id, ...]}``, strict JSON."""
        return {"results": {t: rs.copy() for t, rs in self._results.items()}, "stopped": sorted(self._stopped)}

    def set_state(self, state: dict) -> None:
        self._results, self._histories = {}, {}
        for trial_id, results in state["results"].items():
            for time, value in results:
                self._add(trial_id, decode_number(time), decode_number(value))
        self._stopped = set(state["stopped"])


class _History:
    """One trial's ``(time, value)`` results, indexed for running means over a time window.

    Times sorted, with prefix sums of the finite values and prefix counts of NaN, +inf and -inf, so
    :meth:`mean` costs two binary searches; ``best`` is the best value so far (NaN never is).
    """

    __slots__ = ("mode", "pairs", "times", "sums", "nans", "pinfs", "ninfs", "last_time", "best")

    def __init__(self, mode: str):
        self.mode = mode
        self.pairs: list[tuple[float, float]] = []
        self.times: list[float] = []
        self.sums, self.nans, self.pinfs, self.ninfs = [0.0], [0], [0], [0]
        self.last_time = -math.inf
        self.best: float | None = None

    def add(self, time: float, value: float) -> None:
        self.last_time = time
        if not math.isnan(value) and (
            self.best is None or (value > self.best if self.mode == "max" else value < self.best)
        ):
            self.best = value
        if not self.times or time >= self.times[-1]:
            self.pairs.append((time, value))
            self._append(time, value)
            return
        bisect.insort(self.pairs, (time, value))  # out of time order (rare): rebuild the prefixes
        self.times, self.sums, self.nans, self.pinfs, self.ninfs = [], [0.0], [0], [0], [0]
        for t, v in self.pairs:
            self._append(t, v)

    def _append(self, time: float, value: float) -> None:
        self.times.append(time)
        self.sums.append(self.sums[-1] + (value if math.isfinite(value) else 0.0))
        self.nans.append(self.nans[-1] + math.isnan(value))
        self.pinfs.append(self.pinfs[-1] + (value == math.inf))
        self.ninfs.append(self.ninfs[-1] + (value == -math.inf))

    def mean(self, start: float, end: float) -> float:
        """Mean of the values with time in ``[start, end]``; NaN when there are none (or NaN among them,
        or both infinities), as ``statistics.fmean`` gives it (up to rounding of the prefix sums)."""
        lo, hi = bisect.bisect_left(self.times, start), bisect.bisect_right(self.times, end)
        if hi <= lo or self.nans[hi] > self.nans[lo]:
            return math.nan
        pinf, ninf = self.pinfs[hi] > self.pinfs[lo], self.ninfs[hi] > self.ninfs[lo]
        if pinf or ninf:
            return math.nan if pinf and ninf else (math.inf if pinf else -math.inf)
        return (self.sums[hi] - self.sums[lo]) / (hi - lo)
