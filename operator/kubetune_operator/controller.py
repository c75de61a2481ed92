"""The per-Experiment controller: in-memory trial state, result handling and
the level-based plan of what to create, delete and write.

One :class:`ExperimentController` per Experiment lives in the operator's
:class:`kubetune_operator.registry.Registry`. The Experiment's daemon
(``handlers.py``) calls :meth:`ExperimentController.plan` with the pods it
observes and carries out the returned :class:`Plan`; the collector calls
:meth:`ExperimentController.record_results`. Nothing here talks to the API
server, so the whole lifecycle is unit-tested without a cluster.

Trial lifecycle (docs/architecture.md, "Data flow"): a Trial is Pending until its
pod (``<trial>-<attempt>``) runs, Running while it runs, then by the pod's end:
exit 0 with the runtime's outcome (termination message JSON, see
:mod:`kubetune.env`) gives Succeeded (Completed, EarlyStopped) or Paused; a
failed or vanished pod is retried as attempt+1 (restoring the latest committed
checkpoint) until ``failure.maxFailures``, then the Trial is Failed.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, NamedTuple

from kubetune.checkpoint_store import checkpoint_uri
from kubetune.env import STALL_REASONS
from kubetune.limits import check_spec_sizes
from kubetune.resultkeys import goal_reached, is_number, missing_metrics
from kubetune.search import parse_space, space_warnings
from kubetune.shipping import draws_for, holds_function
from kubetune.stopping import should_stop

from . import status as st
from .algorithms import create_scheduler, create_searcher
from .builders import (
    build_pod,
    build_token_secret,
    build_trial,
    experiment_trial_dir,
    sample_pod,
    token_secret_name,
    trial_object,
)
from .builtin_stoppers import create_stoppers
from .experiment_spec import ExperimentSpec
from .gang import Gang, build_gang, fold, gang_name, world_size
from .journal import (
    Add,
    Choose,
    End,
    Entry,
    Explored,
    Journal,
    JournalCorrupt,
    MetricMissing,
    Results,
    Sampled,
    Suggest,
    entry_from_json,
    load,
)
from .labels import (
    label_value,
    pod_name,
    trial_name,
)
from .lifecycle import STOP_REASON, transition
from .podinput import is_iteration, parse_outcome
from .podsecurity import violations
from .podview import DECISION_RANK, WAITING_CAUSES, PodView
from .schedulers.base import Exploit
from .settings import Settings
from .tokens import mint_token

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")
#: Trial status writes per pass that only show new results (a phase change is always written): 1,000
#: running trials are written over several passes, not all in one that holds the event loop.
PERIODIC_STATUS_WRITES_PER_PASS = 100
#: PBT perturbations kept in a Trial's ``status.perturbations`` (the newest).
MAX_PERTURBATIONS_KEPT = 10
#: The message of a trial paused for a PB2 exploit whose config is still being chosen.
EXPLORING_MESSAGE = "PB2 is choosing the config this trial continues with (a Gaussian-process bandit step)"
#: Trial messages of the retries whose cause the runtime reported (the others carry the pod's message).
_RETRY_MESSAGES = {
    "Terminated": "the trial was terminated before it finished, after a final checkpoint",
    "Fenced": "the collector refused the attempt's token; it stopped at once",
}
#: Why a container ended, by the kubelet's termination reason, when the runtime could not say (it was killed).
_KILLED_MESSAGES = {
    "OOMKilled": "the container went over its memory limit and the kernel killed it (OOMKilled, exit code 137); "
    "give trials more memory (spec.resourcesPerTrial.memory)",
}
#: Status writes of one Trial that fail in a row before the Experiment stops waiting for it: it may finish
#: without that Trial's last status, which is tried again at ``status.write_interval_s`` and shown in the
#: ``Degraded`` condition (reason ``TrialStatusNotWritten``) and a Warning event on the Experiment.
STATUS_WRITE_ATTEMPTS = 3
#: At most one ``ResultsRefused`` event per trial in this many seconds (it counts the batches refused since).
REFUSED_EVENT_INTERVAL_S = 60.0
#: Longest a pass spends asking the searcher for new trials (seconds; at least one is asked for): the
#: event loop it runs on also answers the collector and the liveness probe.
SUGGEST_SECONDS_PER_PASS = 0.05
#: Back-off before a gang that timed out partly scheduled is created again: the first value, doubled per
#: timeout in a row, up to the second (seconds).
GANG_BACKOFF_S = (10.0, 300.0)


class Applied(NamedTuple):
    """What the scheduler decided for a trial's attempt, as the journal rebuilds it after a restart.

    Attributes:
        seen: the highest ``training_iteration`` of the trial applied: results at or below it are not new.
        decision: the decision for ``attempt``.
        attempt: the attempt the decision is for.
        restart_at: the iteration a later attempt starts over at (a PBT exploit's donor checkpoint), or None.
    """

    seen: int
    decision: str
    attempt: int
    restart_at: int | None = None

    def as_json(self) -> list:
        """The snapshot's form: ``[seen, decision, attempt]``, and ``restart_at`` when set."""
        return [self.seen, self.decision, self.attempt, *([] if self.restart_at is None else [self.restart_at])]

    @classmethod
    def from_json(cls, stored: list) -> Applied:
        """Inverse of :meth:`as_json`."""
        return cls(*stored)


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


class InvalidSpec(ValueError):
    """An Experiment spec the schema accepted but the operator cannot run (message says why)."""


@dataclass
class Plan:
    """What one reconcile pass wants done; the daemon carries it out (409 on create is success).

    Attributes:
        create_trials: Trial manifests.
        create_pods: Pod manifests.
        token_secrets: ``{pod name: manifest}`` of each new pod's token Secret, created before the pod.
        delete_pods: ``(pod name, grace seconds)`` to delete gracefully.
        trial_status: ``{trial name: status merge patch}`` for trials whose status should be written now.
        events: ``(trial name or None for the Experiment, type, reason, message)``.
        experiment_status: the Experiment's status merge patch, or None if nothing need be written now.
        collect_pods: ``(pod name, trial name)`` of ended pods that ``spec.podRetentionPolicy`` deletes;
            deleted only after the trial's status in this plan is written.
        collect_secrets: ``(Secret name, trial name)`` of the token Secrets of ended attempts, deleted as
            ``collect_pods``.
        end_event: ``(type, reason, message)`` of the event announcing the Experiment's end, when
            ``experiment_status`` makes it Succeeded or Failed: posted once (under a name of its own) before
            that status is written, which ends the daemon.
        gangs: ``{head pod name: Gang}`` of the pods in ``create_pods`` that head a gang: its Service,
            PodGroup and workers are created after the token Secret and before the head.
        collect_gangs: ``(gang name, trial name)`` of ended attempts whose Service and PodGroup go, as
            ``collect_secrets``.
    """

    create_trials: list[dict] = field(default_factory=list)
    create_pods: list[dict] = field(default_factory=list)
    delete_pods: list[tuple[str, int]] = field(default_factory=list)
    trial_status: dict[str, dict] = field(default_factory=dict)
    events: list[tuple[str | None, str, str, str]] = field(default_factory=list)
    experiment_status: dict | None = None
    collect_pods: list[tuple[str, str]] = field(default_factory=list)
    token_secrets: dict[str, dict] = field(default_factory=dict)
    collect_secrets: list[tuple[str, str]] = field(default_factory=list)
    end_event: tuple[str, str, str] | None = None
    gangs: dict[str, Gang] = field(default_factory=dict)
    collect_gangs: list[tuple[str, str]] = field(default_factory=list)


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

    def as_object(self) -> dict:
        return {
            "metadata": {"name": self.name},
            "spec": {"index": self.index, "config": self.config},
            "status": self.status,
        }


def created_event(names: list[str]) -> tuple[None, str, str, str]:
    """The Experiment's ``TrialsCreated`` event for the Trials ``names`` (in creation order) of one pass."""
    span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    return (None, "Normal", "TrialsCreated", f"created {len(names)} trial{'s' * (len(names) > 1)}: {span}")


def _trials_condition(
    conditions: list | None, kind: str, trials: list, what: str, cleared: str, gen: int | None, now: datetime
) -> list[dict]:
    """``conditions`` with the condition ``kind`` True, with the first of ``trials``' reason and how many ``what``
    ("N trial(s) stalled; <first>: <its message>"), or False with reason ``cleared`` once there are none."""
    if trials:
        first = min(trials, key=lambda t: t.index)
        message = f"{len(trials)} trial(s) {what}; {first.name}: {first.status.get('message')}"
        return st.set_condition(conditions, kind, True, first.status["reason"], message, gen, now)
    if st.get_condition(conditions, kind):
        return st.set_condition(conditions, kind, False, cleared, "", gen, now)
    return conditions


def _now_iso(now: float) -> str:
    return st.format_time(datetime.fromtimestamp(now, timezone.utc))


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
        self.settings = settings
        self.key = key
        self.trials: dict[str, TrialState] = {}
        # A pass looks only at the open trials: a trial retires once it is terminal and its status written,
        # its count and its bid for best trial kept here, so a pass costs O(open trials), not O(all).
        self._open: dict[str, TrialState] = {}
        self._by_label: dict[str, TrialState] = {}  # every trial, by its pods' trial label
        self._retired_counts = st.trial_counts(())
        self._retired_best: TrialState | None = None
        self._retired_front: list[TrialState] = []  # the retired trials on the Pareto front (several objectives)
        self.stop_reason: str | None = None  # as of the last plan(); the collector answers by it
        self.restored = False  # the Trials in the API and the journal have been read (the daemon does it first)
        self.adopted = False  # ... and the first plan() has run: the collector may take results
        self.created_pods: dict[str, float] = {}
        self.secrets_deleted: set[str] = set()  # token Secrets of ended attempts asked to go (not kept across restarts)
        self.exp_written_at = 0.0
        self.exp_write_failed = False
        self.exp_status: dict = dict(experiment.get("status") or {})
        self.deleting = False  # the Experiment is being deleted: the daemon creates nothing more
        self.names_taken: dict[str, str] = {}  # Trial or pod name -> why it is not ours (Ready=False TrialNameTaken)
        self.invalid: str | None = None  # why the latest spec was refused (it keeps Ready=False)
        self.refused_generation: int | None = None  # metadata.generation of the latest refused spec, if any
        # why the experiment fails: a result lacked its metric (a journal entry; read from the status's
        # MetricMissing condition too, for a journal an operator before the entry wrote)
        self.metric_missing: str | None = next(
            (
                (c.get("message") or "").split("; stopping ")[0]
                for c in self.exp_status.get("conditions") or ()
                if c.get("reason") == "MetricMissing"
            ),
            None,
        )
        self.metric_missing_told = self.metric_missing is not None  # its MetricMissing event is posted
        stalled = st.get_condition(self.exp_status.get("conditions"), "TrialsStalled") or {}
        self.stall_told = stalled.get("reason") if stalled.get("status") == "True" else None  # its event is posted
        self.pod_refused: str | None = None  # why the API server refused the last trial pod (Ready=False too)
        self.degraded: str | None = None  # why the last pass failed (the Degraded condition)
        self.missing: set[int] = set()  # trial indices below the highest whose Trial is not in the API
        self.next_index = 0  # one more than the highest trial index created or seen
        # What the journal rebuilds after a restart, next to the searcher's and scheduler's own state
        self.applied: dict[str, Applied] = {}
        self.ended: set[str] = set()  # trials the searcher and scheduler were told have ended
        self.finish_told = False  # the scheduler was told the searcher is finished
        self.exploits: dict[str, Exploit] = {}  # trial -> PBT exploit decided at "attempt", not yet carried out
        # trial -> the user functions of its carried-out PBT exploit its pods call until one reports the config
        self.pod_explores: dict[str, dict] = {}
        # trial -> the attempt whose pod computed its config (sample_from values, a PBT explore step), until a
        # status write shows that config: a snapshot keeps those configs (the journal's entries may be gone)
        self.pod_configs: dict[str, int] = {}
        self.refused: dict[str, RefusedBatches] = {}  # trial -> its batches the collector refused
        self.notices: list[tuple[str | None, str, str, str]] = []  # events found between passes, for the next plan
        meta = experiment["metadata"]
        self.journal = Journal(meta["namespace"], meta["name"], meta.get("uid") or "")
        self.update(experiment)

    # ----- spec --------------------------------------------------------------------------
    def update(self, experiment: Mapping) -> None:
        """Take a new version of the Experiment (spec changes take effect on the next plan).

        Raises:
            InvalidSpec: as for the constructor; the previous spec stays in force.
        """
        try:
            check_spec_sizes(experiment.get("spec") or {})  # the limits the CRD states; only kubetune enforces them
            model = ExperimentSpec.parse(experiment.get("spec") or {})
            metric, mode = model.metric, model.mode
            parse_space(model.config)
            seed = model.search_algorithm.seed
            if seed is None:  # stable across restarts and spec edits: a function of the Experiment's uid
                uid = experiment["metadata"].get("uid") or experiment["metadata"]["name"]
                seed = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big")
            searcher = create_searcher(
                model.search_algorithm.name,
                model.config,
                metric,
                mode,
                num_samples=model.num_samples,
                seed=seed,
                **model.search_algorithm.params,
            )
            # several objectives go to the searcher alone (experiment_spec.py allows fifo, no metric-less stoppers)
            single = (None, None) if model.multi_objective else (metric, mode)
            scheduler = create_scheduler(model.scheduler.name, *single, **model.scheduler.params)
            stoppers = create_stoppers(model.stoppers, *single)
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidSpec(str(exc)) from exc
        except ImportError as exc:
            raise InvalidSpec(f"the operator cannot load what the spec chooses: {exc}") from exc
        if not (model.storage_uri or self.settings.storage.default_uri):
            raise InvalidSpec("spec.storage.uri is required (the operator has no default storage)")
        self._check_pod(experiment)
        old = getattr(self, "searcher", None)
        if old is not None and type(old) is type(searcher) and not searcher.stateless:
            try:
                searcher.set_state(old.get_state())  # model-based searchers keep what they learned
            except (ValueError, TypeError, KeyError) as exc:
                raise InvalidSpec(f"the new spec does not fit what the searcher has learned: {exc}") from exc
        params = model.scheduler.params
        if (
            getattr(self, "scheduler", None) is not None
            and type(self.scheduler) is type(scheduler)
            and params != self.scheduler_params
        ):
            raise InvalidSpec(
                "scheduler.params cannot change while the experiment runs (what the scheduler "
                "has decided belongs to the parameters it started with); the previous ones stay in "
                "force: create a new Experiment to use new ones"
            )
        if getattr(self, "stoppers", None) is not None and model.stoppers != self.spec.stoppers:
            raise InvalidSpec(
                "spec.stoppers cannot change while the experiment runs (what they saw belongs to "
                "the stoppers it started with); the previous ones stay in force"
            )
        if getattr(self, "stoppers", None) is None:
            self.stoppers = stoppers
        if getattr(self, "scheduler", None) is None or type(self.scheduler) is not type(scheduler):
            self.journal.snapshot_due = hasattr(self, "scheduler")
            self.scheduler, self.scheduler_params = scheduler, params
        self.journal.snapshot_due |= old is not None and not searcher.stateless
        stateless = searcher.stateless and self.scheduler.stateless and not self.stoppers.stoppers
        self.journal.enabled = not stateless or holds_function(model.config)
        self.journal.kinds = frozenset({"sampled"}) if stateless else None  # the values trial pods drew, alone
        self.searcher = searcher
        #: Likely mistakes in spec.config that are valid as constants; the validate handler posts them as events.
        self.warnings = space_warnings(model.config)
        self.experiment = experiment
        if getattr(self, "spec", None) != model:
            self.searcher_finished = False  # an edit (more samples) may give the searcher more to do
        if (metric, mode) != (getattr(self, "metric", None), getattr(self, "mode", None)):
            self._open, self._retired_counts, self._retired_best = dict(self.trials), st.trial_counts(()), None
            self._retired_front = []
        self.spec, self.metric, self.mode = model, metric, mode

    @property
    def name(self) -> str:
        return self.experiment["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.experiment["metadata"]["namespace"]

    # ----- observation -------------------------------------------------------------------
    def observe_trial(self, trial: Mapping) -> None:
        """Adopt a Trial seen in the API (after a restart, or created by us); our own status wins once known."""
        name = trial["metadata"]["name"]
        state = self.trials.get(name)
        if state is None:
            spec = trial.get("spec") or {}
            written = dict(trial.get("status") or {})
            status = {"phase": "Pending", "attempt": 0, **written}  # created, but its first status not written
            config = dict(spec.get("config") or {})
            self._add(
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
                )
            )
            self.next_index = max(self.next_index, self.trials[name].index + 1)
        elif state.uid is None:
            state.uid = trial["metadata"].get("uid")

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
        snapshot, entries = load(self.journal, configmaps)
        if snapshot is not None:
            self._load_snapshot(snapshot)
        for i, entry in enumerate(entries):
            if i and i % entries_per_step == 0:
                yield
            self._replay(entry)
        if snapshot is None and not entries:  # a new Experiment, or one from before the journal
            for trial in sorted(self.trials.values(), key=lambda t: t.index):
                if trial.phase not in TERMINAL:
                    self._do(Add(trial.name))
        highest = max((t.index for t in self.trials.values()), default=-1)
        self.missing = set(range(highest + 1)) - {t.index for t in self.trials.values()}
        self.restored = True

    def snapshot(self) -> dict:
        """What the journal keeps of a snapshot: searcher, scheduler and the controller's own decisions; a copy
        that later calls do not change (the journal encodes it in steps)."""
        last = {name: self.trials[name].status.get("lastResult") for name in self.applied if name in self.trials}
        return {
            "scheduler": self.scheduler.get_state(),
            "stoppers": self.stoppers.get_state(),
            "searcher": None if self.searcher.stateless else self.searcher.get_state(),
            "applied": {name: value.as_json() for name, value in self.applied.items()},
            "ended": sorted(self.ended),
            "finishTold": self.finish_told,
            "exploits": {name: dict(value) for name, value in self.exploits.items()},
            "podExplores": {name: dict(value) for name, value in self.pod_explores.items()},
            "podConfigs": {
                name: [attempt, dict(self.trials[name].config)]
                for name, attempt in sorted(self.pod_configs.items())
                if name in self.trials
            },
            "lastResult": {name: result for name, result in last.items() if result},
            "metricMissing": self.metric_missing,
        }

    def _check_pod(self, experiment: Mapping) -> None:
        """Build a sample trial pod: the spec's template must make a valid one that meets the operator's
        Pod Security level (``trials.pod_security_level``)."""
        try:
            pod = sample_pod(experiment, self.settings)
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidSpec(f"no trial pod can be made of this spec: {exc}") from exc
        level = self.settings.trials.pod_security_level
        broken = violations(pod, level)
        if broken:
            raise InvalidSpec(
                f"spec.template makes trial pods break the {level!r} Pod Security level, the loosest "
                f"this operator allows (its trials.pod_security_level setting): {'; '.join(broken)}"
            )

    def _load_snapshot(self, snapshot: dict) -> None:
        try:
            self.scheduler.set_state(snapshot["scheduler"])
            self.stoppers.set_state(snapshot.get("stoppers") or [])
            if snapshot["searcher"] is not None and not self.searcher.stateless:
                self.searcher.set_state(snapshot["searcher"])
        except (ValueError, TypeError, KeyError) as exc:
            raise JournalCorrupt(f"the searcher or scheduler cannot resume from its snapshot: {exc}") from exc
        self.applied = {name: Applied.from_json(value) for name, value in snapshot["applied"].items()}
        self.ended, self.finish_told = set(snapshot["ended"]), snapshot["finishTold"]
        self.exploits = {name: dict(value) for name, value in (snapshot.get("exploits") or {}).items()}
        self.pod_explores = {name: dict(value) for name, value in (snapshot.get("podExplores") or {}).items()}
        self.metric_missing = self.metric_missing or snapshot.get("metricMissing")
        for name, (attempt, config) in (snapshot.get("podConfigs") or {}).items():
            self._show_pod_config(name, config, attempt)  # the scheduler's state has them; the Trial may not
        for name, result in snapshot["lastResult"].items():
            trial = self.trials.get(name)
            if trial is not None and (trial.status.get("iteration") or 0) < (result.get("training_iteration") or 0):
                self._show_result(trial, result)

    # ----- the journaled calls: every change to what the searcher and scheduler know ----------
    def _do(self, entry: Entry) -> Any:
        """Apply ``entry`` and record it in the journal (recorded only once applied without error)."""
        outcome = self._apply(entry)
        self.journal.record(entry.as_json())
        return outcome

    def _replay(self, stored: list) -> None:
        """Carry out one stored journal entry (a JSON list) after a restart, as :meth:`_apply` did it live."""
        self._apply(entry_from_json(stored))

    def _apply(self, entry: Entry) -> Any:
        """Carry out one journal entry, live or replayed after a restart: the same calls, in the same order."""
        if isinstance(entry, Add):
            self.scheduler.on_trial_add(entry.trial)
            if entry.trial in self.trials:
                trial = self.trials[entry.trial]
                config = trial.spec_config if trial.spec_config is not None else trial.config
                self.scheduler.set_trial_config(entry.trial, config)
        elif isinstance(entry, Suggest):
            suggestion = self.searcher.suggest(entry.trial)
            if suggestion is not None and not isinstance(suggestion, dict):
                self.searcher_finished = True  # replayed after a restart too
            return suggestion
        elif isinstance(entry, Results):
            return self._apply_results(entry.trial, entry.attempt, entry.results)
        elif isinstance(entry, End):
            self._apply_end(entry.trial, entry.result, entry.how)
            self._take_exploits()
        elif isinstance(entry, Choose):
            self.finish_told |= entry.search_finished
            chosen = self.scheduler.choose_trial_to_run(entry.paused, entry.search_finished)
            self._take_exploits()
            return chosen
        elif isinstance(entry, Explored):
            self._apply_explored(entry.trial, entry.outcome)
        elif isinstance(entry, Sampled):
            self._apply_sampled(entry.trial, entry.config, entry.attempt)
        else:  # MetricMissing
            self.metric_missing = self.metric_missing or entry.message
        return None

    def _apply_results(self, trial: str, attempt: int, results: list[dict]) -> str:
        decision, exploit = "continue", None
        for result in results:
            stop, _ = should_stop(result, self.spec.stop)
            if self.stoppers(trial, result) or stop or result.get("done"):
                # as Ray's controller: a result that ends the trial reaches the scheduler as the trial's
                # completion (on_trial_complete, when its pod ends), never as a result to decide on, so
                # it cannot make the trial a PBT donor or a rung winner after it has stopped
                d = "stop"
            else:
                d = self.scheduler.on_trial_result(trial, result)
                if d == "pause":
                    exploit = self.scheduler.take_exploit(trial)
                budget = self.scheduler.take_budget(trial)  # HyperBandForBOHB
                if budget is not None:  # a rung result, handed to the searcher with its budget as Ray does
                    self.searcher.on_trial_result(trial, {**result, "hyperband_info": {"budget": budget}})
            if DECISION_RANK[d] > DECISION_RANK[decision]:
                decision = d
            if exploit is not None:  # the rest of the batch belongs to the lineage the trial leaves
                self.exploits[trial] = {**exploit, "attempt": attempt}
                break
        self._take_exploits(skip=trial)
        if results:
            self.searcher.on_trial_result(trial, results[-1])
            before = self.applied.get(trial, Applied(0, "continue", attempt))
            seen = max(
                (r["training_iteration"] for r in results if is_number(r.get("training_iteration"))),
                default=self._seen(trial, attempt),
            )
            if (
                before.attempt == attempt
                and before.decision in ("pause", "stop")
                and DECISION_RANK[before.decision] > DECISION_RANK[decision]
            ):
                decision = before.decision  # an attempt told to pause or stop is told so until it ends
            # with an exploit, the next attempt reports again from the donor's checkpoint
            self.applied[trial] = Applied(seen, decision, attempt, None if exploit is None else exploit["iteration"])
            if trial in self.trials:
                self._show_result(self.trials[trial], results[-1])
        return decision

    def _take_exploits(self, skip: str | None = None) -> None:
        """Take the exploits synchronous PBT decided for trials other than ``skip`` (they wait, paused, at their
        last applied attempt); the next attempt of each reports again from its donor's checkpoint."""
        for name, exploit in self.scheduler.take_exploits().items():
            if name == skip or name not in self.applied:
                continue
            self.exploits[name] = {**exploit, "attempt": self.applied[name].attempt}
            self.applied[name] = self.applied[name]._replace(restart_at=exploit["iteration"])

    def _apply_explored(self, trial: str, outcome: dict) -> None:
        exploit = self.exploits.get(trial)
        if trial in self.pod_explores or (exploit is not None and exploit.get("explore")):
            self._apply_pod_explored(trial, outcome["config"], outcome.get("attempt"))
            return
        try:
            chosen = self.scheduler.explored(trial, outcome)
        except ValueError as exc:
            raise JournalCorrupt(f"an explored entry of {trial!r} fits no open exploit: {exc}") from exc
        exploit = self.exploits.get(trial)
        if exploit is not None and exploit["config"] is None:
            exploit.update(chosen)
            if outcome.get("error"):
                exploit["error"] = outcome["error"]

    def _apply_sampled(self, trial: str, config: dict, attempt: int) -> None:
        """The values ``trial``'s pod (of ``attempt``) drew for its config's ``sample_from`` functions: the trial's
        config from now on (its ``status.config``, the config its later attempts get, a PBT donor's config), as
        Ray draws them once per trial."""
        self.scheduler.sampled(trial, config)
        self._show_pod_config(trial, config, attempt)

    def _apply_pod_explored(self, trial: str, config: dict, attempt: int | None) -> None:
        """The config ``trial``'s pod of ``attempt`` chose by calling the user functions of its PBT exploit: the
        trial's config from now on (its status, its last perturbation record, the scheduler's donor config); its
        later pods call nothing. ``attempt`` is None in an entry an earlier operator journaled without it."""
        self.pod_explores.pop(trial, None)
        exploit = self.exploits.get(trial)
        if exploit is not None and exploit.get("explore"):  # replayed before the exploit is known carried out
            exploit.update(explore=None, config=dict(config))
        self.scheduler.explored(trial, {"config": config})
        self._show_pod_config(trial, config, attempt)

    def _show_pod_config(self, trial: str, config: dict, attempt: int | None) -> None:
        """Make ``config``, computed by ``trial``'s pod of ``attempt``, the Trial's config and ``status.config``
        (and the new values of its last perturbation record), unless the Trial's status is of a later attempt:
        replayed after a restart, an entry never undoes a later exploit's config, which that status shows."""
        state = self.trials.get(trial)
        if state is None or (attempt is not None and state.attempt > attempt):
            return
        state.config = dict(config)
        state.status["config"] = state.config
        records = state.status.get("perturbations") or []
        if records:  # new objects: the status writer compares them with what it last wrote
            record = records[-1]
            new = {**record, "newConfig": {k: config.get(k) for k in record.get("newConfig") or {}}}
            state.status["perturbations"] = [*records[:-1], new]
        state.dirty = True
        if attempt is not None:
            self.pod_configs[trial] = attempt

    # ----- PB2's explore steps, computed off the event loop (kubetune_operator.explore_pool) -------------
    def exploration(self) -> dict | None:
        """The scheduler's next explore job (PB2's ``next_exploration``), or None: nothing to compute."""
        return self.scheduler.next_exploration()

    def explored(self, trial: str, outcome: dict) -> None:
        """The outcome of :meth:`exploration`'s job for ``trial`` (``{"error": ...}`` when it failed): journaled,
        and the exploit's config is chosen; the trial's next attempt starts in a later pass.

        Raises:
            JournalCorrupt: ``trial`` is not the job's (the explorer mixed up Experiments: a bug).
        """
        self._do(Explored(trial, outcome))

    def _seen(self, trial: str, attempt: int) -> int:
        """The highest ``training_iteration`` of ``trial`` already applied, as ``attempt`` counts: results at or
        below it are not new. An attempt after a PBT exploit starts over at the donor's iteration."""
        applied = self.applied.get(trial)
        if applied is None:
            return 0
        return applied.restart_at if applied.restart_at is not None and attempt > applied.attempt else applied.seen

    def _apply_end(self, trial: str, result: dict | None, how: str) -> None:
        self.ended.add(trial)
        self.applied.pop(trial, None)
        if how == "complete":
            self.scheduler.on_trial_complete(trial, result)
        else:
            self.scheduler.on_trial_remove(trial)
        self.searcher.on_trial_complete(trial, result, error=how == "error", early_stopped=how == "remove")

    def _end(self, trial: TrialState, how: str) -> None:
        """Tell the scheduler and searcher that ``trial`` ended (once): ``complete``, ``remove`` or ``error``."""
        if trial.name not in self.ended:
            self._do(End(trial.name, trial.status.get("lastResult"), how))

    def _show_result(self, trial: TrialState, result: dict) -> None:
        trial.status["lastResult"] = st.compact_result(result, self.metric)
        iteration = result.get("training_iteration")  # checked by the collector; not by an older journal
        trial.status["iteration"] = iteration if is_iteration(iteration) else None
        value = st.metric_value(result, self.metric) if isinstance(self.metric, str) else None
        if value is not None:
            trial.status["metricValue"] = value
        trial.dirty = True

    def trial_created(self, name: str, uid: str | None) -> None:
        """The daemon created (or found, ours) Trial ``name``; None ``uid`` means the create failed: it is asked
        for again next pass (with the same config: suggestions are journaled and idempotent)."""
        if uid is not None:
            self.names_taken.pop(name, None)
        if uid is None:
            trial = self.trials.pop(name, None)
            if trial is not None:
                self._open.pop(name, None)
                self._by_label.pop(label_value(name), None)
                self.missing.add(trial.index)
        else:
            self.trials[name].uid = uid

    def pod_rejected(self, message: str) -> None:
        """The API server refused a trial pod for what it contains (``spec.template``, volumes...): the
        Experiment is not Ready, with the API server's message, until its spec changes or a trial pod is
        accepted (say, the namespace's Pod Security level was relaxed)."""
        self.pod_refused = message

    def name_taken(self, name: str, message: str) -> None:
        """Trial, pod, or gang Service or PodGroup ``name`` exists and is not this Experiment's (``message`` says
        whose and what to do): it is never used; the Experiment is ``Ready=False`` (``TrialNameTaken``), with a
        Warning event the first time, until the name is free and the create succeeds (asked for again every pass,
        with back-off)."""
        if name not in self.names_taken:
            self.notices.append((None, "Warning", "TrialNameTaken", message))
        self.names_taken[name] = message

    def pod_accepted(self, *names: str) -> None:
        """A trial pod was created (``names``: the pod's, and its gang's Service and PodGroup's): what refused the
        earlier one, or held one of its names, no longer does."""
        self.pod_refused = None
        for name in names:
            self.names_taken.pop(name, None)

    def plan_not_carried_out(self, plan: "Plan") -> None:
        """The journal could not be committed, so nothing of ``plan`` was sent: ask for it all again."""
        for manifest in plan.create_trials:
            self.trial_created(manifest["metadata"]["name"], None)
        for manifest in plan.create_pods:
            self.created_pods.pop(manifest["metadata"]["name"], None)
        self.secrets_deleted -= {name for name, _ in plan.collect_secrets}
        for name in plan.trial_status:
            self.status_write_failed(name)
        if plan.experiment_status:
            self.status_write_failed(None)

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
        elif trial in self.trials:
            state = self.trials[trial]
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
            if trial not in self._open:  # retired: open again until its status is written
                self._open[trial] = state
                self._tally_retired(state, -1)

    def status_written(self, trial: str) -> None:
        """A status patch of ``trial`` went through: it counts as writable again, and a config its pod computed
        (:meth:`_show_pod_config`) that the patch showed need not be kept in the journal's snapshots."""
        state = self.trials.get(trial)
        if state is not None and trial in self.pod_configs and state.written.get("config") == state.config:
            del self.pod_configs[trial]
        if state is not None and state.write_failures:
            state.write_failures, state.write_error = 0, None

    def unwritable(self, trial: str) -> bool:
        """Whether ``trial``'s status writes failed :data:`STATUS_WRITE_ATTEMPTS` times in a row (the last one
        included): the Experiment goes on and may finish without waiting for them."""
        state = self.trials.get(trial)
        return state is not None and state.write_failures >= STATUS_WRITE_ATTEMPTS

    def trial_dir(self, trial: str) -> str:
        """The storage folder URI of ``trial`` (:func:`kubetune_operator.builders.experiment_trial_dir`)."""
        return experiment_trial_dir(self.experiment, self.settings, trial)

    def results_refused(self, trial: str, attempt: int, reason: str) -> None:
        """The collector refused a batch of ``trial``'s ``attempt`` for ``reason`` (a value the operator cannot
        take): a Warning event ``ResultsRefused`` on the Trial in the next pass, at most one per trial every
        :data:`REFUSED_EVENT_INTERVAL_S` seconds, counting the batches refused since the last one."""
        entry = self.refused.setdefault(trial, RefusedBatches(0, reason, -math.inf))
        entry.count, entry.reason = entry.count + 1, f"attempt {attempt}: {reason}"

    def _report_refused(self, plan: Plan, now: float) -> None:
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

    def trial_stalled(self, trial: str, stall: dict | None) -> None:
        """What stalls ``trial``'s current attempt, as its runtime reports it with each batch (``{"reason",
        "message"}``, a reason of ``kubetune.env.STALL_REASONS``; None: nothing): the Trial's ``status.reason``
        and ``message`` while it lasts, summed up in the Experiment's ``TrialsStalled`` condition (with a
        Warning event when it turns True)."""
        state = self.trials.get(trial)
        if state is None or state.phase in TERMINAL or state.phase == "Paused":
            return
        if stall is not None:
            message = st.truncate_message(stall["message"], 1024)
            if (state.status.get("reason"), state.status.get("message")) != (stall["reason"], message):
                state.status.update(reason=stall["reason"], message=message)
                state.dirty = state.phase_changed = True  # written in the next pass, not at the next interval
        elif state.status.get("reason") in STALL_REASONS:
            state.status["reason"] = "Running" if state.phase == "Running" else "Starting"
            state.status.pop("message", None)
            state.dirty = state.phase_changed = True

    def token(self, trial: str, attempt: int) -> str:
        """The collector bearer token of ``trial``'s ``attempt`` (see :func:`kubetune_operator.tokens.mint_token`)."""
        return mint_token(self.key, self.namespace, trial, attempt, self.trials[trial].uid or "")

    # ----- results from the collector ----------------------------------------------------
    def record_results(
        self,
        trial: str,
        attempt: int,
        results: list[dict],
        checkpoint: dict | None,
        uid: str | None = None,
        explored: dict | None = None,
    ) -> str | None:
        """Take a batch of results of ``trial``'s ``attempt``; return the decision for the runtime.

        Args:
            explored: the config the attempt computed in its pod, journaled once, before the batch's results:
                its PBT exploit's user functions called (an ``explored`` entry), or the values it drew for the
                config's ``sample_from`` functions (a ``sampled`` entry); ignored when none is awaited.
            uid: the Trial uid the reporting pod's token names; another than this Trial's is stale (a
                pod of an earlier Experiment of the same name). None: not checked.

        Returns:
            ``continue``, ``checkpoint``, ``pause`` or ``stop``; None when ``attempt`` is not the
            trial's current one, or ``uid`` not its uid (a stale token: the collector answers 401).
        """
        state = self.trials.get(trial)
        if state is None or attempt != state.attempt or (uid is not None and uid != state.uid):
            return None
        if state.phase in TERMINAL or self.stop_reason or self.spec.suspend:
            return "pause" if self.spec.suspend and state.phase not in TERMINAL else "stop"
        if explored is not None and trial in self.pod_explores:  # before any result of the attempt
            self._do(Explored(trial, {"config": explored, "attempt": attempt}))
        elif explored is not None and holds_function(state.config):
            if draws_for(state.config, explored):
                self._do(Sampled(trial, explored, attempt))
            else:  # not what kubetune's runtime sends: the trial goes on, its later attempts drawing again
                log.warning(
                    "trial %s/%s reported a config that is not its own with values drawn", self.namespace, trial
                )
        applied = self.applied.get(trial, Applied(0, "continue", attempt))
        decision, decided_by = applied.decision, applied.attempt
        if applied.restart_at is not None and decided_by == attempt:
            return "pause"  # exploited by PBT: this attempt's later results belong to the lineage it leaves
        seen = self._seen(trial, attempt)
        fresh = [r for r in results if not (is_number(r.get("training_iteration")) and r["training_iteration"] <= seen)]
        if fresh and self._lacks_metric(trial, fresh):
            return "stop"  # as Ray's run raises at such a result: it never reaches the searcher or scheduler
        if fresh:  # a re-sent batch, or iterations a retry runs again, never reach the scheduler twice
            decision = self._do(Results(trial, attempt, fresh))
        elif decided_by != attempt:
            decision = "continue"
        if checkpoint and checkpoint.get("uri"):
            state.status["checkpoint"] = {"uri": checkpoint["uri"], "iteration": checkpoint.get("iteration")}
            state.dirty = True
        return decision

    def _lacks_metric(self, trial: str, results: list[dict]) -> bool:
        """Whether a result of ``trial`` lacks the experiment's metric (:func:`kubetune.resultkeys.missing_metrics`,
        Ray's strict metric check); the first such result makes the experiment fail (``MetricMissing``)."""
        metrics = self.metric if isinstance(self.metric, tuple) else (self.metric,) if self.metric else ()
        required = tuple(a for a in self.scheduler.required_attrs if a not in metrics)
        for result in results if metrics or required else ():
            missing = missing_metrics(result, metrics + required)
            if missing:
                if self.metric_missing is None:
                    expects = f"spec.{'objectives' if self.spec.multi_objective else 'metric'}"
                    if set(missing) & set(required):  # PBT's require_attrs (Ray raises at such a result)
                        expects += " and the scheduler's require_attrs (set it to false to skip such results)"
                    self._do(  # journaled: the collector's "stop" goes out only once it is committed
                        MetricMissing(
                            f"trial {trial} returned a result which did not include the specified metric(s) "
                            f"{', '.join(missing)} that {expects} "
                            f"expects: make the trainable report it (the result has {', '.join(sorted(result)[:20])})"
                        )
                    )
                return True
        return False

    # ----- deciding --------------------------------------------------------------------
    def best(self) -> dict | None:
        """The best Trial by ``metric``/``mode`` as :func:`status.best_trial` gives it; None without a metric
        and mode or before any Trial reports the metric."""
        if not self.metric or not self.mode or self.spec.multi_objective:
            return None
        bids = [t.as_object() for t in self._open.values()]
        if self._retired_best is not None:
            bids.append(self._retired_best.as_object())
        return st.best_trial(bids, self.metric, self.mode)

    def pareto(self) -> list[dict]:
        """The Pareto front of a multi-objective Experiment as :func:`status.pareto_front` gives it (the open
        trials and the retired ones on the front: a trial a retired one dominates is dominated by one on it);
        empty for one objective."""
        if not self.spec.multi_objective:
            return []
        bids = {t.name: t for t in [*self._retired_front, *self._open.values()]}  # a re-opened one counts once
        return st.pareto_front([t.as_object() for t in bids.values()], self.metric, self.mode)

    def _counts(self) -> dict[str, int]:
        """:func:`status.trial_counts` of every trial: the retired ones' kept counts plus the open ones'."""
        counts = st.trial_counts(t.phase for t in self._open.values())
        return {key: value + self._retired_counts[key] for key, value in counts.items()}

    def _tally_retired(self, trial: TrialState, change: int) -> None:
        """Add ``change`` (+1 retiring, -1 opened again) to the retired trials' counts for ``trial``'s phase."""
        self._retired_counts[trial.phase.lower()] += change
        self._retired_counts["total"] += change

    def _add(self, trial: TrialState) -> None:
        self.trials[trial.name] = self._open[trial.name] = self._by_label[label_value(trial.name)] = trial

    def _retire(self) -> None:
        """Retire the open trials that are terminal with their status written (see ``_open``)."""
        retiring = [t for t in self._open.values() if t.phase in TERMINAL and not t.dirty and t.uid is not None]
        for trial in retiring:
            del self._open[trial.name]
            self._tally_retired(trial, +1)
        if retiring and self.spec.multi_objective:
            bids = {t.name: t.as_object() for t in self._retired_front + retiring}
            front = st.pareto_front(bids.values(), self.metric, self.mode)
            self._retired_front = [self.trials[p["trial"]] for p in front]
        elif retiring and self.metric and self.mode:
            bids = [t.as_object() for t in retiring + ([self._retired_best] if self._retired_best else [])]
            best = st.best_trial(bids, self.metric, self.mode)
            if best is not None:
                self._retired_best = self.trials[best["name"]]

    def stopping_reason(self, now: float | None = None) -> str | None:
        """Why the whole experiment is ending early, or None: GoalReached, TimeBudgetExhausted,
        MaxFailedTrialsExceeded (the reasons of :func:`status.experiment_phase`)."""
        decision = self._phase_decision(now if now is not None else time.time())
        return decision.reason if decision.stop_remaining else None

    def _phase_decision(self, now: float) -> st.PhaseDecision:
        counts = self._counts()
        goal = self.spec.goal
        best = self.best() if goal is not None else None  # O(trials): only when a goal needs it
        started = self.exp_status.get("startTime")
        budget = self.spec.time_budget_s
        budget_over = bool(
            budget is not None
            and started
            and now - datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() >= budget
        )
        max_failed = self.spec.failure.max_failed_trials
        return st.experiment_phase(
            counts,
            suspended=self.spec.suspend,
            search_finished=self.search_finished,
            goal_reached=best is not None and goal_reached(best["metricValue"], goal, self.mode),
            time_budget_exhausted=budget_over,
            max_failed_trials=max_failed,
            stoppers_stop_all=self.stoppers.stop_all(),
            metric_missing=self.metric_missing,
        )

    def _set(self, trial: TrialState, now: float, **changes: Any) -> None:
        """Apply ``changes`` to the trial's status (None removes a key), stamping start/completion times."""
        if "phase" in changes and changes["phase"] != trial.phase:
            trial.phase_changed = True
            if changes["phase"] == "Running":
                trial.status.setdefault("startTime", _now_iso(now))
            if changes["phase"] in TERMINAL:
                trial.status["completionTime"] = _now_iso(now)
        for key, value in changes.items():
            if value is None:
                trial.status.pop(key, None)
            else:
                trial.status[key] = value
        trial.dirty = True

    def _disrupted(self, plan: Plan, trial: TrialState, reason: str, message: str, now: float) -> None:
        """Retry an attempt Kubernetes ended (eviction, preemption, drain, deletion, a SIGTERM the trial did
        not ask for) from the latest checkpoint, without counting it against ``failure.maxFailures``, as a
        Job's ``podFailurePolicy`` ignores ``DisruptionTarget``."""
        self._set(trial, now, phase="Pending", reason=reason, message=message, attempt=trial.attempt + 1)
        plan.events.append(
            (
                trial.name,
                "Warning",
                "TrialDisrupted",
                f"attempt {trial.attempt - 1} ended by {reason}: {message}; retrying from the latest "
                "checkpoint (not counted as a failure)",
            )
        )

    def _fail_attempt(self, plan: Plan, trial: TrialState, reason: str, message: str, now: float) -> None:
        failures = int(trial.status.get("failures") or 0) + 1
        max_failures = self.spec.failure.max_failures
        message = st.truncate_message(message or reason, st.MAX_TRIAL_MESSAGE_BYTES)
        if 0 <= max_failures < failures:  # -1: retry without limit
            self._set(trial, now, phase="Failed", reason=reason, message=message, failures=failures)
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "TrialFailed",
                    f"attempt {trial.attempt} failed ({reason}); no retries left: {message[-300:]}",
                )
            )
            self._end(trial, "error")
        else:
            self._set(
                trial,
                now,
                phase="Pending",
                reason="Retrying",
                message=message,
                failures=failures,
                attempt=trial.attempt + 1,
            )
            limit = "unlimited" if max_failures < 0 else max_failures
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "TrialRetried",
                    f"attempt {trial.attempt - 1} failed ({reason}); retry {failures} of {limit} "
                    "from the latest checkpoint",
                )
            )

    def _finish(self, plan: Plan, trial: TrialState, reason: str, now: float, message: str = "") -> None:
        self._set(trial, now, phase="Succeeded", reason=reason, message=message or None)
        plan.events.append(
            (trial.name, "Normal", "TrialSucceeded", f"{reason} at iteration {trial.status.get('iteration')}")
        )
        self._end(trial, "complete" if reason == "Completed" else "remove")

    def _pod_ended(self, plan: Plan, trial: TrialState, pod: PodView, stop_reason: str | None, now: float) -> None:
        outcome, refused = (
            parse_outcome(pod.message, self.trial_dir(trial.name)) if pod.phase == "Succeeded" else ({}, [])
        )
        if refused:
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "OutcomeRefused",
                    st.truncate_message(f"pod {pod.name}'s termination message: left out: {'; '.join(refused)}", 900),
                )
            )
        kind = outcome.get("outcome")
        result = outcome.get("result")
        if result is not None and (result.get("training_iteration") or 0) > (trial.status.get("iteration") or 0):
            self._show_result(trial, result)  # its last results never reached this operator (it was down)
        checkpoint, iteration = outcome.get("checkpoint"), outcome.get("iteration")
        if checkpoint is not None and (iteration or 0) > ((trial.status.get("checkpoint") or {}).get("iteration") or 0):
            trial.status["checkpoint"] = {"uri": checkpoint, "iteration": iteration}
        end = "Succeeded" if pod.phase == "Succeeded" else "Disrupted" if pod.disruption or pod.deleting else "Failed"
        situation = "stopping" if stop_reason else "suspending" if self.spec.suspend else "running"
        step = transition(end, kind, situation)
        reason = stop_reason if step.reason == STOP_REASON else step.reason
        if step.pod_reason:
            reason = (pod.disruption if end != "Failed" else pod.reason) or reason
        if step.action == "complete" or step.action == "finish":
            self._finish(plan, trial, reason, now)
        elif step.action == "pause":
            self._set(trial, now, phase="Paused", reason=reason, message=None)
        elif step.action == "retry":
            self._disrupted(
                plan,
                trial,
                reason,
                st.truncate_message(
                    _RETRY_MESSAGES.get(step.reason, "") or pod.message or "the trial's pod was deleted", 300
                ),
                now,
            )
        elif step.reason == "NoOutcome":
            self._fail_attempt(
                plan,
                trial,
                reason,
                "the trial's process exited 0 without the runtime's outcome "
                "(is the pod's command `python -m kubetune.runtime`?)",
                now,
            )
        else:
            self._fail_attempt(
                plan,
                trial,
                reason,
                pod.message
                or _KILLED_MESSAGES.get(reason)
                or f"exit code {pod.exit_code} without the runtime's message; `kubectl logs {pod.name}` "
                "shows what the program printed",
                now,
            )

    def plan(self, pods: Mapping[str, PodView], now: float | None = None) -> Plan:
        """Compare desired with observed state and return what to do (level-based, idempotent).

        Args:
            pods: the experiment's trial pods by name, as observed.
            now: seconds since the epoch (default: the clock).
        """
        now = time.time() if now is None else now
        observed, pods = pods, fold(pods)
        lingering = self._lingering(observed)
        plan = Plan(events=self.notices)
        self.notices = []
        self._report_refused(plan, now)
        if not self.adopted:  # first pass after a (re)start: a newer attempt than the status says wins
            for pod in pods.values():
                trial = self.trials.get(pod.trial)
                if trial is not None and pod.attempt > trial.attempt and pod.owner_uid in (None, trial.uid):
                    self._set(trial, now, attempt=pod.attempt, podName=pod.name)
            self.adopted = True  # now the collector may take results: every trial's attempt is known
        self.exp_status.setdefault("startTime", _now_iso(now))
        stop_reason = self.stopping_reason(now)
        suspended = self.spec.suspend
        grace = self.settings.trials.termination_grace_period_s
        for trial in sorted(self._open.values(), key=lambda t: t.index):
            if trial.phase in TERMINAL or trial.uid is None:
                continue
            pod = pods.get(pod_name(trial.name, trial.attempt))
            if pod is not None and pod.owner_uid and pod.owner_uid != trial.uid:
                pod = None  # an earlier Trial's pod of the same name, still being garbage-collected
            if pod is not None:
                self.created_pods.pop(pod.name, None)
            pod_active = pod is not None and not pod.gone and pod.phase in ("Pending", "Running")
            if (stop_reason or suspended) and pod_active:
                self._delete_attempt(plan, pod, grace)
                continue
            if pod is not None and pod.phase == "Pending" and self._gang_timed_out(plan, trial, pod, now):
                continue
            if pod is not None and (pod.phase in TERMINAL or pod.gone):  # a pod deleted while it ran ended too
                if trial.phase != "Paused":  # a paused trial's attempt ended before: its outcome is recorded
                    self._pod_ended(plan, trial, pod, stop_reason, now)
                self._delete_attempt(plan, pod, grace)  # a gang's members still running
                pod = None
                if trial.phase in TERMINAL:
                    continue
            if stop_reason:
                self._finish(plan, trial, stop_reason, now, "stopped before it ran" if trial.phase == "Pending" else "")
                continue
            if suspended:
                if trial.phase != "Paused":
                    self._set(trial, now, phase="Paused", reason="Suspended", message=None)
                continue
            if trial.phase == "Paused":
                if trial.status.get("reason") != "Suspended":
                    continue  # scheduler-paused: resumed below when a slot frees
                self._set(trial, now, phase="Pending", reason="Resumed", attempt=trial.attempt + 1, message=None)
                plan.events.append((trial.name, "Normal", "TrialResumed", "resuming from the latest checkpoint"))
            if (
                pod is None
                and trial.status.get("podName") == pod_name(trial.name, trial.attempt)
                and trial.phase == "Running"
            ):
                self._disrupted(plan, trial, "PodDeleted", "the trial's pod disappeared", now)
            if pod is None:
                if self._may_create(trial, lingering, now):
                    self._create_pod(plan, trial, now)
                if trial.phase != "Pending":
                    self._set(trial, now, phase="Pending")
            elif pod.phase == "Running" and trial.phase != "Running" and not pod.deleting:
                stalled = trial.status.get("reason") in STALL_REASONS  # its runtime said so before this pass
                changes = {} if stalled else {"reason": "Running", "message": None}
                self._set(trial, now, phase="Running", scheduleTimeouts=None, nextAttemptTime=None, **changes)
                running = f"its {pod.gang.total} pods are" if pod.gang else f"pod {pod.name} is"
                plan.events.append((trial.name, "Normal", "TrialStarted", f"{running} running"))
            elif pod.phase == "Pending" and pod.waiting and trial.status.get("reason") != pod.waiting[0]:
                reason, message = pod.waiting
                self._set(trial, now, reason=reason, message=st.truncate_message(message, 1024))
                plan.events.append((trial.name, "Warning", "TrialWaiting", f"pod {pod.name}: {reason}: {message}"))
            elif pod.phase == "Pending" and not pod.waiting and trial.status.get("reason") in WAITING_CAUSES:
                self._set(trial, now, reason="Starting", message=None)  # the cause went away
            if pod is not None and pod.gang:
                members = {"ready": pod.gang.ready, "total": pod.gang.total}
                if trial.status.get("gang") != members:
                    self._set(trial, now, gang=members)
        stop_reason = self.stop_reason = self.stopping_reason(now)  # outcomes of this pass count too
        self._perturb(plan, now, stop_reason, suspended)
        self._resume_paused(plan, now, stop_reason, suspended)
        self._new_trials(plan, now, stop_reason, suspended)
        if self.metric_missing and not self.metric_missing_told:
            self.metric_missing_told = True
            plan.events.append((None, "Warning", "MetricMissing", st.truncate_message(self.metric_missing, 1024)))
        self._collect(plan, observed)
        self._statuses(plan, now)
        self._retire()
        return plan

    def _delete_attempt(self, plan: Plan, pod: PodView, grace: int) -> None:
        """Delete the attempt's pod, or every member of its gang still Pending or Running."""
        if pod.gang is not None:
            plan.delete_pods.extend((name, grace) for name in pod.gang.active)
        elif not pod.deleting and not pod.gone and pod.phase in ("Pending", "Running"):
            plan.delete_pods.append((pod.name, grace))

    def _lingering(self, pods: Mapping[str, PodView]) -> dict[str, int]:
        """``{trial label: newest attempt}`` of gang members still Pending or Running, deleting or not."""
        lingering: dict[str, int] = {}
        for view in pods.values():
            if view.rank is not None and not view.gone and view.phase in ("Pending", "Running"):
                lingering[view.trial] = max(lingering.get(view.trial, -1), view.attempt)
        return lingering

    def _may_create(self, trial: TrialState, lingering: Mapping[str, int], now: float) -> bool:
        """Whether the trial's next gang may be created now: not before the pods of its earlier attempts
        are gone (a gang's resources are never held twice), nor during the back-off of a timed-out gang."""
        if lingering.get(label_value(trial.name), trial.attempt) < trial.attempt:
            return False
        after = trial.status.get("nextAttemptTime")
        return not after or st.parse_time(after).timestamp() <= now

    def _gang_timed_out(self, plan: Plan, trial: TrialState, pod: PodView, now: float) -> bool:
        """The operator's own all-or-nothing rule: a gang with some members scheduled and others not for
        longer than ``workers.scheduleTimeoutSeconds`` (since its first member was bound to a node: time spent
        waiting for admission, all members unbound, does not count) is deleted whole,
        so that what its scheduled pods hold is free for others, and retried as the next attempt after a
        back-off (10 s doubling per timeout in a row, at most 5 min); not counted as a failure."""
        timeout = self.spec.workers_schedule_timeout_s
        gang = pod.gang
        if gang is None or not timeout or not 0 < gang.scheduled < gang.total or not gang.scheduled_at:
            return False
        waited = now - st.parse_time(gang.scheduled_at).timestamp()
        if waited < timeout:
            return False
        self._delete_attempt(plan, pod, 0)
        timeouts = int(trial.status.get("scheduleTimeouts") or 0) + 1
        backoff = min(GANG_BACKOFF_S[0] * 2 ** (timeouts - 1), GANG_BACKOFF_S[1])
        message = (
            f"only {gang.scheduled} of the gang's {gang.total} pods were scheduled after {waited:.0f} s "
            f"(workers.scheduleTimeoutSeconds {timeout}); deleted them all to free their nodes, retrying in "
            f"{backoff:.0f} s"
        )
        self._set(
            trial,
            now,
            phase="Pending",
            reason="GangTimeout",
            message=message,
            attempt=trial.attempt + 1,
            scheduleTimeouts=timeouts,
            nextAttemptTime=_now_iso(now + backoff),
        )
        plan.events.append((trial.name, "Warning", "GangTimeout", message))
        return True

    def _collect(self, plan: Plan, pods: Mapping[str, PodView]) -> None:
        """For ended pods whose outcome the Trial's status now holds (an earlier attempt's pod, or the
        current attempt's once the trial ended or paused; never one of an attempt newer than the status
        knows): delete the attempt's token Secret, and the pod as ``spec.podRetentionPolicy`` says."""
        for pod in pods.values():
            if pod.phase not in ("Succeeded", "Failed") and not pod.gone:
                continue
            trial = self._by_label.get(pod.trial)
            if trial is None or trial.uid is None or pod.owner_uid not in (None, trial.uid):
                continue
            if pod.attempt < trial.attempt or (
                pod.attempt == trial.attempt and (trial.phase in TERMINAL or trial.phase == "Paused")
            ):
                head = pod_name(trial.name, pod.attempt)
                secret = token_secret_name(head, trial.uid)
                if secret not in self.secrets_deleted:
                    self.secrets_deleted.add(secret)
                    plan.collect_secrets.append((secret, trial.name))
                    if pod.rank is not None:
                        plan.collect_gangs.append((gang_name(head), trial.name))
                if self.spec.pod_retention.deletes(pod.phase) and not pod.deleting:
                    plan.collect_pods.append((pod.name, trial.name))

    def _create_pod(self, plan: Plan, trial: TrialState, now: float) -> None:
        """Ask for the pod of the trial's current attempt, unless asked for in the last 30 s (index lag)."""
        name = pod_name(trial.name, trial.attempt)
        if now - self.created_pods.get(name, -1e9) < 30:
            return
        self.created_pods[name] = now
        pod = self._pod(trial)
        spec = self.experiment["spec"]
        if world_size(spec) > 1:
            podgroups = self.settings.trials.gang_scheduling == "podgroup"
            plan.gangs[name] = build_gang(pod, spec["resourcesPerTrial"], podgroups)
        plan.create_pods.append(pod)
        plan.token_secrets[name] = build_token_secret(
            pod, self._trial_object(trial), self.token(trial.name, trial.attempt)
        )
        if trial.status.get("podName") != name:
            self._set(trial, now, podName=name)
        trial.phase_changed |= not trial.written  # a new Trial's first status goes out with its first pod

    def _trial_object(self, trial: TrialState) -> dict:
        return trial_object(self.namespace, trial.name, trial.uid, trial.index, trial.config)

    def _pod(self, trial: TrialState) -> dict:
        return build_pod(
            self.experiment,
            self._trial_object(trial),
            trial.attempt,
            self.settings,
            restore_from=trial.restore_from,
            pbt_policy=trial.pbt_policy,
            pbt_explore=self.pod_explores.get(trial.name),
        )

    def _perturb(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        """Carry out the PBT exploits of trials now paused for them: the explored config, the donor's
        checkpoint to restore, a new attempt (docs/ray-tune.md, PBT)."""
        for name, exploit in list(self.exploits.items()):
            trial = self.trials.get(name)
            if trial is None or trial.phase in TERMINAL or trial.attempt > exploit["attempt"]:
                del self.exploits[name]  # ended, or carried out before a restart
                if trial is not None and trial.phase not in TERMINAL and exploit.get("explore"):
                    self.pod_explores[name] = exploit["explore"]  # its pods call the user functions still
                continue
            if exploit["config"] is None:  # PB2 has yet to choose it
                if trial.phase == "Paused" and trial.status.get("reason") != "Exploring":
                    self._set(trial, now, reason="Exploring", message=EXPLORING_MESSAGE)
                continue
            if trial.phase != "Paused" or stop_reason or suspended or self._active() >= self._limit():
                continue
            del self.exploits[name]
            uri = checkpoint_uri(self.trial_dir(exploit["donor"]), exploit["iteration"])
            in_pod = exploit.get("explore") or {}
            by_pod = set(exploit["config"]) if in_pod.get("customExploreFn") else set()
            by_pod |= {r["path"][0] for r in in_pod.get("resample") or ()}  # chosen by the pod: shown once reported
            changed = sorted(
                k
                for k in set(exploit["config"]) | set(exploit["oldConfig"])
                if exploit["config"].get(k) != exploit["oldConfig"].get(k) or k in by_pod
            )
            record = {
                "donor": exploit["donor"],
                "iteration": exploit["iteration"],
                "time": _now_iso(now),
                "operations": exploit["operations"],
                "oldConfig": {k: exploit["oldConfig"].get(k) for k in changed},
                "newConfig": {k: exploit["config"].get(k) for k in changed},
            }
            trial.config, trial.restore_from = dict(exploit["config"]), uri
            if exploit.get("explore"):
                self.pod_explores[name] = exploit["explore"]
            trial.pbt_policy = (
                None
                if exploit["donor"] == trial.name or not exploit.get("logConfig", True)
                else [  # a replay's own steps: no policy
                    trial.name,
                    exploit["donor"],
                    exploit.get("trialIteration", 0),
                    exploit["iteration"],
                    exploit["donorConfig"],
                    exploit["config"],
                ]
            )
            lineage = (trial.status.get("perturbations") or [])[-(MAX_PERTURBATIONS_KEPT - 1) :] + [record]
            self._set(
                trial,
                now,
                phase="Pending",
                reason="Perturbed",
                attempt=trial.attempt + 1,
                message=None,
                config=trial.config,
                restoreFrom=uri,
                perturbations=lineage,
                iteration=exploit["iteration"],
                checkpoint={"uri": uri, "iteration": exploit["iteration"]},
            )
            shown = {k: "(chosen in the pod)" if k in by_pod else repr(record["newConfig"][k]) for k in changed}
            explored = ", ".join(f"{k} {record['oldConfig'][k]!r} -> {shown[k]}" for k in changed)
            if exploit.get("error"):
                plan.events.append(
                    (
                        trial.name,
                        "Warning",
                        "ExploreFailed",
                        st.truncate_message(
                            f"PB2's explore step failed, the donor's config is kept: {exploit['error']}", 900
                        ),
                    )
                )
            plan.events.append(
                (
                    trial.name,
                    "Normal",
                    "TrialPerturbed",
                    f"exploit: restoring {exploit['donor']} at iteration {exploit['iteration']}; "
                    f"explore: {explored or 'config unchanged'}",
                )
            )
            self._create_pod(plan, trial, now)

    def _active(self) -> int:
        return sum(1 for t in self._open.values() if t.phase in ("Pending", "Running"))

    def _limit(self) -> int:
        return self.spec.max_concurrent_trials or self.settings.trials.default_max_concurrent_trials

    def _scheduler_paused(self) -> list[str]:
        return [
            t.name
            for t in sorted(self._open.values(), key=lambda t: t.index)
            if t.phase == "Paused" and t.status.get("reason") == "SchedulerPaused" and t.name not in self.exploits
        ]

    def _resume_paused(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        """Resume the paused trials the scheduler picks for free slots; end those it gave up on."""
        if stop_reason or suspended:
            return
        paused = self._scheduler_paused()
        for name in self.scheduler.trials_to_stop(paused) if paused else []:
            self._finish(plan, self.trials[name], "EarlyStopped", now)
        while self._active() < self._limit():
            paused = self._scheduler_paused()
            chosen = self._choose(paused) if paused else None
            if chosen is None:
                return
            trial = self.trials[chosen]
            self._set(trial, now, phase="Pending", reason="Resumed", attempt=trial.attempt + 1, message=None)
            self._create_pod(plan, trial, now)

    def _choose(self, paused: list[str]) -> str | None:
        """The scheduler's pick among ``paused``; journaled when it changes what the scheduler knows
        (a trial chosen, or the first call after the searcher finished)."""
        first_finished = self.search_finished and not self.finish_told
        entry = Choose(paused, self.search_finished)
        chosen = self._apply(entry)
        if chosen is not None or first_finished:
            self.journal.record(entry.as_json())
        return chosen

    def _new_trials(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        next_index = self.next_index
        total = self.searcher.total
        started = time.monotonic()
        while not stop_reason and not suspended and self._active() < self._limit():
            if plan.create_trials and time.monotonic() - started > SUGGEST_SECONDS_PER_PASS:
                break  # a slow searcher (Optuna's TPE at 1,000s of trials) goes on next pass, at once
            index = min(self.missing) if self.missing else next_index  # a failed create first, same config
            if total is not None:  # random-access searcher: config i is a function of i alone
                if index >= total:
                    break
                config, tag = self.searcher.variant(index)
            else:
                suggestion = self._do(Suggest(trial_name(self.name, index)))
                if not isinstance(suggestion, dict):
                    break  # FINISHED (search_finished from now on), or None: nothing to suggest yet
                config, tag = suggestion, f"{index}"
            self.missing.discard(index)
            config = self.scheduler.fill_config(trial_name(self.name, index), config)  # PB2: keys it lacks
            manifest = build_trial(self.experiment, index, config, tag)
            plan.create_trials.append(manifest)
            name = manifest["metadata"]["name"]
            self._add(TrialState(name, index, config, {"phase": "Pending", "attempt": 0}))
            self.next_index = max(self.next_index, index + 1)
            self._do(Add(name))
            next_index = max(next_index, index + 1)
        if plan.create_trials:  # one event per pass, like the event recorder's aggregation, not one per trial
            plan.events.append(created_event([m["metadata"]["name"] for m in plan.create_trials]))

    def _statuses(self, plan: Plan, now: float) -> None:
        interval = self.settings.status.write_interval_s
        periodic = 0  # writes of a new result only: at most PERIODIC_STATUS_WRITES_PER_PASS, the rest next pass
        for trial in self._open.values():  # a retired trial is never dirty (status_write_failed opens it)
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
        decision = self._phase_decision(now)
        obs_gen = self.observed_generation
        conditions = st.experiment_conditions(
            self.exp_status.get("conditions"), decision, obs_gen, datetime.fromtimestamp(now, timezone.utc)
        )
        conditions = self.health_conditions(conditions, datetime.fromtimestamp(now, timezone.utc))
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
            completion = _now_iso(now)
        new = st.experiment_status(
            phase=decision.phase,
            conditions=conditions,
            observed_generation=obs_gen,
            counts=self._counts(),
            best=self.best(),
            pareto=st.pareto_status(self.pareto()),
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

    def health_conditions(self, conditions: list | None, now: datetime) -> list[dict]:
        """``conditions`` with ``Ready`` (the latest spec accepted, or why not: ``InvalidSpec``,
        ``TrialNameTaken``), ``Degraded`` (the last pass failed, and why, or trials whose status cannot be
        written: :meth:`unwritable`), ``TrialsStalled`` (running trials that report a stall, e.g. storage
        unreachable) and ``TrialsWaiting`` (trial pods that cannot start, and why: unschedulable, waiting for
        admission, a missing Secret, an image that cannot be pulled) as this controller knows them."""
        gen = self.observed_generation
        why = self.invalid or self.pod_refused
        if why:
            conditions = st.set_condition(conditions, "Ready", False, "InvalidSpec", why, gen, now)
        elif self.names_taken:
            taken = self.names_taken[min(self.names_taken)]
            conditions = st.set_condition(conditions, "Ready", False, "TrialNameTaken", taken, gen, now)
        else:
            conditions = st.set_condition(conditions, "Ready", True, "SpecValid", "the spec is valid", gen, now)
        unwritable: list[TrialState] = []
        stalled: list[TrialState] = []  # an ended trial has an end reason instead
        waiting: list[TrialState] = []
        for trial in self._open.values():  # one look at each open trial
            reason = trial.status.get("reason")
            if trial.write_failures >= STATUS_WRITE_ATTEMPTS:
                unwritable.append(trial)
            if reason in STALL_REASONS:
                stalled.append(trial)
            elif trial.phase == "Pending" and reason in WAITING_CAUSES:
                waiting.append(trial)
        if self.degraded:
            conditions = st.set_condition(conditions, "Degraded", True, "ReconcileError", self.degraded, gen, now)
        elif unwritable:
            first = min(unwritable, key=lambda t: t.index)
            message = (
                f"the status of {len(unwritable)} trial(s) cannot be written, so the API shows an older one; "
                f"{first.name}: {first.write_error}"
            )
            conditions = st.set_condition(conditions, "Degraded", True, "TrialStatusNotWritten", message, gen, now)
        elif st.get_condition(conditions, "Degraded"):
            conditions = st.set_condition(conditions, "Degraded", False, "ReconcileSucceeded", "", gen, now)
        conditions = _trials_condition(conditions, "TrialsStalled", stalled, "stalled", "NoTrialStalled", gen, now)
        return _trials_condition(conditions, "TrialsWaiting", waiting, "cannot start", "NoTrialWaiting", gen, now)

    @property
    def observed_generation(self) -> int | None:
        """The Experiment's latest ``metadata.generation`` this controller has seen: the spec in force, or a
        later one it refused (``Ready=False``), so kstatus reads the refusal, not a spec still to be taken."""
        gen = self.experiment["metadata"].get("generation")
        if gen is None or self.refused_generation is None:
            return gen
        return max(gen, self.refused_generation)

    @property
    def search_finished(self) -> bool:
        """The searcher will suggest nothing more, as of the trials created (and the journal replayed): a
        random-access searcher's every variant has a Trial, or a suggesting searcher said FINISHED."""
        total = self.searcher.total
        if total is None:
            return self.searcher_finished
        return not self.missing and self.next_index >= total

    @property
    def finished(self) -> bool:
        """The Experiment reached Succeeded or Failed, and no write of that status failed or was held back
        (nothing more to do)."""
        return self.exp_status.get("phase") in TERMINAL and not self.exp_write_failed
