"""The trials of one Experiment: their state, which of them a pass looks at, and what retired ones leave.

Owns :class:`TrialState` (the operator's view of one Trial: its spec essentials and the status it owns) and
:class:`TrialBook`: every trial by name and by its pods' label, the open ones (a trial retires once it is
terminal and its status written, its count and its bid for best trial kept, so a pass costs O(open trials)),
the indices below the highest whose Trial is missing, and the trial counts, best trial and Pareto front the
Experiment's status shows. Called by the controller (:class:`kubetune_operator.controller.ExperimentController`)
and the objects it is made of (decisions, lifecycle, admission, status projection). Pure: no API calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from . import status as st
from .labels import label_value
from .podinput import is_iteration
from .spec_intake import SpecIntake

#: The phases a trial ends in.
TERMINAL = ("Succeeded", "Failed")


@dataclass
class TrialState:
    """The operator's view of one Trial: its spec essentials and the status it owns."""

    name: str
    index: int
    config: dict  # the current config: the spec's, or the last PBT exploit's (status.config)
    status: dict = field(default_factory=dict)
    uid: str | None = None
    spec_config: dict | None = None  # the spec's config, when ``config`` is an exploit's
    restore_from: str | None = None  # the checkpoint of the trial's current lineage (status.restoreFrom)
    pbt_policy: list | None = None  # the policy line of the exploit its next pod carries out (not kept on restart)
    tag: str | None = None  # spec.tag: Ray's experiment_tag, which a trial_name_creator may read
    dirty: bool = False
    written_at: float = 0.0
    phase_changed: bool = False
    written: dict = field(default_factory=dict)
    write_failures: int = 0  # status writes refused or failed in a row
    write_error: str | None = None  # what the API server said to the last one

    @property
    def phase(self) -> str:
        return self.status.get("phase") or "Pending"

    @property
    def attempt(self) -> int:
        return int(self.status.get("attempt") or 0)

    @property
    def created_config(self) -> dict:
        """The config the Trial was created with: the spec's, also once a PBT exploit replaced ``config``."""
        return self.spec_config if self.spec_config is not None else self.config

    def as_object(self) -> dict:
        return {
            "metadata": {"name": self.name},
            "spec": {"index": self.index, "config": self.config},
            "status": self.status,
        }


class TrialBook:
    """Every trial of one Experiment, and the open ones a pass looks at.

    Args:
        intake: the Experiment's spec in force (the metric and mode that rank trials).
    """

    def __init__(self, intake: SpecIntake):
        self.intake = intake
        self.trials: dict[str, TrialState] = {}
        self.open: dict[str, TrialState] = {}  # not retired: every trial a pass looks at
        self.by_label: dict[str, TrialState] = {}  # every trial, by its pods' trial label
        self.retired_counts = st.trial_counts(())
        self.retired_best: TrialState | None = None
        self.retired_front: list[TrialState] = []  # the retired trials on the Pareto front (several objectives)
        self.missing: set[int] = set()  # trial indices below the highest whose Trial is not in the API
        self.next_index = 0  # one more than the highest trial index created or seen

    def observe(self, trial: Mapping) -> None:
        """Adopt a Trial seen in the API (after a restart, or created by us); our own status wins once known."""
        name = trial["metadata"]["name"]
        state = self.trials.get(name)
        if state is None:
            spec = trial.get("spec") or {}
            written = dict(trial.get("status") or {})
            status = {"phase": "Pending", "attempt": 0, **written}  # created, but its first status not written
            config = dict(spec.get("config") or {})
            self.add(
                TrialState(
                    name,
                    int(spec.get("index", 0)),
                    dict(status.get("config") or config),
                    status,
                    trial["metadata"].get("uid"),
                    written=written,
                    dirty=status != written,
                    phase_changed=status != written,
                    spec_config=config,
                    restore_from=status.get("restoreFrom"),
                    tag=spec.get("tag"),
                )
            )
            self.next_index = max(self.next_index, self.trials[name].index + 1)
        elif state.uid is None:
            state.uid = trial["metadata"].get("uid")

    def created(self, trial: TrialState) -> None:
        """``trial`` is new: the admission asked for its Trial in this pass."""
        self.add(trial)
        self.next_index = max(self.next_index, trial.index + 1)
        self.missing.discard(trial.index)

    def uid_known(self, name: str, uid: str) -> None:
        """Trial ``name`` exists in the API with ``uid``."""
        self.trials[name].uid = uid

    def forget(self, name: str) -> None:
        """The create of Trial ``name`` failed: its index is asked for again (with the same config)."""
        trial = self.trials.pop(name, None)
        if trial is not None:
            self.open.pop(name, None)
            self.by_label.pop(label_value(name), None)
            self.missing.add(trial.index)

    def find_missing(self) -> None:
        """Note the indices below the highest whose Trial is not in the book (their creates failed before a
        restart): they are asked for again."""
        highest = max((t.index for t in self.trials.values()), default=-1)
        self.missing = set(range(highest + 1)) - {t.index for t in self.trials.values()}

    def reopen(self, trial: TrialState) -> None:
        """Open ``trial`` again (its status must be written once more) if it had retired."""
        if trial.name not in self.open:
            self.open[trial.name] = trial
            self.tally_retired(trial, -1)

    def reopen_all(self) -> None:
        """Open every trial again: the metric or mode changed, so what retired ones left is ranked anew."""
        self.open, self.retired_counts, self.retired_best = dict(self.trials), st.trial_counts(()), None
        self.retired_front = []

    def add(self, trial: TrialState) -> None:
        """Keep ``trial``, open."""
        self.trials[trial.name] = self.open[trial.name] = self.by_label[label_value(trial.name)] = trial

    def best(self) -> dict | None:
        """The best Trial by ``metric``/``mode`` as :func:`status.best_trial` gives it; None without a metric
        and mode or before any Trial reports the metric."""
        if not self.intake.metric or not self.intake.mode or self.intake.spec.multi_objective:
            return None
        bids = [t.as_object() for t in self.open.values()]
        if self.retired_best is not None:
            bids.append(self.retired_best.as_object())
        return st.best_trial(bids, self.intake.metric, self.intake.mode, self.intake.spec.best_trial_scope)

    def pareto(self) -> list[dict]:
        """The Pareto front of a multi-objective Experiment as :func:`status.pareto_front` gives it (the open
        trials and the retired ones on the front: a trial a retired one dominates is dominated by one on it);
        empty for one objective."""
        if not self.intake.spec.multi_objective:
            return []
        bids = {t.name: t for t in [*self.retired_front, *self.open.values()]}  # a re-opened one counts once
        return st.pareto_front([t.as_object() for t in bids.values()], self.intake.metric, self.intake.mode)

    def counts(self) -> dict[str, int]:
        """:func:`status.trial_counts` of every trial: the retired ones' kept counts plus the open ones'."""
        counts = st.trial_counts(t.phase for t in self.open.values())
        return {key: value + self.retired_counts[key] for key, value in counts.items()}

    def tally_retired(self, trial: TrialState, change: int) -> None:
        """Add ``change`` (+1 retiring, -1 opened again) to the retired trials' counts for ``trial``'s phase."""
        self.retired_counts[trial.phase.lower()] += change
        self.retired_counts["total"] += change

    def retire(self) -> None:
        """Retire the open trials that are terminal with their status written (see ``_open``)."""
        retiring = [t for t in self.open.values() if t.phase in TERMINAL and not t.dirty and t.uid is not None]
        for trial in retiring:
            del self.open[trial.name]
            self.tally_retired(trial, +1)
        if retiring and self.intake.spec.multi_objective:
            bids = {t.name: t.as_object() for t in self.retired_front + retiring}
            front = st.pareto_front(bids.values(), self.intake.metric, self.intake.mode)
            self.retired_front = [self.trials[p["trial"]] for p in front]
        elif retiring and self.intake.metric and self.intake.mode:
            bids = [t.as_object() for t in retiring + ([self.retired_best] if self.retired_best else [])]
            best = st.best_trial(bids, self.intake.metric, self.intake.mode, self.intake.spec.best_trial_scope)
            if best is not None:
                self.retired_best = self.trials[best["name"]]

    def show_result(self, trial: TrialState, result: dict) -> None:
        """Show ``result`` as ``trial``'s latest (``lastResult``, ``iteration``, ``metricValue``)."""
        trial.status["lastResult"] = st.compact_result(result, self.intake.metric)
        iteration = result.get("training_iteration")  # checked by the collector; not by an older journal
        trial.status["iteration"] = iteration if is_iteration(iteration) else None
        value = st.metric_value(result, self.intake.metric) if isinstance(self.intake.metric, str) else None
        if value is not None:
            trial.status["metricValue"] = value
        trial.dirty = True

    def widen_range(self, trial: TrialState, results: list[dict]) -> bool:
        """Take ``results`` into ``trial``'s ``status.metricRange`` (:func:`kubetune_operator.status.widen_range`),
        kept only for ``spec.bestTrialScope: all``; return whether it changed."""
        if self.intake.spec.best_trial_scope != "all" or not results:
            return False
        return self._show_range(trial, st.widen_range(trial.status.get("metricRange"), results, self.intake.metric))

    def merge_range(self, trial: TrialState, ranges: dict) -> bool:
        """Take a range of ``trial``'s results kept elsewhere (a journal snapshot's) into its ``status.metricRange``
        (:func:`kubetune_operator.status.merge_ranges`); return whether it changed."""
        return self._show_range(trial, st.merge_ranges(trial.status.get("metricRange"), ranges))

    def _show_range(self, trial: TrialState, ranges: dict) -> bool:
        if ranges == trial.status.get("metricRange"):
            return False
        trial.status["metricRange"] = ranges  # a new object: the status writer compares it with what it last wrote
        trial.dirty = True
        return True

    def active(self) -> int:
        """How many open trials are Pending or Running (they hold a slot)."""
        return sum(1 for t in self.open.values() if t.phase in ("Pending", "Running"))
