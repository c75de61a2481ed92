"""The ``hyperband`` scheduler: synchronous HyperBand (Ray's ``HyperBandScheduler``).

Owns :class:`HyperBandScheduler` and its brackets. Algorithm: Li et al.,
"Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization"
(JMLR 2018); bracket order and sizes, rungs, pausing and halving as Ray Tune 2.x
``schedulers/hyperband.py``. Created through
``kubetune_operator.algorithms.create_scheduler``.

Trials pause at the end of their rung; when every trial of the bracket has
reached it, the best ``ceil(n / reduction_factor)`` are promoted (the operator
resumes them through :meth:`HyperBandScheduler.choose_trial_to_run`) and the
others end (:meth:`HyperBandScheduler.trials_to_stop`). A bracket takes ``n0``
trials in creation order. Ray creates pending trials ahead and counts them in a
rung (a pending trial has not reached it), so a rung waits for the whole
bracket unless the searcher runs out; kubetune creates a trial when a slot
frees up, so it waits, the same way, until ``n0`` trials joined the bracket or
the searcher is finished (the operator says so through
``choose_trial_to_run(..., search_finished=True)``).
"""

from __future__ import annotations

import math
from typing import Annotated, Sequence

from pydantic import Field

from kubetune.resultkeys import check_mode, is_number
from kubetune_operator.params import Flag, Number, checked
from kubetune_operator.schedulers.base import CONTINUE, PAUSE, STOP, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["HyperBandScheduler"]


class _Bracket:
    """One successive-halving run: ``n`` trials for ``r`` time units, ``halves`` halvings left."""

    def __init__(self, n0: int, r0: int, halves: int, max_t: int, eta: float, stop_last_trials: bool):
        self.n0, self.r0, self.n, self.r, self.cumul_r, self.halves = n0, r0, n0, r0, r0, halves
        self.max_t, self.eta, self.stop_last_trials = max_t, eta, stop_last_trials
        self.live: dict[str, list] = {}  # trial_id -> [time, sign-adjusted value or None]
        self.added = 0
        self.promoted: list[str] = []
        self.stopped: list[str] = []
        self.closed = False  # no more trials will come (the searcher is finished)

    def filled(self) -> bool:
        """``n0`` trials joined, or no more will come."""
        return self.closed or self.added >= self.n0

    def add(self, trial_id: str) -> None:
        self.live[trial_id] = [0, None]
        self.added += 1

    def cur_iter_done(self) -> bool:
        return all(time >= self.cumul_r for time, _ in self.live.values())

    def finished(self) -> bool:
        return self.stop_last_trials and self.halves == 0 and self.cur_iter_done()

    def continue_trial(self, trial_id: str) -> bool:
        if not self.stop_last_trials and self.halves == 0:
            return True
        return self.live[trial_id][0] < self.cumul_r

    def next_rung(self, r: int) -> int:
        """The rung after ``r``: Ray 2.x's rule, ``r * eta`` capped at ``max_t`` (Ray 0.8.7 capped it at
        ``max_t - r``, which left the 1-iteration bracket of max_t 81 at 54; Ray fixed that)."""
        return int(min(r * self.eta, self.max_t))

    def successive_halving(self) -> list[str]:
        """Advance one rung; return the trials that did not make it (removed from ``live``)."""
        self.halves -= 1
        self.n = math.ceil(self.n / self.eta)
        self.r = self.next_rung(self.r)
        self.cumul_r = self.r

        def score(trial_id: str) -> float:
            value = self.live[trial_id][1]
            return -math.inf if value is None or math.isnan(value) else value

        ranked = sorted(self.live, key=score)  # stable: ties keep arrival order
        bad = ranked[: -self.n] if len(ranked) > self.n else []
        for trial_id in bad:
            del self.live[trial_id]
        return bad

    def to_json(self) -> dict:
        return {
            "n0": self.n0,
            "r0": self.r0,
            "n": self.n,
            "r": self.r,
            "cumul_r": self.cumul_r,
            "halves": self.halves,
            "live": {t: [encode_number(x), encode_number(v)] for t, (x, v) in self.live.items()},
            "added": self.added,
            "promoted": list(self.promoted),
            "stopped": list(self.stopped),
            "closed": self.closed,
        }

    def load(self, data: dict) -> None:
        self.n0, self.r0, self.n, self.r = data["n0"], data["r0"], data["n"], data["r"]
        self.cumul_r, self.halves, self.added = data["cumul_r"], data["halves"], data["added"]
        self.closed = data["closed"]
        self.live = {t: [decode_number(x), decode_number(v)] for t, (x, v) in data["live"].items()}
        self.promoted, self.stopped = list(data["promoted"]), list(data["stopped"])


class HyperBandScheduler(TrialScheduler):
    """HyperBand over brackets of successive halving, trials paused between rungs.

    With ``s_max = round(log(max_t) / log(reduction_factor))``, bands of
    ``s_max + 1`` brackets are filled in turn, as Ray fills them: bracket ``s``
    (from 0 up to ``s_max``) takes ``n = ceil((s_max + 1) / (s + 1) * reduction_factor**s)``
    trials run for ``r = int(max_t * reduction_factor**-s)`` first (defaults: (5, 81),
    (8, 27), (15, 9), (34, 3), (81, 1)); a bracket whose ``r`` would be 0 is skipped.
    At each rung the best ``ceil(n / reduction_factor)`` continue to the next rung,
    ``min(r * reduction_factor, max_t)`` (Ray 2.x's rule); after the last rung the
    bracket's trials stop (``stop_last_trials``).

    Args:
        metric, mode: required.
        time_attr: result key measuring progress (``training_iteration``).
        max_t: the longest a trial runs, in ``time_attr`` units (81).
        reduction_factor: η (3).
        stop_last_trials: stop trials at the last rung (True); else they run on.

    Raises:
        ValueError: missing metric/mode, ``max_t < 1`` or ``reduction_factor <= 1``.
    """

    #: Fill a band's brackets from the largest (most halvings) down, as Ray's ``HyperBandForBOHB``.
    largest_first = False

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "training_iteration",
        max_t: Annotated[Number, Field(ge=1)] = 81,
        reduction_factor: Annotated[Number, Field(gt=1)] = 3,
        stop_last_trials: Flag = True,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        self.time_attr, self.max_t, self.eta = time_attr, max_t, reduction_factor
        self.stop_last_trials = stop_last_trials
        self._s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self._bands: list[list[_Bracket | None]] = []
        self._trial_info: dict[str, tuple[int, int]] = {}
        self._current: tuple[int, int] | None = None

    def _bracket(self, where: tuple[int, int]) -> _Bracket:
        return self._bands[where[0]][where[1]]

    def _new_bracket(self) -> tuple[int, int]:
        while True:
            if not self._bands or len(self._bands[-1]) == self._s_max_1:
                self._bands.append([])
            band = self._bands[-1]
            s = self._s_max_1 - 1 - len(band) if self.largest_first else len(band)
            r0 = int(self.max_t * self.eta**-s)
            if r0 == 0:  # bracket too small for this max_t: skipped, as in Ray
                band.append(None)
                continue
            n0 = math.ceil(self._s_max_1 / (s + 1) * self.eta**s)
            band.append(_Bracket(n0, r0, s, self.max_t, self.eta, self.stop_last_trials))
            return len(self._bands) - 1, len(band) - 1

    def brackets(self) -> list[tuple[int, int]]:
        """``(n, r)`` of every bracket created so far, in creation order: its trial count and first rung."""
        return [(b.n0, b.r0) for band in self._bands for b in band if b is not None]

    def on_trial_add(self, trial_id: str) -> None:
        if trial_id in self._trial_info:
            return
        if self._current is None or self._bracket(self._current).filled():
            self._current = self._new_bracket()
        self._bracket(self._current).add(trial_id)
        self._trial_info[trial_id] = self._current

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE below the rung; at it PAUSE until the rung is judged, then CONTINUE or STOP."""
        if not result or not is_number(result.get(self.time_attr)) or not is_number(result.get(self.metric)):
            return CONTINUE
        self.on_trial_add(trial_id)
        bracket = self._bracket(self._trial_info[trial_id])
        if trial_id not in bracket.live:
            return STOP  # judged out while its last result was on the way
        bracket.live[trial_id] = [result[self.time_attr], self._metric_op * result[self.metric]]
        if bracket.continue_trial(trial_id):
            return CONTINUE
        self._process(bracket)
        if trial_id not in bracket.live:
            return STOP
        return CONTINUE if bracket.continue_trial(trial_id) else PAUSE

    def _process(self, bracket: _Bracket) -> None:
        """Judge every rung whose trials have all arrived.

        The trial whose result completes a rung is answered directly, and listed among the stopped
        or promoted trials too: a runtime applies an answer a step late and keeps the first stop or
        pause it gets, so it may already be pausing on an earlier answer, and a paused trial is ended
        or resumed only through those lists.
        """
        halved = False
        while bracket.live and bracket.filled() and bracket.cur_iter_done():
            if bracket.finished():
                bracket.stopped += list(bracket.live)
                bracket.live.clear()
                bracket.promoted = []
                return
            if bracket.halves == 0:  # stop_last_trials=False: the last rung runs on
                break
            bracket.stopped += bracket.successive_halving()
            halved = True
        if halved:
            bracket.promoted = [t for t in bracket.live if bracket.continue_trial(t)]

    def _forget(self, trial_id: str) -> None:
        where = self._trial_info.pop(trial_id, None)
        if where is None:
            return
        bracket = self._bracket(where)
        bracket.live.pop(trial_id, None)
        if trial_id in bracket.promoted:
            bracket.promoted.remove(trial_id)
        # a judged-out trial stays in ``stopped``: an operator killed after journaling its end but before
        # the Trial showed it finds it paused still, and ends it again (``trials_to_stop`` lists paused ones)
        self._process(bracket)

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        self._forget(trial_id)

    def on_trial_remove(self, trial_id: str) -> None:
        self._forget(trial_id)

    def choose_trial_to_run(self, paused_ids: Sequence[str], search_finished: bool = False) -> str | None:
        """A paused trial promoted to the next rung and still short of it, or None;
        ``search_finished`` closes unfilled brackets (no more trials will join them)."""
        brackets = [b for band in self._bands for b in band if b is not None]
        if search_finished:
            for bracket in brackets:
                if not bracket.closed:
                    bracket.closed = True
                    self._process(bracket)
        paused = set(paused_ids)
        for bracket in brackets:
            for trial_id in bracket.promoted:
                # still short of its next rung: a trial that paused there again waits for that rung.
                # A chosen trial stays listed (it is no longer paused once resumed): an operator killed
                # after journaling this call but before the Trial showed the resume chooses it again.
                if trial_id in paused and bracket.continue_trial(trial_id):
                    return trial_id
        return None

    def trials_to_stop(self, paused_ids: Sequence[str]) -> list[str]:
        """Paused trials judged out at a rung (or at the end of their bracket)."""
        paused = set(paused_ids)
        return [t for band in self._bands for b in band if b is not None for t in b.stopped if t in paused]

    def get_state(self) -> dict:
        """Brackets (trials with their latest time and value), trial placement, current bracket; strict JSON."""
        return {
            "bands": [[None if b is None else b.to_json() for b in band] for band in self._bands],
            "trials": {t: list(w) for t, w in self._trial_info.items()},
            "current": None if self._current is None else list(self._current),
        }

    def set_state(self, state: dict) -> None:
        self._bands = []
        for band in state["bands"]:
            self._bands.append([])
            for data in band:
                bracket = None
                if data is not None:
                    bracket = _Bracket(0, 0, 0, self.max_t, self.eta, self.stop_last_trials)
                    bracket.load(data)
                self._bands[-1].append(bracket)
        self._trial_info = {t: (w[0], w[1]) for t, w in state["trials"].items()}
        self._current = None if state["current"] is None else tuple(state["current"])
