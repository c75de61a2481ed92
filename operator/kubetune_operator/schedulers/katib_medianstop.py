"""The ``katib-medianstop`` scheduler: Katib's ``medianstop`` early stopping, as Katib decides it.

Owns :class:`KatibMedianStop`. Katib's rule, from its ``medianstop`` service
(``pkg/earlystopping/v1beta1/medianstop/service.py``) and its metrics collector's
``updateStopRules`` (``cmd/metricscollector/v1beta1/file-metricscollector/main.go``), Katib 0.19:

- when a trial is created, it gets a stop rule once at least ``min_trials_required`` trials have
  succeeded: the arithmetic **mean** (the service calls it the median) of each succeeded trial's
  average over its first ``start_step`` reports of the objective; before that, a trial gets no rule
  and runs to its end;
- a trial with a rule is judged once, at its ``start_step``-th report of the objective: it stops when
  its best value so far is worse than the rule (greater for ``min``, less for ``max``; a tie
  continues), and is never judged again;
- a trial stopped by the rule (Katib's ``EarlyStopped``) or that failed does not count as succeeded.

Differences from Katib, in corner cases: a trial that succeeded with no report of the objective adds
nothing to the mean (Katib's service divides by zero there), and a report is a result that carries the
metric (Katib counts each ``name=value`` line). Used by the Katib Experiments kubetune serves and
converts (``kubetune.sdk.katib_convert``); created through ``kubetune_operator.algorithms.create_scheduler``.
"""

from __future__ import annotations

from kubetune.resultkeys import check_mode, is_number
from kubetune_operator.params import Count, checked
from kubetune_operator.schedulers.base import CONTINUE, STOP, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["KatibMedianStop"]


class KatibMedianStop(TrialScheduler):
    """Stop a trial whose best value at its ``start_step``-th report is worse than the mean of the succeeded
    trials' averages over their first ``start_step`` reports (Katib's ``medianstop``; module docstring).

    Args:
        metric, mode: required (Katib's ``objectiveMetricName`` and objective ``type``).
        min_trials_required: succeeded trials needed before a new trial gets a rule (Katib's default 3).
        start_step: the report, counted from 1, at which a trial is judged; also how many of a succeeded
            trial's first reports its average takes (Katib's default 4).

    Raises:
        ValueError: missing metric or mode, or a setting below 1 (Katib's own checks).

    The state holds at most ``start_step`` values per trial: a few dozen bytes of JSON each.
    """

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        min_trials_required: Count = 3,
        start_step: Count = 4,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        self.min_trials_required, self.start_step = min_trials_required, start_step
        self._first: dict[str, list[float]] = {}  # trial -> its first start_step values of the metric
        self._averages: dict[str, float] = {}  # succeeded trial -> the mean of its first values
        self._rules: dict[str, float | None] = {}  # trial -> the rule it was created with (None: no rule)
        self._reports: dict[str, int] = {}  # trial with a rule, not yet judged -> reports of the metric so far
        self._best: dict[str, float] = {}  # trial with a rule, not yet judged -> its best value so far
        self._stopped: set[str] = set()

    def _rule(self) -> float | None:
        if len(self._averages) < self.min_trials_required:
            return None
        return sum(self._averages.values()) / len(self._averages)

    def on_trial_add(self, trial_id: str) -> None:
        """Give the new trial the rule in force now (None before ``min_trials_required`` trials succeeded)."""
        rule = self._rules[trial_id] = self._rule()
        self._first.setdefault(trial_id, [])
        if rule is not None:
            self._reports[trial_id] = 0

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """STOP at the ``start_step``-th report of a trial whose best value is worse than its rule; else CONTINUE
        (results without the metric too). O(1)."""
        if trial_id not in self._rules:
            self.on_trial_add(trial_id)
        value = result.get(self.metric)
        if trial_id in self._stopped or not is_number(value):
            return CONTINUE
        value = float(value)
        first = self._first[trial_id]
        if len(first) < self.start_step:
            first.append(value)
        if trial_id not in self._reports:
            return CONTINUE
        best = self._best.get(trial_id)
        # Katib keeps the first value, then any strictly better one (so a NaN first value stays)
        if best is None or (value > best if self.mode == "max" else value < best):
            self._best[trial_id] = best = value
        self._reports[trial_id] += 1
        if self._reports[trial_id] < self.start_step:
            return CONTINUE
        del self._reports[trial_id], self._best[trial_id]
        rule = self._rules[trial_id]
        if best < rule if self.mode == "max" else best > rule:
            self._stopped.add(trial_id)
            return STOP
        return CONTINUE

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        """A trial the rule did not stop succeeded: its average joins the mean (when it reported the metric)."""
        self._reports.pop(trial_id, None)
        self._best.pop(trial_id, None)
        first = self._first.get(trial_id)
        if trial_id not in self._stopped and first:
            self._averages[trial_id] = sum(first) / len(first)

    def on_trial_remove(self, trial_id: str) -> None:
        """A failed or removed trial never counts as succeeded."""
        self._reports.pop(trial_id, None)
        self._best.pop(trial_id, None)

    def get_state(self) -> dict:
        """``{"first", "averages", "rules", "reports", "best", "stopped"}``, numbers encoded as strict JSON."""

        def enc(value: float | None):
            return None if value is None else encode_number(value)

        return {
            "first": {t: [encode_number(v) for v in values] for t, values in self._first.items()},
            "averages": {t: encode_number(v) for t, v in self._averages.items()},
            "rules": {t: enc(v) for t, v in self._rules.items()},
            "reports": dict(self._reports),
            "best": {t: encode_number(v) for t, v in self._best.items()},
            "stopped": sorted(self._stopped),
        }

    def set_state(self, state: dict) -> None:
        def dec(value) -> float | None:
            return None if value is None else float(decode_number(value))

        self._first = {t: [float(decode_number(v)) for v in values] for t, values in state["first"].items()}
        self._averages = {t: float(decode_number(v)) for t, v in state["averages"].items()}
        self._rules = {t: dec(v) for t, v in state["rules"].items()}
        self._reports = dict(state["reports"])
        self._best = {t: float(decode_number(v)) for t, v in state["best"].items()}
        self._stopped = set(state["stopped"])
