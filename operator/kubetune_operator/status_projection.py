"""The status projection: what the Experiment's and its Trials' statuses show, and when they are written.

Owns :class:`StatusProjection`: the Experiment's status as last written (or read at startup) and when, whether a
write failed, each Trial's status writes (at most :data:`PERIODIC_STATUS_WRITES_PER_PASS` of new results per pass,
phase changes at once; :data:`~kubetune_operator.experiment_health.STATUS_WRITE_ATTEMPTS` failures in a row make a
trial unwritable), the phase decision (:func:`kubetune_operator.status.experiment_phase`: why the Experiment ends
early), the batches the collector refused (``ResultsRefused`` events) and which warnings were posted. Called by the
controller's pass and by ``kube.py`` and the handlers through the controller (writes that went through or failed).
Pure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from kubetune.resultkeys import goal_reached

from . import status as st
from .decisions import JournaledDecisions
from .driver import DriverPods
from .experiment_health import STATUS_WRITE_ATTEMPTS, ExperimentHealth
from .plan import Plan, now_iso
from .searchers.driver import DriverSearcher
from .settings import Settings
from .spec_intake import SpecIntake
from .trial_book import TERMINAL, TrialBook

#: Trial status writes per pass that only show new results (a phase change is always written): 1,000
#: running trials are written over several passes, not all in one that holds the event loop.
PERIODIC_STATUS_WRITES_PER_PASS = 100
#: At most one ``ResultsRefused`` event per trial in this many seconds (it counts the batches refused since).
REFUSED_EVENT_INTERVAL_S = 60.0


@dataclass
class RefusedBatches:
    """A trial's result batches the collector refused since the last ``ResultsRefused`` event.

    Attributes:
        count: batches refused since the event.
        reason: the last one's reason (``attempt <n>: <why>``).
        told_at: when the last event was posted (seconds since the epoch; -inf: never).
    """

    count: int
    reason: str
    told_at: float


class StatusProjection:
    """The statuses of one Experiment and its trials, as written and as due.

    Args:
        exp_status: the Experiment's status as read (the operator may have restarted).
        intake, book, decisions, health: the spec in force, the trials, the journaled decisions, the health.
        settings: the operator's settings; notices: the controller's events for the next plan.
    """

    def __init__(
        self,
        exp_status: dict,
        intake: SpecIntake,
        book: TrialBook,
        decisions: JournaledDecisions,
        health: ExperimentHealth,
        settings: Settings,
        notices: list,
    ):
        self.intake, self.book, self.decisions, self.health = intake, book, decisions, health
        self.settings, self.notices = settings, notices
        self.exp_status = exp_status
        self.exp_written_at = 0.0
        self.exp_write_failed = False
        self.metric_missing_told = decisions.metric_missing is not None  # its MetricMissing event is posted
        stalled = st.get_condition(self.exp_status.get("conditions"), "TrialsStalled") or {}
        self.stall_told = stalled.get("reason") if stalled.get("status") == "True" else None  # its event is posted
        self.refused: dict[str, RefusedBatches] = {}  # trial -> its batches the collector refused
        self.driver = DriverPods()  # the driver pods of spec.driver, as the controller's pass last saw them

    def started(self, now: float) -> None:
        """The Experiment's first pass ran at ``now`` (its ``startTime``, unless it has one)."""
        self.exp_status.setdefault("startTime", now_iso(now))

    def show_conditions(self, conditions: list[dict]) -> None:
        """``conditions`` were written to the Experiment's status (outside a pass: a failed pass's Degraded)."""
        self.exp_status["conditions"] = conditions

    def tell_metric_missing(self, plan: Plan) -> None:
        """Post the ``MetricMissing`` event once the Experiment fails for a result without its metric."""
        if self.decisions.metric_missing and not self.metric_missing_told:
            self.metric_missing_told = True
            plan.events.append(
                (None, "Warning", "MetricMissing", st.truncate_message(self.decisions.metric_missing, 1024))
            )

    def status_write_failed(self, trial: str | None, error: str | None = None) -> None:
        """A status patch of ``trial`` (None: the Experiment) failed: write the whole status next pass.

        Args:
            error: what the API server (or the check before sending) said; None when the patch was not sent
                (the pass's journal commit failed), which does not count against the trial. After
                :data:`STATUS_WRITE_ATTEMPTS` failures in a row the trial is :meth:`unwritable`: a Warning event
                ``TrialStatusNotWritten`` on the Experiment says so, once.
        """
        if trial is None:
            self.exp_write_failed = True
        elif trial in self.book.trials:
            state = self.book.trials[trial]
            if error is not None:
                state.write_failures, state.write_error = state.write_failures + 1, error
                if state.write_failures == STATUS_WRITE_ATTEMPTS:
                    self.notices.append(
                        (
                            None,
                            "Warning",
                            "TrialStatusNotWritten",
                            f"the status of trial {trial} could not be written {STATUS_WRITE_ATTEMPTS} times in a "
                            f"row; the Experiment goes on without waiting for it and tries again every "
                            f"{self.settings.status.write_interval_s:g} s: {error}",
                        )
                    )
            # an unwritable trial is tried again at the status write interval, not at every pass
            state.written, state.dirty, state.phase_changed = {}, True, not self.unwritable(trial)
            self.book.reopen(state)  # retired: open again until its status is written

    def status_written(self, trial: str) -> None:
        """A status patch of ``trial`` went through: it counts as writable again, and a config its pod computed
        (:meth:`JournaledDecisions.show_pod_config`) that the patch showed need not be kept in the journal's
        snapshots."""
        state = self.book.trials.get(trial)
        if state is not None:
            self.decisions.config_shown(state)
        if state is not None and state.write_failures:
            state.write_failures, state.write_error = 0, None

    def unwritable(self, trial: str) -> bool:
        """Whether ``trial``'s status writes failed :data:`STATUS_WRITE_ATTEMPTS` times in a row (the last one
        included): the Experiment goes on and may finish without waiting for them."""
        state = self.book.trials.get(trial)
        return state is not None and state.write_failures >= STATUS_WRITE_ATTEMPTS

    def results_refused(self, trial: str, attempt: int, reason: str) -> None:
        """The collector refused a batch of ``trial``'s ``attempt`` for ``reason`` (a value the operator cannot
        take): a Warning event ``ResultsRefused`` on the Trial in the next pass, at most one per trial every
        :data:`REFUSED_EVENT_INTERVAL_S` seconds, counting the batches refused since the last one."""
        entry = self.refused.setdefault(trial, RefusedBatches(0, reason, -math.inf))
        entry.count, entry.reason = entry.count + 1, f"attempt {attempt}: {reason}"

    def report_refused(self, plan: Plan, now: float) -> None:
        """Post the ``ResultsRefused`` events due (at most one per trial per interval)."""
        for trial, refused in list(self.refused.items()):
            count, reason = refused.count, refused.reason
            if now - refused.told_at < REFUSED_EVENT_INTERVAL_S:
                continue
            if not count:
                del self.refused[trial]
                continue
            plan.events.append(
                (
                    trial,
                    "Warning",
                    "ResultsRefused",
                    f"the collector refused {count} batch(es) of results, which the trial's runtime drops; the "
                    f"last one for {reason}",
                )
            )
            self.refused[trial] = RefusedBatches(0, reason, now)

    def stopping_reason(self, now: float | None = None) -> str | None:
        """Why the whole experiment is ending early, or None: GoalReached, TimeBudgetExhausted,
        MaxFailedTrialsExceeded (the reasons of :func:`status.experiment_phase`)."""
        decision = self.phase_decision(now if now is not None else time.time())
        return decision.reason if decision.stop_remaining else None

    def phase_decision(self, now: float, driver_pending: bool | None = None) -> st.PhaseDecision:
        """The Experiment's phase and whether to stop the remaining trials, as of ``now`` (``driver_pending``:
        whether a driver pod holds the end, by default whether the Experiment's has not exited 0)."""
        driver = self.driver if self.intake.spec.driver is not None else None
        if driver_pending is None:
            driver_pending = driver is not None and not driver.done
        counts = self.book.counts()
        goal = self.intake.spec.goal
        best = self.book.best() if goal is not None else None  # O(trials): only when a goal needs it
        started = self.exp_status.get("startTime")
        budget = self.intake.spec.time_budget_s
        budget_over = bool(
            budget is not None
            and started
            and now - datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() >= budget
        )
        max_failed = self.intake.spec.failure.max_failed_trials
        searcher = self.decisions.searcher
        return st.experiment_phase(
            counts,
            suspended=self.intake.spec.suspend,
            search_finished=self.decisions.search_finished,
            goal_reached=best is not None and goal_reached(best["metricValue"], goal, self.intake.mode),
            time_budget_exhausted=budget_over,
            max_failed_trials=max_failed,
            stoppers_stop_all=self.decisions.stoppers.stop_all(),
            metric_missing=self.decisions.metric_missing,
            exploring=self._exploring(counts),
            driver_failure=driver.failure if driver is not None else None,
            driver_pending=driver_pending,
            driver_waiting=driver.waiting if driver is not None else None,
            driver_asked=searcher.asked if isinstance(searcher, DriverSearcher) else None,
        )

    def _exploring(self, counts: dict) -> str | None:
        """The trial of PB2's open explore step once every trial ended, else None (asked only then: a job
        builds its data)."""
        if counts["pending"] + counts["running"] + counts["paused"] or not self.decisions.search_finished:
            return None
        return (self.decisions.exploration() or {}).get("trial")

    def write(self, plan: Plan, now: float) -> None:
        """Add to ``plan`` the Trial statuses due and the Experiment's status, if it changed."""
        interval = self.settings.status.write_interval_s
        periodic = 0  # writes of a new result only: at most PERIODIC_STATUS_WRITES_PER_PASS, the rest next pass
        for trial in self.book.open.values():  # a retired trial is never dirty (status_write_failed opens it)
            if trial.uid is None:
                continue
            due = trial.dirty and (trial.phase_changed or now - trial.written_at >= interval)
            if due and not trial.phase_changed:
                periodic += 1
                due = periodic <= PERIODIC_STATUS_WRITES_PER_PASS
            if due:
                patch = st.status_patch(trial.written, trial.status)
                if patch:
                    plan.trial_status[trial.name] = patch
                    trial.written = dict(trial.status)
                trial.dirty = trial.phase_changed = False
                trial.written_at = now
        decision = self.phase_decision(now)
        obs_gen = self.health.observed_generation
        conditions = st.experiment_conditions(
            self.exp_status.get("conditions"), decision, obs_gen, datetime.fromtimestamp(now, timezone.utc)
        )
        conditions = self.health.conditions(conditions, datetime.fromtimestamp(now, timezone.utc))
        conditions = st.kstatus_conditions(
            conditions, decision.phase, obs_gen, datetime.fromtimestamp(now, timezone.utc)
        )
        stalled = st.get_condition(conditions, "TrialsStalled") or {}
        told = stalled.get("reason") if stalled.get("status") == "True" else None
        if told != self.stall_told:  # a Warning event when trials become stalled, or for another reason
            self.stall_told = told
            if told:
                plan.events.append((None, "Warning", told, stalled["message"]))
        completion = self.exp_status.get("completionTime")
        if decision.phase in TERMINAL and not completion:
            completion = now_iso(now)
        new = st.experiment_status(
            phase=decision.phase,
            conditions=conditions,
            observed_generation=obs_gen,
            counts=self.book.counts(),
            best=self.book.best(),
            pareto=st.pareto_status(self.book.pareto()),
            start_time=self.exp_status.get("startTime"),
            completion_time=completion,
        )
        changed_phase = new.get("phase") != self.exp_status.get("phase")
        patch = st.status_patch({} if self.exp_write_failed else self.exp_status, new)
        if patch and (changed_phase or self.exp_write_failed or now - self.exp_written_at >= 1.0):
            self.exp_write_failed = False
            event = (
                "Warning" if decision.phase == "Failed" else "Normal",
                f"Experiment{decision.phase}",
                decision.message,
            )
            if decision.phase in TERMINAL:  # each time the terminal status is sent: it is posted once (kube.py)
                plan.end_event = event
            elif changed_phase:
                plan.events.append((None, *event))
            plan.experiment_status = patch
            self.exp_status = new
            self.exp_written_at = now

    @property
    def finished(self) -> bool:
        """The Experiment reached Succeeded or Failed, and no write of that status failed or was held back
        (nothing more to do)."""
        return self.exp_status.get("phase") in TERMINAL and not self.exp_write_failed
