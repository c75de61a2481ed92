"""The per-Experiment controller: the façade the operator's handlers, registry, ``kube.py`` and collector call.

One :class:`ExperimentController` per Experiment lives in the operator's
:class:`kubetune_operator.registry.Registry`. The Experiment's daemon (``handlers.py``) calls
:meth:`ExperimentController.plan` with the pods it observes and carries out the returned
:class:`~kubetune_operator.plan.Plan` (``kube.py``); the collector calls :meth:`ExperimentController.record_results`.
Nothing here talks to the API server, so the whole lifecycle is unit-tested without a cluster.

The controller is made of objects that each own their state (docs/architecture.md, "The operator's modules"):
the spec in force (:mod:`~kubetune_operator.spec_intake`), the trials (:mod:`~kubetune_operator.trial_book`), the
journaled searcher/scheduler decisions (:mod:`~kubetune_operator.decisions`), the trial lifecycle
(:mod:`~kubetune_operator.trial_lifecycle`), the admission of new and paused trials
(:mod:`~kubetune_operator.trial_admission`), PBT's perturbations (:mod:`~kubetune_operator.pbt_perturbation`), the
Experiment's health (:mod:`~kubetune_operator.experiment_health`) and the statuses written
(:mod:`~kubetune_operator.status_projection`). This module wires them and runs one pass.

Trial lifecycle (docs/architecture.md, "Data flow"): a Trial is Pending until its
pod (``<trial>-<attempt>``) runs, Running while it runs, then by the pod's end:
exit 0 with the runtime's outcome (termination message JSON, see
:mod:`kubetune.env`) gives Succeeded (Completed, EarlyStopped) or Paused; a
failed or vanished pod is retried as attempt+1 (restoring the latest committed
checkpoint) until ``failure.maxFailures``, then the Trial is Failed.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Iterator, Mapping

from kubetune.limits import MAX_FIELD_BYTES
from kubetune.shipping import holds_function

from .decisions import JournaledDecisions
from .driver import driver_events, split_driver_pods
from .experiment_health import ExperimentHealth
from .experiment_spec import ContainerTrial
from .gang import fold
from .journal import Explored, Journal
from .pbt_perturbation import Perturbation
from .plan import Plan
from .podview import PodView
from .searchers.base import FINISHED
from .searchers.driver import DriverSearcher
from .settings import Settings
from .spec_intake import SpecIntake
from .status_projection import StatusProjection
from .trial_admission import TrialAdmission
from .trial_book import TERMINAL, TrialBook, TrialState
from .trial_lifecycle import TrialLifecycle


class ExperimentController:
    """Everything the operator knows and decides about one Experiment.

    Args:
        experiment: the Experiment object (dict).
        settings: the operator's settings.
        key: the collector's HMAC key (trial tokens).

    Raises:
        InvalidSpec: the spec cannot be run (bad parameter space, searcher or scheduler
            parameters, missing storage, bad timeBudget, a field over :mod:`kubetune.limits`).
    """

    def __init__(self, experiment: Mapping, settings: Settings, key: bytes):
        self.settings, self.key = settings, key
        self.stop_reason: str | None = None  # as of the last plan(); the collector answers by it
        self.restored = False  # the Trials in the API and the journal have been read (the daemon does it first)
        self.adopted = False  # ... and the first plan() has run: the collector may take results
        self.deleting = False  # the Experiment is being deleted: the daemon creates nothing more
        self.notices: list[tuple[str | None, str, str, str]] = []  # events found between passes, for the next plan
        exp_status = dict(experiment.get("status") or {})
        meta = experiment["metadata"]
        self.intake = SpecIntake(settings)
        self.book = TrialBook(self.intake)
        # why the experiment fails: a result lacked its metric (a journal entry; read from the status's
        # MetricMissing condition too, for a journal an operator before the entry wrote)
        metric_missing = next(
            (
                (c.get("message") or "").split("; stopping ")[0]
                for c in exp_status.get("conditions") or ()
                if c.get("reason") == "MetricMissing"
            ),
            None,
        )
        journal = Journal(meta["namespace"], meta["name"], meta.get("uid") or "")
        self.decisions = JournaledDecisions(journal, self.book, self.intake, metric_missing)
        self.health = ExperimentHealth(self.intake, self.book, self.notices)
        self.projection = StatusProjection(
            exp_status, self.intake, self.book, self.decisions, self.health, settings, self.notices
        )
        self.lifecycle = TrialLifecycle(self.intake, self.book, self.decisions, settings, key)
        self.admission = TrialAdmission(self.intake, self.book, self.decisions, self.lifecycle, settings)
        self.perturbation = Perturbation(self.intake, self.book, self.decisions, self.lifecycle, self.admission)
        self.update(experiment)

    # ----- what the handlers, registry, kube.py and the collector read --------------------
    @property
    def experiment(self) -> Mapping:
        """The Experiment object of the spec in force."""
        return self.intake.experiment

    @property
    def name(self) -> str:
        """The Experiment's name."""
        return self.intake.name

    @property
    def namespace(self) -> str:
        """The Experiment's namespace."""
        return self.intake.namespace

    @property
    def warnings(self) -> list[str]:
        """Likely mistakes in spec.config that are valid as constants; the validate handler posts them as events."""
        return self.intake.warnings

    @property
    def trials(self) -> dict[str, TrialState]:
        """Every trial, by name."""
        return self.book.trials

    def open_trials(self) -> list[TrialState]:
        """The trials a pass looks at (not retired)."""
        return list(self.book.open.values())

    @property
    def container_trial(self) -> ContainerTrial | None:
        """The command and metrics collector of a container trial (``spec.trainable.command``), or None."""
        return self.intake.spec.container

    @property
    def metric(self) -> str | tuple[str, ...] | None:
        """The metric, or the objectives' metrics."""
        return self.intake.metric

    def output_read(self, pod: str, reader: str | None = None) -> bool:
        """Whether the output of container-trial pod ``pod``, ended, was read to its end: by ``reader`` (``log``:
        the operator's log stream; ``sidecar``: kubetune's sidecar in the pod, which also saved the last
        checkpoint), or by every reader the pod has (None)."""
        return self.lifecycle.read_by(pod, reader)

    def output_unreadable(self, pod: str, error: str) -> bool:
        """Why the log of container-trial pod ``pod`` could not be read (kept for the ``OutputNotRead`` event);
        returns whether that error was already the last one (so it is logged once)."""
        return self.lifecycle.output_unreadable(pod, error)

    def output_read_to_end(self, pod: str, reader: str) -> None:
        """``reader`` (``log``: ``logstream.py``; ``sidecar``: the sidecar's last batch) read the output of
        container-trial pod ``pod`` to its end: once every reader did, its outcome may follow
        (:meth:`TrialLifecycle.read_to_end`)."""
        self.lifecycle.read_to_end(pod, reader)

    @property
    def journal(self) -> Journal:
        """The Experiment's decision journal (the registry commits it)."""
        return self.decisions.journal

    @property
    def exp_status(self) -> dict:
        """The Experiment's status as last written (or read at startup)."""
        return self.projection.exp_status

    @property
    def finished(self) -> bool:
        """The Experiment reached Succeeded or Failed, and no write of that status failed or was held back
        (nothing more to do)."""
        return self.projection.finished

    # ----- spec ----------------------------------------------------------------------------
    def update(self, experiment: Mapping) -> None:
        """Take a new version of the Experiment (spec changes take effect on the next plan).

        Raises:
            InvalidSpec: as for the constructor; the previous spec stays in force.
        """
        parsed = self.intake.parse(experiment)
        spec, old = parsed.spec, self.intake.spec
        self.decisions.check_spec(
            parsed.searcher, parsed.scheduler, spec.scheduler.params, old is not None and spec.stoppers != old.stoppers
        )
        self.decisions.take_spec(
            parsed.searcher,
            parsed.scheduler,
            spec.scheduler.params,
            parsed.stoppers,
            spec_changed=old != spec,
            pods_draw=holds_function(spec.config) or spec.trial_name_creator is not None,
            ranges=spec.best_trial_scope == "all",
            driver=spec.driver is not None,
        )
        if spec.driver is not None:
            self.journal.keep_for_driver()
        if self.intake.accept(experiment, spec):  # another metric or mode: the trials are ranked anew
            self.book.reopen_all()

    def spec_refused(self, message: str, generation: int | None) -> None:
        """A new version of the spec (``metadata.generation``) was refused: the previous one stays in force."""
        self.health.spec_refused(message, generation)

    def spec_accepted(self) -> None:
        """The latest version of the spec was accepted."""
        self.health.spec_accepted()

    def mark_deleting(self) -> None:
        """The Experiment is being deleted: a pass still planning creates nothing more."""
        self.deleting = True

    # ----- observation and restore ---------------------------------------------------------
    def observe_trial(self, trial: Mapping) -> None:
        """Adopt a Trial seen in the API (after a restart, or created by us); our own status wins once known."""
        self.book.observe(trial)

    def restore(self, configmaps: list[dict]) -> None:
        """Rebuild what the searcher and scheduler knew from the stored journal, after :meth:`observe_trial`
        has taken every Trial in the API; then the controller is ``restored`` (and ``adopted``, ready for
        the collector, once its first :meth:`plan` has compared the Trials with their pods).

        Args:
            configmaps: the Experiment's journal ConfigMaps (see :mod:`kubetune_operator.journal`).

        Raises:
            JournalCorrupt: the journal cannot be replayed (an entry is missing or unknown).
        """
        for _ in self.restore_steps(configmaps):
            pass

    def restore_steps(self, configmaps: list[dict], entries_per_step: int = 500) -> Iterator[None]:
        """:meth:`restore` in steps of ``entries_per_step`` journal entries: the daemon lets the event loop
        run (probes, other Experiments) between them. Raises as :meth:`restore`."""
        yield from self.decisions.restore_steps(configmaps, entries_per_step)
        self.restored = True

    def snapshot(self) -> dict:
        """What the journal keeps of a snapshot (:meth:`kubetune_operator.decisions.JournaledDecisions.snapshot`)."""
        return self.decisions.snapshot()

    # ----- what the daemon's API calls did (kube.py) ---------------------------------------
    def trial_created(self, name: str, uid: str | None) -> None:
        """The daemon created (or found, ours) Trial ``name``; None ``uid`` means the create failed: it is asked
        for again next pass (with the same config: suggestions are journaled and idempotent)."""
        if uid is None:
            self.book.forget(name)
        else:
            self.health.name_free(name)
            self.book.uid_known(name, uid)

    def pod_not_created(self, name: str) -> None:
        """The create of pod ``name`` failed: it is asked for again next pass."""
        self.lifecycle.pod_not_created(name)
        self.projection.driver.not_created(name)

    def secrets_not_deleted(self, names: set[str]) -> None:
        """The token Secrets ``names`` were not deleted (or held back): asked for again next pass."""
        self.lifecycle.secrets_not_deleted(names)

    def pod_rejected(self, message: str) -> None:
        """The API server refused a trial pod for what it contains (:meth:`ExperimentHealth.pod_rejected`)."""
        self.health.pod_rejected(message)

    def name_taken(self, name: str, message: str) -> None:
        """An object name is not this Experiment's (:meth:`ExperimentHealth.name_taken`)."""
        self.health.name_taken(name, message)

    def pod_accepted(self, *names: str) -> None:
        """A trial pod was created (:meth:`ExperimentHealth.pod_accepted`)."""
        self.health.pod_accepted(*names)

    def plan_not_carried_out(self, plan: Plan) -> None:
        """The journal could not be committed, so nothing of ``plan`` was sent: ask for it all again."""
        for manifest in plan.create_trials:
            self.trial_created(manifest["metadata"]["name"], None)
        for manifest in plan.create_pods:
            self.pod_not_created(manifest["metadata"]["name"])
        self.lifecycle.secrets_not_deleted({name for name, _ in plan.collect_secrets})
        for name in plan.trial_status:
            self.projection.status_write_failed(name)
        if plan.experiment_status:
            self.projection.status_write_failed(None)

    def status_write_failed(self, trial: str | None, error: str | None = None) -> None:
        """A status patch of ``trial`` (None: the Experiment) failed (:meth:`StatusProjection.status_write_failed`)."""
        self.projection.status_write_failed(trial, error)

    def status_written(self, trial: str) -> None:
        """A status patch of ``trial`` went through (:meth:`StatusProjection.status_written`)."""
        self.projection.status_written(trial)

    def unwritable(self, trial: str) -> bool:
        """Whether ``trial``'s status writes keep failing (:meth:`StatusProjection.unwritable`)."""
        return self.projection.unwritable(trial)

    def pass_failed(self, message: str | None) -> None:
        """Why the daemon's last pass failed (the ``Degraded`` condition), or None once one starts."""
        self.health.pass_failed(message)

    def health_conditions(self, conditions: list | None, now: datetime) -> list[dict]:
        """``conditions`` with the Experiment's health (:meth:`ExperimentHealth.conditions`)."""
        return self.health.conditions(conditions, now)

    def show_conditions(self, conditions: list[dict]) -> None:
        """``conditions`` were written to the Experiment's status outside a pass (a failed pass's Degraded)."""
        self.projection.show_conditions(conditions)

    # ----- the collector -------------------------------------------------------------------
    def trial_dir(self, trial: str) -> str:
        """The storage folder URI of ``trial`` (:func:`kubetune_operator.builders.experiment_trial_dir`)."""
        return self.intake.trial_dir(trial)

    def driver_events(self, after: int) -> dict:
        """The driver pod's events after journal entry ``after`` (:func:`kubetune_operator.driver.driver_events`).

        Raises:
            LookupError: they are not kept (no ``spec.driver``, or the driver asked from before what it saved).
        """
        if self.intake.spec.driver is None:
            raise LookupError("the Experiment has no spec.driver")
        ending = self.projection.phase_decision(time.time(), driver_pending=False).phase in ("Succeeded", "Failed")
        searcher = self.decisions.searcher
        asked = searcher.asked if isinstance(searcher, DriverSearcher) else None
        return driver_events(self.journal, after, self._trial_info, ending, asked)

    def driver_suggested(self, trial: str, suggestion: Any) -> bool:
        """Journal the driver pod's searcher's answer for ``trial`` when it is the trial the operator asks a config
        for (:attr:`kubetune_operator.searchers.driver.DriverSearcher.asked`; another, or one taken already, is
        ignored: the pod sends it again); True when journaled (commit it, then wake the daemon).

        Raises:
            ValueError: the searcher does not run in the driver pod, or ``suggestion`` is neither a config (a JSON
                object of at most ``kubetune.limits.MAX_FIELD_BYTES``) nor ``"FINISHED"``.
        """
        searcher = self.decisions.searcher
        if not isinstance(searcher, DriverSearcher):
            raise ValueError("the Experiment's searcher does not run in its driver pod (searchAlgorithm driver)")
        if suggestion != FINISHED:
            if not isinstance(suggestion, dict):
                raise ValueError(
                    f"a suggestion is a config (a JSON object) or FINISHED, got {type(suggestion).__name__}"
                )
            size = len(json.dumps(suggestion))
            if size > MAX_FIELD_BYTES:
                raise ValueError(f"the suggested config has {size} bytes of JSON, more than {MAX_FIELD_BYTES}")
        return trial == searcher.asked and self.decisions.driver_suggested(trial, suggestion)

    def driver_checkpoint(self, trial: str, ask: Any) -> bool:
        """Journal a driver pod's callback asking ``trial`` for a checkpoint (Ray's ``result[SHOULD_CHECKPOINT]``):
        ``ask`` is ``[attempt, iteration]`` of the result it was set on; True when journaled (commit it). Ignored for a
        trial that is not open on that attempt, or an ask not newer than the trial's last
        (:meth:`kubetune_operator.decisions.JournaledDecisions.driver_checkpoint`).

        Raises:
            ValueError: ``ask`` is not two whole numbers.
        """
        if not (isinstance(ask, list) and len(ask) == 2 and all(type(n) is int for n in ask)):
            raise ValueError(f"a checkpoint request is [attempt, iteration], got {ask!r:.100}")
        return self.decisions.driver_checkpoint(trial, ask[0], ask[1])

    def _trial_info(self, name: str) -> dict:
        trial = self.book.trials.get(name)
        return {"config": (trial.created_config if trial else None) or {}, "path": self.trial_dir(name)}

    def token(self, trial: str, attempt: int) -> str:
        """The collector bearer token of ``trial``'s ``attempt`` (see :func:`kubetune_operator.tokens.mint_token`)."""
        return self.lifecycle.token(trial, attempt)

    def results_refused(self, trial: str, attempt: int, reason: str) -> None:
        """The collector refused a batch of ``trial``'s ``attempt`` (:meth:`StatusProjection.results_refused`)."""
        self.projection.results_refused(trial, attempt, reason)

    def trial_stalled(self, trial: str, stall: dict | None) -> None:
        """What stalls ``trial``'s current attempt, as its runtime reports it (:meth:`TrialLifecycle.stalled`)."""
        self.lifecycle.stalled(trial, stall)

    def record_results(
        self,
        trial: str,
        attempt: int,
        results: list[dict],
        checkpoint: dict | None,
        uid: str | None = None,
        explored: dict | None = None,
        display_name: str | None = None,
    ) -> str | None:
        """Take a batch of results of ``trial``'s ``attempt``; return the decision for the runtime.

        Args:
            explored: the config the attempt computed in its pod, journaled once, before the batch's results:
                its PBT exploit's user functions called (an ``explored`` entry), or the values it drew for the
                config's ``sample_from`` functions (a ``sampled`` entry); ignored when none is awaited.
            display_name: the display name the attempt's ``trial_name_creator`` gave (checked by
                :func:`kubetune_operator.podinput.display_name_problem`), journaled once (a ``named`` entry) as the
                Trial's ``status.displayName``; ignored when the Trial has one or the spec has no creator.
            uid: the Trial uid the reporting pod's token names; another than this Trial's is stale (a
                pod of an earlier Experiment of the same name). None: not checked.

        Returns:
            ``continue``, ``checkpoint``, ``pause`` or ``stop``; None when ``attempt`` is not the
            trial's current one, or ``uid`` not its uid (a stale token: the collector answers 401).
        """
        state = self.book.trials.get(trial)
        if state is None or attempt != state.attempt or (uid is not None and uid != state.uid):
            return None
        if state.phase in TERMINAL or self.stop_reason or self.intake.spec.suspend:
            return "pause" if self.intake.spec.suspend and state.phase not in TERMINAL else "stop"
        return self.decisions.take_results(state, attempt, results, checkpoint, explored, display_name)

    # ----- PB2's explore steps, computed off the event loop (kubetune_operator.explore_pool) -------------
    def exploration(self) -> dict | None:
        """The scheduler's next explore job (PB2's ``next_exploration``), or None: nothing to compute."""
        return self.decisions.exploration()

    def explored(self, trial: str, outcome: dict) -> None:
        """The outcome of :meth:`exploration`'s job for ``trial`` (``{"error": ...}`` when it failed): journaled,
        and the exploit's config is chosen; the trial's next attempt starts in a later pass.

        Raises:
            JournalCorrupt: ``trial`` is not the job's (the explore pool mixed up Experiments: a bug).
        """
        self.decisions.do(Explored(trial, outcome))

    # ----- deciding ----------------------------------------------------------------------------
    def best(self) -> dict | None:
        """The best Trial by ``metric``/``mode`` (:meth:`TrialBook.best`)."""
        return self.book.best()

    def pareto(self) -> list[dict]:
        """The Pareto front of a multi-objective Experiment (:meth:`TrialBook.pareto`)."""
        return self.book.pareto()

    def stopping_reason(self, now: float | None = None) -> str | None:
        """Why the whole experiment is ending early, or None (:meth:`StatusProjection.stopping_reason`)."""
        return self.projection.stopping_reason(now)

    @property
    def observed_generation(self) -> int | None:
        """The latest ``metadata.generation`` seen (:attr:`ExperimentHealth.observed_generation`)."""
        return self.health.observed_generation

    @property
    def search_finished(self) -> bool:
        """The searcher will suggest nothing more (:attr:`JournaledDecisions.search_finished`)."""
        return self.decisions.search_finished

    def plan(self, pods: Mapping[str, PodView], now: float | None = None) -> Plan:
        """Compare desired with observed state and return what to do (level-based, idempotent).

        Args:
            pods: the experiment's trial pods by name, as observed.
            now: seconds since the epoch (default: the clock).
        """
        now = time.time() if now is None else now
        pods, drivers = split_driver_pods(pods)
        observed, pods = pods, fold(pods)
        lingering = self.lifecycle.lingering(observed)
        plan = Plan(events=list(self.notices))
        self.notices.clear()
        self.projection.report_refused(plan, now)
        if not self.adopted:  # first pass after a (re)start: a newer attempt than the status says wins
            for pod in pods.values():
                trial = self.book.trials.get(pod.trial)
                if trial is not None and pod.attempt > trial.attempt and pod.owner_uid in (None, trial.uid):
                    self.lifecycle.set(trial, now, attempt=pod.attempt, podName=pod.name)
            self.adopted = True  # now the collector may take results: every trial's attempt is known
        self.projection.started(now)
        if self.intake.spec.driver is not None:
            self.projection.driver.observe(drivers)
            self.projection.driver.plan(plan, self.experiment, self.settings, self.key)
        self.lifecycle.reconcile(plan, pods, lingering, self.projection.stopping_reason(now), now)
        stop_reason = self.stop_reason = self.projection.stopping_reason(now)  # outcomes of this pass count too
        suspended = self.intake.spec.suspend
        self.perturbation.perturb(plan, now, stop_reason, suspended)
        self.admission.resume_paused(plan, now, stop_reason, suspended)
        self.admission.new_trials(plan, now, stop_reason, suspended)
        self.projection.tell_metric_missing(plan)
        self.lifecycle.collect(plan, observed)
        self.projection.write(plan, now)
        self.book.retire()
        return plan
