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

import math

import numpy as np

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
    per trial)) in NumPy, all peers at once: each peer's running mean comes from prefix sums.
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
        self._table = _Table(mode, grace_period)
        self._stopped: set[str] = set()

    def _record(self, trial_id: str, result: dict | None) -> bool:
        if not result or not is_number(result.get(self.time_attr)) or not is_number(result.get(self.metric)):
            return False
        self._add(trial_id, result[self.time_attr], result[self.metric])
        return True

    def _add(self, trial_id: str, time: float, value: float) -> None:
        self._results.setdefault(trial_id, []).append([encode_number(time), encode_number(value)])  # as get_state gives
        self._table.add(trial_id, time, value, self._results[trial_id])

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE, or STOP/PAUSE for a trial worse than the median; unusable results CONTINUE.

        Cost: O(trials x log(results per trial)).
        """
        if trial_id in self._stopped or not self._record(trial_id, result):
            return CONTINUE
        time = result[self.time_attr]
        if time < self.grace_period:
            return CONTINUE
        means = self._table.peer_means(trial_id, time)
        best = self._table.best[self._table.rows[trial_id]]
        if len(means) < self.min_samples_required or best is None:
            return CONTINUE
        with np.errstate(invalid="ignore"):  # +inf and -inf in the middle: NaN, as statistics.median gives
            median = float(np.median(means))
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
        self._results, self._table = {}, _Table(self.mode, self.grace_period)
        for trial_id, results in state["results"].items():
            for time, value in results:
                self._add(trial_id, decode_number(time), decode_number(value))
        self._stopped = set(state["stopped"])


class _Table:
    """Every trial's ``(time, value)`` results as rows of NumPy arrays, so that a decision computes the running
    means of all peers at once (a vectorized binary search per row) instead of one at a time.

    Row ``r`` holds its times sorted (padded with +inf), prefix sums of its finite values and prefix counts of
    NaN, +inf and -inf; ``grace`` is the index of its first time ``>= grace_period``. Rows are as wide as the
    longest (about 28 bytes per cell). A result out of time order (rare) rebuilds its row. ``best`` is each
    trial's best value so far (NaN never is).
    """

    def __init__(self, mode: str, grace_period: float):
        self.mode, self.grace_period = mode, grace_period
        self.rows: dict[str, int] = {}
        self.best: list[float | None] = []
        self.length = np.zeros(8, dtype=np.int64)
        self.grace = np.zeros(8, dtype=np.int64)
        self.last = np.full(8, -np.inf)
        self.times = np.full((8, 8), np.inf)
        self.sums = np.zeros((8, 9))
        self.odd = np.zeros((3, 8, 9), dtype=np.int32)  # prefix counts of NaN, +inf, -inf
        self.any_odd = False  # no NaN or infinity so far: means need no check for them

    def _grow(self, rows: int, width: int) -> None:
        """Room for ``rows`` rows of ``width`` results (doubling, so appends cost O(1) amortized)."""
        old_rows, old_width = self.times.shape
        if rows <= old_rows and width <= old_width:
            return
        new_rows = old_rows if rows <= old_rows else max(rows, 2 * old_rows)
        new_width = old_width if width <= old_width else max(width, 2 * old_width)
        times = np.full((new_rows, new_width), np.inf)
        times[:old_rows, :old_width] = self.times
        sums = np.zeros((new_rows, new_width + 1))
        sums[:old_rows, : old_width + 1] = self.sums
        odd = np.zeros((3, new_rows, new_width + 1), dtype=np.int32)
        odd[:, :old_rows, : old_width + 1] = self.odd
        self.times, self.sums, self.odd = times, sums, odd
        if new_rows > old_rows:
            self.length = np.concatenate([self.length, np.zeros(new_rows - old_rows, dtype=np.int64)])
            self.grace = np.concatenate([self.grace, np.zeros(new_rows - old_rows, dtype=np.int64)])
            self.last = np.concatenate([self.last, np.full(new_rows - old_rows, -np.inf)])

    def add(self, trial_id: str, time: float, value: float, results: list[list]) -> None:
        """Add ``trial_id``'s result; ``results`` are all of its results so far, this one last, encoded (the
        row is rebuilt from them when this one is out of time order)."""
        row = self.rows.get(trial_id)
        if row is None:
            row = self.rows[trial_id] = len(self.best)
            self.best.append(None)
            self._grow(row + 1, 1)
        best = self.best[row]
        if not math.isnan(value) and (best is None or (value > best if self.mode == "max" else value < best)):
            self.best[row] = value
        self.last[row] = time
        n = int(self.length[row])
        if n and time < self.times[row, n - 1]:
            self.length[row] = self.grace[row] = 0
            pairs = [(decode_number(t), decode_number(v)) for t, v in results]
            for t, v in sorted(pairs, key=lambda pair: pair[0]):  # by time; ties in arrival order
                self._append(row, t, v)
            return
        self._append(row, time, value)

    def _append(self, row: int, time: float, value: float) -> None:
        n = int(self.length[row])
        self._grow(row + 1, n + 1)
        self.times[row, n] = time
        self.sums[row, n + 1] = self.sums[row, n] + (value if math.isfinite(value) else 0.0)
        kinds = (math.isnan(value), value == math.inf, value == -math.inf)
        for k, hit in enumerate(kinds):
            self.odd[k, row, n + 1] = self.odd[k, row, n] + hit
        self.any_odd |= any(kinds)
        self.length[row] = n + 1
        if time < self.grace_period:
            self.grace[row] = n + 1

    def peer_means(self, trial_id: str, time: float) -> np.ndarray:
        """The running means over ``[grace_period, time]`` of every other trial whose latest result has time
        ``>= time``, leaving out those with none (or NaN) there, as ``statistics.fmean`` gives them (up to
        rounding of the prefix sums)."""
        count = len(self.best)
        peers = np.flatnonzero(self.last[:count] >= time)
        peers = peers[peers != self.rows[trial_id]]
        lo, hi = self.grace[peers], self.length[peers]
        low = lo  # binary search, all peers at once: hi becomes how many of each row's times are <= time
        while True:
            open_ = low < hi
            if not open_.any():
                break
            mid = (low + hi) >> 1
            right = self.times[peers, np.minimum(mid, self.times.shape[1] - 1)] <= time
            low = np.where(open_ & right, mid + 1, low)
            hi = np.where(open_ & ~right, mid, hi)
        n = hi - lo
        keep = n > 0
        peers, lo, hi, n = peers[keep], lo[keep], hi[keep], n[keep]
        means = (self.sums[peers, hi] - self.sums[peers, lo]) / n
        if self.any_odd:
            nans, pinfs, ninfs = (self.odd[k, peers, hi] > self.odd[k, peers, lo] for k in range(3))
            means = np.where(pinfs, np.inf, means)
            means = np.where(ninfs, np.where(pinfs, np.nan, -np.inf), means)
            means = means[~(nans | np.isnan(means))]
        return means
