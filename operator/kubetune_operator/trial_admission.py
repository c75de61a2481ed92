"""Admission: which trials take the Experiment's free slots, new ones from the searcher or paused ones the
scheduler resumes.

Owns :class:`TrialAdmission` (no state of its own: it reads the slots from the spec and the open trials) and
:data:`SUGGEST_SECONDS_PER_PASS`. Called by the controller's pass
(:meth:`kubetune_operator.controller.ExperimentController.plan`) after the trials' pods are compared, and by the
PBT perturbation (the slot limit). Pure.
"""

from __future__ import annotations

import time

from .builders import build_trial
from .decisions import JournaledDecisions
from .journal import Add
from .labels import trial_name
from .plan import Plan, created_event
from .settings import Settings
from .spec_intake import SpecIntake
from .trial_book import TrialBook, TrialState
from .trial_lifecycle import TrialLifecycle

#: Longest a pass spends asking the searcher for new trials (seconds; at least one is asked for): the
#: event loop it runs on also answers the collector and the liveness probe.
SUGGEST_SECONDS_PER_PASS = 0.05


class TrialAdmission:
    """Fills one Experiment's free slots.

    Args:
        intake, book, decisions, lifecycle: the spec in force, the trials, the journaled decisions, the lifecycle.
        settings: the operator's settings (the default concurrency).
    """

    def __init__(
        self,
        intake: SpecIntake,
        book: TrialBook,
        decisions: JournaledDecisions,
        lifecycle: TrialLifecycle,
        settings: Settings,
    ):
        self.intake, self.book, self.decisions, self.lifecycle, self.settings = (
            intake,
            book,
            decisions,
            lifecycle,
            settings,
        )

    def limit(self) -> int:
        """How many trials may be Pending or Running at once: ``spec.maxConcurrentTrials``, or the default."""
        return self.intake.spec.max_concurrent_trials or self.settings.trials.default_max_concurrent_trials

    def scheduler_paused(self) -> list[str]:
        """The trials the scheduler paused that no PBT exploit waits for, by index."""
        return [
            t.name
            for t in sorted(self.book.open.values(), key=lambda t: t.index)
            if t.phase == "Paused"
            and t.status.get("reason") == "SchedulerPaused"
            and t.name not in self.decisions.exploits
        ]

    def resume_paused(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        """Resume the paused trials the scheduler picks for free slots; end those it gave up on."""
        if stop_reason or suspended:
            return
        paused = self.scheduler_paused()
        for name in self.decisions.scheduler.trials_to_stop(paused) if paused else []:
            self.lifecycle.finish(plan, self.book.trials[name], "EarlyStopped", now)
        while self.book.active() < self.limit():
            paused = self.scheduler_paused()
            chosen = self.decisions.choose(paused) if paused else None
            if chosen is None:
                return
            trial = self.book.trials[chosen]
            self.lifecycle.set(trial, now, phase="Pending", reason="Resumed", attempt=trial.attempt + 1, message=None)
            self.lifecycle.create_pod(plan, trial, now)

    def new_trials(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        """Create trials while slots are free: the searcher's configs (a random-access searcher's by index), a
        Trial whose create failed first, with its config; at most :data:`SUGGEST_SECONDS_PER_PASS` of asking."""
        next_index = self.book.next_index
        total = self.decisions.searcher.total
        started = time.monotonic()
        while not stop_reason and not suspended and self.book.active() < self.limit():
            if plan.create_trials and time.monotonic() - started > SUGGEST_SECONDS_PER_PASS:
                break  # a slow searcher (Optuna's TPE at 1,000s of trials) goes on next pass, at once
            index = min(self.book.missing) if self.book.missing else next_index  # a failed create first, same config
            if total is not None:  # random-access searcher: config i is a function of i alone
                if index >= total:
                    break
                config, tag = self.decisions.searcher.variant(index)
            else:
                suggestion = self.decisions.suggest(trial_name(self.intake.name, index))
                if not isinstance(suggestion, dict):
                    break  # FINISHED (search_finished from now on), or None: nothing to suggest yet
                config, tag = suggestion, f"{index}"
            config = self.decisions.scheduler.fill_config(trial_name(self.intake.name, index), config)  # PB2
            manifest = build_trial(self.intake.experiment, index, config, tag)
            plan.create_trials.append(manifest)
            name = manifest["metadata"]["name"]
            self.book.created(
                TrialState(name, index, config, {"phase": "Pending", "attempt": 0}, tag=manifest["spec"].get("tag"))
            )
            self.decisions.do(Add(name))
            next_index = max(next_index, index + 1)
        if plan.create_trials:  # one event per pass, like the event recorder's aggregation, not one per trial
            plan.events.append(created_event([m["metadata"]["name"] for m in plan.create_trials]))
