"""The ``hyperband_bohb`` scheduler: HyperBand as BOHB runs it (Ray's ``HyperBandForBOHB``).

Owns :class:`HyperBandForBOHB`. Falkner et al., "BOHB: Robust and Efficient Hyperparameter Optimization at
Scale" (ICML 2018) pairs HyperBand's brackets with a model-based searcher (the ``bohb`` search algorithm,
:mod:`kubetune_operator.searchers.bohb`). As Ray 2.x's ``schedulers/hb_bohb.py`` runs it, the differences
from :class:`~kubetune_operator.schedulers.hyperband.HyperBandScheduler` are:

- a band's brackets fill from the largest down (defaults: ``(81, 1)``, ``(34, 3)``, ``(15, 9)``, ``(8, 27)``,
  ``(5, 81)``), so the first trials are many cheap ones the searcher's model learns from;
- a trial that reaches its rung pauses until every trial of its bracket is there (kubetune's HyperBand
  already waits so, see its module), then the best ``ceil(n / reduction_factor)`` continue;
- each result at a rung is handed to the searcher with the rung as its budget (Ray adds
  ``result["hyperband_info"]["budget"]``): the controller takes it through :meth:`HyperBandForBOHB.take_budget`
  right after :meth:`HyperBandForBOHB.on_trial_result` and calls the searcher's ``on_trial_result`` with that
  result and ``hyperband_info``. The budget is a function of the results fed, so a journal replay hands the
  searcher the same budgets.

Created through ``kubetune_operator.algorithms.create_scheduler``. Pure Python: no kopf, no Kubernetes imports.
"""

from __future__ import annotations

from functools import cached_property

from kubetune.resultkeys import is_number
from kubetune_operator.schedulers.hyperband import HyperBandScheduler

__all__ = ["HyperBandForBOHB"]


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand whose brackets fill from the largest down, reporting each rung result's budget.

    Same arguments, defaults and errors as :class:`~kubetune_operator.schedulers.hyperband.HyperBandScheduler`
    (``metric``, ``mode``, ``time_attr``, ``max_t``, ``reduction_factor``, ``stop_last_trials``).
    """

    largest_first = True

    @cached_property
    def _budgets(self) -> dict[str, int | float]:
        """Trial -> the rung its last result reached, until taken (not state: taken in the same journaled call)."""
        return {}

    def rungs(self, where: tuple[int, int]) -> list[int]:
        """The rungs (``time_attr`` units) of the bracket at ``where`` (band, position), in order: its ``r0``, then
        the bracket's next rung (``min(r * reduction_factor, max_t)``) once per halving; without
        ``stop_last_trials`` the last one, which Ray's trials run past without a budget, is left out."""
        bracket = self._bracket(where)
        rungs = [bracket.r0]
        for _ in range(self._s_max_1 - 1 - where[1]):  # the bracket's halvings (largest first: position 0 has most)
            rungs.append(bracket.next_rung(rungs[-1]))
        return rungs if self.stop_last_trials else rungs[:-1]

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """HyperBand's decision; a result that reaches one of its bracket's rungs (the trial's first at or past
        it) also leaves that rung for :meth:`take_budget`.

        Ray's trials pause at each rung until it is judged, so the first result there is the only one. A kubetune
        trial whose pause came late (its pod runs on while the operator is unreachable) reports results past the
        rung first: each rung it passes is its budget once, judged or not yet, with the result that reached it.
        """
        self._budgets.pop(trial_id, None)
        if result and is_number(result.get(self.time_attr)) and is_number(result.get(self.metric)):
            self.on_trial_add(trial_id)
            where = self._trial_info[trial_id]
            live = self._bracket(where).live.get(trial_id)
            if live is not None:
                t = result[self.time_attr]
                reached = [r for r in self.rungs(where) if live[0] < r <= t]
                if reached:
                    self._budgets[trial_id] = reached[-1]
        return super().on_trial_result(trial_id, result)

    def take_budget(self, trial_id: str) -> int | float | None:
        """The rung (in ``time_attr`` units) that the last result of ``trial_id`` given to
        :meth:`on_trial_result` reached, once; None when it reached none."""
        return self._budgets.pop(trial_id, None)
