"""The journaled decisions of one Experiment: every call that changes what its searcher, scheduler and
stoppers know, recorded in its journal and replayed, in the same order, after a restart.

Owns :class:`JournaledDecisions`: the searcher, the scheduler and the stoppers, the journal
(:mod:`kubetune_operator.journal`) and what the journal rebuilds beside their own state: each trial's applied
decision (:class:`Applied`), the trials told ended, the PBT exploits decided and not carried out yet
(:class:`~kubetune_operator.schedulers.base.Exploit`), the user functions an exploited trial's pods call, the
configs pods computed, the display names pods' ``trial_name_creator`` gave, the checkpoints trials committed
(journaled for a driver pod only), and why the Experiment fails for a missing metric. Called by the controller
(:class:`kubetune_operator.controller.ExperimentController`: spec intake, results from the collector, journal
restore and snapshots, PB2's explore steps), the trial lifecycle (a trial ended), the admission of new and
paused trials (suggest, add, choose) and the PBT perturbation (exploits carried out). Pure: no API calls.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, NamedTuple

from kubetune.resultkeys import is_number, missing_metrics
from kubetune.shipping import draws_for, holds_function
from kubetune.stop_criteria import should_stop

from . import status as st
from .builtin_stoppers import Stoppers
from .journal import (
    Add,
    CheckpointAsked,
    Checkpointed,
    Choose,
    End,
    Entry,
    Explored,
    Journal,
    JournalCorrupt,
    MetricMissing,
    Named,
    Results,
    Sampled,
    Suggest,
    Suggested,
    entry_from_json,
    load,
)
from .podview import DECISION_RANK
from .schedulers.base import Exploit, ExploreInPod, TrialScheduler
from .searchers.base import Searcher
from .searchers.driver import DriverSearcher
from .spec_intake import InvalidSpec, SpecIntake
from .trial_book import TERMINAL, TrialBook, TrialState

log = logging.getLogger(__name__)


class Applied(NamedTuple):
    """What the scheduler decided for a trial's attempt, as the journal rebuilds it after a restart.

    Attributes:
        seen: the highest ``training_iteration`` of the trial applied: results at or below it are not new.
        decision: the decision for ``attempt``.
        attempt: the attempt the decision is for.
        restart_at: the iteration a later attempt starts over at (a PBT exploit's donor checkpoint), or None.
        stopped_at: the result the trial was stopped at (as ``status.lastResult`` shows it), once ``decision`` is
            ``stop``: the result the searcher and scheduler are told the trial completed with, as Ray's
            ``last_result``; None before.
    """

    seen: int
    decision: str
    attempt: int
    restart_at: int | None = None
    stopped_at: dict | None = None

    def as_json(self) -> list:
        """The snapshot's form: ``[seen, decision, attempt]``, then ``restart_at`` and ``stopped_at`` when set."""
        tail = [self.restart_at, self.stopped_at]
        while tail and tail[-1] is None:
            tail.pop()
        return [self.seen, self.decision, self.attempt, *tail]

    @classmethod
    def from_json(cls, stored: list) -> Applied:
        """Inverse of :meth:`as_json`."""
        return cls(*stored)


class JournaledDecisions:
    """The searcher, scheduler and stoppers of one Experiment behind its journal: each call that changes what they
    know is an entry (:mod:`kubetune_operator.journal`), applied live by :meth:`do` and replayed by :meth:`replay`.

    Args:
        journal: the Experiment's journal.
        book: its trials (the configs the scheduler is told, the results shown in their status).
        intake: its spec in force (stop criteria, metric).
    """

    def __init__(self, journal: Journal, book: TrialBook, intake: SpecIntake, metric_missing: str | None = None):
        self.journal, self.book, self.intake = journal, book, intake
        self.searcher: Searcher | None = None
        self.scheduler: TrialScheduler | None = None
        self.scheduler_params: dict = {}
        self.stoppers: Stoppers | None = None
        self.searcher_finished = False
        # trial -> what the scheduler decided for its attempt: rebuilt by the journal after a restart
        self.applied: dict[str, Applied] = {}
        self.ended: set[str] = set()  # trials the searcher and scheduler were told have ended
        self.finish_told = False  # the scheduler was told the searcher is finished
        self.exploits: dict[str, Exploit] = {}  # trial -> PBT exploit decided at "attempt", not yet carried out
        # trial -> the user functions of its carried-out PBT exploit its pods call until one reports the config
        self.pod_explores: dict[str, ExploreInPod] = {}
        # trial -> the attempt whose pod computed its config (sample_from values, a PBT explore step), until a
        # status write shows that config: a snapshot keeps those configs (the journal's entries may be gone)
        self.pod_configs: dict[str, int] = {}
        # trial -> the display name its pod's trial_name_creator gave, until a status write shows it (as pod_configs)
        self.pod_names: dict[str, str] = {}
        # trials whose status.metricRange grew since a status write showed it (bestTrialScope all): a snapshot keeps
        # their ranges, made of results whose entries it replaces
        self.unshown_ranges: set[str] = set()
        self.metric_missing = metric_missing  # why the experiment fails: a result lacked its metric
        # trial -> [attempt, iteration, pending] of the last checkpoint a driver pod's callback asked for (Ray's
        # result[SHOULD_CHECKPOINT]); pending until the attempt's next new batch is answered checkpoint
        self.checkpoint_asks: dict[str, list] = {}

    def take_spec(
        self,
        searcher: Searcher,
        scheduler: TrialScheduler,
        params: dict,
        stoppers: Stoppers,
        spec_changed: bool,
        pods_draw: bool,
        ranges: bool = False,
        driver: bool = False,
    ) -> None:
        """Use the searcher, scheduler and stoppers a new version of the spec makes (the controller's
        :meth:`~kubetune_operator.controller.ExperimentController.update` has checked they may replace the
        current ones): a model-based searcher of the same kind keeps what it learned, the scheduler and stoppers
        in force stay unless the scheduler's kind changed, and the journal records what they keep (``pods_draw``:
        the spec's config has ``sample_from`` functions its trial pods draw, or a ``trialNameCreator`` its trial pods
        call, whose values the journal keeps; ``ranges``: each trial's ``status.metricRange`` is kept, made of every
        result, which the journal then keeps too; ``driver``: a driver pod reads every entry, so they are all kept).
        """
        old = self.searcher
        if self.stoppers is None:
            self.stoppers = stoppers
        if self.scheduler is None or type(self.scheduler) is not type(scheduler):
            self.journal.snapshot_due = self.scheduler is not None
            self.scheduler, self.scheduler_params = scheduler, params
        self.journal.snapshot_due |= old is not None and not searcher.stateless
        stateless = searcher.stateless and self.scheduler.stateless and not self.stoppers.stoppers
        stateless &= not ranges and not driver
        self.journal.enabled = not stateless or pods_draw
        self.journal.kinds = frozenset({"sampled", "named"}) if stateless else None  # what trial pods computed, alone
        self.searcher = searcher
        if spec_changed:
            self.searcher_finished = False  # an edit (more samples) may give the searcher more to do

    def check_spec(self, searcher: Searcher, scheduler: TrialScheduler, params: dict, stoppers_changed: bool) -> None:
        """Refuse a new spec whose searcher cannot take what the one in force learned (a model-based searcher of
        the same kind is given its state here), or whose scheduler parameters or stoppers differ.

        Raises:
            InvalidSpec: the new searcher cannot take the old one's state; ``scheduler.params`` or
                ``spec.stoppers`` changed while the experiment runs.
        """
        old = self.searcher
        if old is not None and type(old) is type(searcher) and not searcher.stateless:
            try:
                searcher.set_state(old.get_state())  # model-based searchers keep what they learned
            except (ValueError, TypeError, KeyError) as exc:
                raise InvalidSpec(f"the new spec does not fit what the searcher has learned: {exc}") from exc
        if self.scheduler is not None and type(self.scheduler) is type(scheduler) and params != self.scheduler_params:
            raise InvalidSpec(
                "scheduler.params cannot change while the experiment runs (what the scheduler "
                "has decided belongs to the parameters it started with); the previous ones stay in "
                "force: create a new Experiment to use new ones"
            )
        if self.stoppers is not None and stoppers_changed:
            raise InvalidSpec(
                "spec.stoppers cannot change while the experiment runs (what they saw belongs to "
                "the stoppers it started with); the previous ones stay in force"
            )

    def exploit_done(self, name: str, pods_explore: bool) -> Exploit:
        """Forget ``name``'s exploit: carried out, or no longer to be (the trial ended, or a later attempt runs);
        with ``pods_explore``, the trial's pods call its user explore functions until one reports the config."""
        exploit = self.exploits.pop(name)
        if pods_explore and exploit.get("explore"):
            self.pod_explores[name] = exploit["explore"]
        return exploit

    def config_shown(self, trial: TrialState) -> None:
        """A status write of ``trial`` went through: a config its pod computed (:meth:`show_pod_config`), a
        display name its pod gave (:meth:`_apply_named`), a ``metricRange`` (:meth:`_widen_range`), or the decision
        an ended trial's attempt ended on (:meth:`_apply_end`: a container trial's pod, deleted on it, leaves nothing
        else to say how), that the write showed need not be kept in the journal's snapshots."""
        if trial.name in self.pod_configs and trial.written.get("config") == trial.config:
            del self.pod_configs[trial.name]
        self._forget_shown_end(trial.name)
        if trial.name in self.pod_names and trial.written.get("displayName") == self.pod_names[trial.name]:
            del self.pod_names[trial.name]
        if trial.name in self.unshown_ranges and trial.written.get("metricRange") == trial.status.get("metricRange"):
            self.unshown_ranges.discard(trial.name)

    def snapshot(self) -> dict:
        """What the journal keeps of a snapshot: searcher, scheduler and the controller's own decisions; a copy
        that later calls do not change (the journal encodes it in steps)."""
        last = {
            name: self.book.trials[name].status.get("lastResult") for name in self.applied if name in self.book.trials
        }
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
                name: [attempt, dict(self.book.trials[name].config)]
                for name, attempt in sorted(self.pod_configs.items())
                if name in self.book.trials
            },
            "podNames": {name: shown for name, shown in sorted(self.pod_names.items()) if name in self.book.trials},
            "lastResult": {name: result for name, result in last.items() if result},
            "metricRange": {
                name: self.book.trials[name].status["metricRange"]
                for name in sorted(self.unshown_ranges)
                if name in self.book.trials and self.book.trials[name].status.get("metricRange")
            },
            "metricMissing": self.metric_missing,
            "checkpointAsks": {name: list(ask) for name, ask in self.checkpoint_asks.items()},
        }

    def load_snapshot(self, snapshot: dict) -> None:
        """Resume the searcher, scheduler, stoppers and this object's records from a journal snapshot."""
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
        self.checkpoint_asks = {name: list(ask) for name, ask in (snapshot.get("checkpointAsks") or {}).items()}
        for name, (attempt, config) in (snapshot.get("podConfigs") or {}).items():
            self.show_pod_config(name, config, attempt)  # the scheduler's state has them; the Trial may not
        for name, display_name in (snapshot.get("podNames") or {}).items():
            self._apply_named(name, display_name)
        for name, result in snapshot["lastResult"].items():
            trial = self.book.trials.get(name)
            if trial is not None and (trial.status.get("iteration") or 0) < (result.get("training_iteration") or 0):
                self.book.show_result(trial, result)
        for name, ranges in (snapshot.get("metricRange") or {}).items():  # results a status write may not show
            trial = self.book.trials.get(name)
            if trial is not None and self.book.merge_range(trial, ranges):
                self.unshown_ranges.add(name)

    def do(self, entry: Entry) -> Any:
        """Apply ``entry`` and record it in the journal (recorded only once applied without error)."""
        outcome = self.apply(entry)
        self.journal.record(entry.as_json())
        return outcome

    def suggest(self, trial: str) -> dict | None | str:
        """Ask the searcher for the config of the new trial ``trial``, journaled; a "not now" (None) of a searcher
        whose waiting changes nothing (:attr:`~kubetune_operator.searchers.base.Searcher.quiet_wait`) is not: its
        replay would change nothing, and a rung that runs for hours would add an entry at every pass."""
        entry = Suggest(trial)
        driver = self.searcher if isinstance(self.searcher, DriverSearcher) else None
        asked = driver and driver.asked
        suggestion = self.apply(entry)
        if suggestion is not None or not self.searcher.quiet_wait:
            self.journal.record(entry.as_json())
        if driver is not None and driver.asked != asked:
            self.journal.wake_feed_waiters()  # the driver pod's searcher is asked for another trial's config
        return suggestion

    def driver_checkpoint(self, trial: str, attempt: int, iteration: int) -> bool:
        """Journal a driver pod's callback asking ``trial``'s ``attempt`` for a checkpoint after its result at
        ``iteration`` (:class:`~kubetune_operator.journal.CheckpointAsked`): the attempt's next new batch is answered
        ``checkpoint``. False, journaling nothing, for a trial not open or an ask not newer than the last one."""
        state = self.book.trials.get(trial)
        last = self.checkpoint_asks.get(trial)
        if state is None or trial in self.ended or attempt != state.attempt:
            return False
        if last is not None and (attempt, iteration) <= (last[0], last[1]):
            return False
        self.do(CheckpointAsked(trial, attempt, iteration))
        return True

    def driver_suggested(self, trial: str, suggestion: dict | str) -> bool:
        """Journal the driver pod's searcher's answer for the new trial ``trial`` (a config or ``"FINISHED"``,
        :class:`~kubetune_operator.journal.Suggested`); False, journaling nothing, when it is not one to take: the
        trial exists, its answer was taken already, or the search is over. The searcher is a
        :class:`~kubetune_operator.searchers.driver.DriverSearcher` (``spec.searchAlgorithm.name: driver``)."""
        known = self.searcher.answers.keys() | self.searcher.given.keys()
        if trial in self.book.trials or trial in known or self.searcher_finished or self.searcher.finished:
            return False
        self.do(Suggested(trial, suggestion))
        return True

    def replay(self, stored: list) -> None:
        """Carry out one stored journal entry (a JSON list) after a restart, as :meth:`apply` did it live."""
        self.apply(entry_from_json(stored))

    def apply(self, entry: Entry) -> Any:
        """Carry out one journal entry, live or replayed after a restart: the same calls, in the same order."""
        if isinstance(entry, Add):
            self.scheduler.on_trial_add(entry.trial)
            if entry.trial in self.book.trials:
                self.scheduler.set_trial_config(entry.trial, self.book.trials[entry.trial].created_config)
        elif isinstance(entry, Suggest):
            suggestion = self.searcher.suggest(entry.trial)
            if suggestion is not None and not isinstance(suggestion, dict):
                self.searcher_finished = True  # replayed after a restart too
            return suggestion
        elif isinstance(entry, Suggested):
            self.searcher.answer(entry.trial, entry.suggestion)
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
        elif isinstance(entry, Named):
            self._apply_named(entry.trial, entry.name)
        elif isinstance(entry, Checkpointed):
            pass  # the driver pod's alone (its callbacks' on_checkpoint): nothing decides on it
        elif isinstance(entry, CheckpointAsked):
            self.checkpoint_asks[entry.trial] = [entry.attempt, entry.iteration, True]
        else:  # MetricMissing
            self.metric_missing = self.metric_missing or entry.message
        return None

    def _apply_results(self, trial: str, attempt: int, results: list[dict]) -> str:
        before = self.applied.get(trial, Applied(0, "continue", attempt))
        if before.decision == "stop":
            # as Ray's controller, which never feeds a stopped trial's results: a pod that did not hear its stop
            # (the operator restarting) and ran on reaches neither scheduler, searcher nor stoppers again, so it
            # cannot take a place at a later rung; its results are still shown on the Trial
            seen = max((r["training_iteration"] for r in results if is_number(r.get("training_iteration"))), default=0)
            self.applied[trial] = before._replace(seen=max(before.seen, seen), attempt=attempt)
            if trial in self.book.trials and results:
                self.book.show_result(self.book.trials[trial], results[-1])
                self._widen_range(trial, results)
            return "stop"
        decision, exploit, fed = "continue", None, results
        for i, result in enumerate(results):
            stop, _ = should_stop(result, self.intake.spec.stop)
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
            if d == "stop":  # the trial ends at this result: the rest of the batch is never fed (Ray's rule)
                fed = results[: i + 1]
                break
            if exploit is not None:  # the rest of the batch belongs to the lineage the trial leaves
                self.exploits[trial] = {**exploit, "attempt": attempt}
                break
        self._take_exploits(skip=trial)
        if results:
            self.searcher.on_trial_result(trial, fed[-1])
            seen = max(
                (r["training_iteration"] for r in results if is_number(r.get("training_iteration"))),
                default=self.seen(trial, attempt),
            )
            if (
                before.attempt == attempt
                and before.decision in ("pause", "stop")
                and DECISION_RANK[before.decision] > DECISION_RANK[decision]
            ):
                decision = before.decision  # an attempt told to pause or stop is told so until it ends
            ask = self.checkpoint_asks.get(trial)
            if ask is not None and ask[2] and ask[0] <= attempt:  # a callback's result[SHOULD_CHECKPOINT]
                ask[2] = False
                if decision == "continue" and ask[0] == attempt:
                    decision = "checkpoint"
            stopped_at = st.compact_result(fed[-1], self.intake.metric) if decision == "stop" else None
            # with an exploit, the next attempt reports again from the donor's checkpoint
            self.applied[trial] = Applied(
                seen, decision, attempt, None if exploit is None else exploit["iteration"], stopped_at
            )
            if trial in self.book.trials:
                self.book.show_result(self.book.trials[trial], results[-1])
                self._widen_range(trial, results)
        return decision

    def _widen_range(self, trial: str, results: list[dict]) -> None:
        """Take ``results`` into ``trial``'s ``status.metricRange`` (:meth:`TrialBook.widen_range`), kept in the
        journal's snapshots until a status write shows it."""
        state = self.book.trials.get(trial)
        if state is not None and self.book.widen_range(state, results):
            self.unshown_ranges.add(trial)

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
        self.show_pod_config(trial, config, attempt)

    def _apply_named(self, trial: str, name: str) -> None:
        """The display name ``trial``'s pod got from the ``trial_name_creator``: its ``status.displayName``, unless it
        has one (the first name stays, as Ray names a trial once; a restored status already shows it)."""
        state = self.book.trials.get(trial)
        if state is None or state.status.get("displayName"):
            return
        state.status["displayName"] = name
        state.dirty = True
        self.pod_names[trial] = name

    def _apply_pod_explored(self, trial: str, config: dict, attempt: int | None) -> None:
        """The config ``trial``'s pod of ``attempt`` chose by calling the user functions of its PBT exploit: the
        trial's config from now on (its status, its last perturbation record, the scheduler's donor config); its
        later pods call nothing. ``attempt`` is None in an entry an earlier operator journaled without it."""
        self.pod_explores.pop(trial, None)
        exploit = self.exploits.get(trial)
        if exploit is not None and exploit.get("explore"):  # replayed before the exploit is known carried out
            exploit.update(explore=None, config=dict(config))
        self.scheduler.explored(trial, {"config": config})
        self.show_pod_config(trial, config, attempt)

    def show_pod_config(self, trial: str, config: dict, attempt: int | None) -> None:
        """Make ``config``, computed by ``trial``'s pod of ``attempt``, the Trial's config and ``status.config``
        (and the new values of its last perturbation record), unless the Trial's status is of a later attempt:
        replayed after a restart, an entry never undoes a later exploit's config, which that status shows."""
        state = self.book.trials.get(trial)
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

    def exploration(self) -> dict | None:
        """The scheduler's next explore job (PB2's ``next_exploration``), or None: nothing to compute."""
        return self.scheduler.next_exploration()

    def explored(self, trial: str, outcome: dict) -> None:
        """The outcome of :meth:`exploration`'s job for ``trial`` (``{"error": ...}`` when it failed): journaled,
        and the exploit's config is chosen; the trial's next attempt starts in a later pass.

        Raises:
            JournalCorrupt: ``trial`` is not the job's (the explorer mixed up Experiments: a bug).
        """
        self.do(Explored(trial, outcome))

    def seen(self, trial: str, attempt: int) -> int:
        """The highest ``training_iteration`` of ``trial`` already applied, as ``attempt`` counts: results at or
        below it are not new. An attempt after a PBT exploit starts over at the donor's iteration."""
        applied = self.applied.get(trial)
        if applied is None:
            return 0
        return applied.restart_at if applied.restart_at is not None and attempt > applied.attempt else applied.seen

    def _forget_shown_end(self, trial: str) -> None:
        """Drop the decision ``trial``'s attempt ended on once its end is shown (its Trial's written status is
        terminal, or there is no Trial): kept until then, it is how a restarted operator knows a container trial's
        deleted pod ended on a stop or pause."""
        state = self.book.trials.get(trial)
        if trial in self.ended and (state is None or state.written.get("phase") in TERMINAL):
            self.applied.pop(trial, None)

    def _apply_end(self, trial: str, result: dict | None, how: str) -> None:
        self.ended.add(trial)
        self.checkpoint_asks.pop(trial, None)
        self._forget_shown_end(trial)  # else kept until a status write shows the end (config_shown)
        if result:  # its last result may have come in its pod's termination message alone (the operator was down)
            self._widen_range(trial, [result])
        if how == "complete":
            self.scheduler.on_trial_complete(trial, result)
        else:
            self.scheduler.on_trial_remove(trial)
        self.searcher.on_trial_complete(trial, result, error=how == "error", early_stopped=how == "remove")

    def end(self, trial: TrialState, how: str) -> None:
        """Tell the scheduler and searcher that ``trial`` ended (once): ``complete``, ``remove`` or ``error``, with
        the result it was stopped at when it was (:attr:`Applied.stopped_at`: results its pod reported after it are
        shown on the Trial only), else its last result."""
        if trial.name not in self.ended:
            applied = self.applied.get(trial.name)
            stopped_at = applied.stopped_at if applied is not None else None
            self.do(End(trial.name, stopped_at or trial.status.get("lastResult"), how))

    def lacks_metric(self, trial: str, results: list[dict]) -> bool:
        """Whether a result of ``trial`` lacks the experiment's metric (:func:`kubetune.resultkeys.missing_metrics`,
        Ray's strict metric check); the first such result makes the experiment fail (``MetricMissing``)."""
        metrics = (
            self.intake.metric
            if isinstance(self.intake.metric, tuple)
            else (self.intake.metric,)
            if self.intake.metric
            else ()
        )
        required = tuple(a for a in self.scheduler.required_attrs if a not in metrics)
        for result in results if metrics or required else ():
            missing = missing_metrics(result, metrics + required)
            if missing:
                if self.metric_missing is None:
                    expects = f"spec.{'objectives' if self.intake.spec.multi_objective else 'metric'}"
                    if set(missing) & set(required):  # PBT's require_attrs (Ray raises at such a result)
                        expects += " and the scheduler's require_attrs (set it to false to skip such results)"
                    self.do(  # journaled: the collector's "stop" goes out only once it is committed
                        MetricMissing(
                            f"trial {trial} returned a result which did not include the specified metric(s) "
                            f"{', '.join(missing)} that {expects} "
                            f"expects: make the trainable report it (the result has {', '.join(sorted(result)[:20])})"
                        )
                    )
                return True
        return False

    def choose(self, paused: list[str]) -> str | None:
        """The scheduler's pick among ``paused``; journaled when it changes what the scheduler knows
        (a trial chosen, or the first call after the searcher finished)."""
        first_finished = self.search_finished and not self.finish_told
        entry = Choose(paused, self.search_finished)
        chosen = self.apply(entry)
        if chosen is not None or first_finished:
            self.journal.record(entry.as_json())
        return chosen

    @property
    def search_finished(self) -> bool:
        """The searcher will suggest nothing more, as of the trials created (and the journal replayed): a
        random-access searcher's every variant has a Trial, or a suggesting searcher said FINISHED."""
        total = self.searcher.total
        if total is None:
            return self.searcher_finished
        return not self.book.missing and self.book.next_index >= total

    def restore_steps(self, configmaps: list[dict], entries_per_step: int = 500) -> Iterator[None]:
        """Rebuild what the searcher and scheduler knew from the stored journal (``configmaps``: see
        :mod:`kubetune_operator.journal`), in steps of ``entries_per_step`` entries: the caller lets the event
        loop run (probes, other Experiments) between them; after every Trial in the API is in the book.

        Raises:
            JournalCorrupt: the journal cannot be replayed (an entry is missing or unknown).
        """
        snapshot, entries = load(self.journal, configmaps)
        if snapshot is not None:
            self.load_snapshot(snapshot)
        for i, entry in enumerate(entries):
            if i and i % entries_per_step == 0:
                yield
            self.replay(entry)
        for name in [name for name in self.ended if name in self.applied]:
            self._forget_shown_end(name)  # kept by a snapshot taken before the status write that showed its end
        if snapshot is None and not entries:  # a new Experiment, or one from before the journal
            for trial in sorted(self.book.trials.values(), key=lambda t: t.index):
                if trial.phase not in TERMINAL:
                    self.do(Add(trial.name))
        self.book.find_missing()

    def take_results(
        self,
        state: TrialState,
        attempt: int,
        results: list[dict],
        checkpoint: dict | None,
        explored: dict | None,
        display_name: str | None = None,
    ) -> str:
        """Take a batch of results of the current ``attempt`` of the open trial ``state`` (the collector's, through
        :meth:`kubetune_operator.controller.ExperimentController.record_results`, which says what the arguments
        are); return the decision for the runtime: ``continue``, ``checkpoint``, ``pause`` or ``stop``."""
        trial = state.name
        if trial in self.ended:  # its end is journaled, its status not written yet (the operator restarted between)
            return "stop"
        if display_name is not None and self.intake.spec.trial_name_creator and not state.status.get("displayName"):
            self.do(Named(trial, display_name))
        if explored is not None and trial in self.pod_explores:  # before any result of the attempt
            self.do(Explored(trial, {"config": explored, "attempt": attempt}))
        elif explored is not None and holds_function(state.config):
            if draws_for(state.config, explored):
                self.do(Sampled(trial, explored, attempt))
            else:  # not what kubetune's runtime sends: the trial goes on, its later attempts drawing again
                log.warning(
                    "trial %s/%s reported a config that is not its own with values drawn", self.intake.namespace, trial
                )
        applied = self.applied.get(trial, Applied(0, "continue", attempt))
        decision, decided_by = applied.decision, applied.attempt
        if applied.restart_at is not None and decided_by == attempt:
            return "pause"  # exploited by PBT: this attempt's later results belong to the lineage it leaves
        stopped = decision == "stop"  # its later results reach no scheduler, searcher or metric check
        seen = self.seen(trial, attempt)
        fresh = [r for r in results if not (is_number(r.get("training_iteration")) and r["training_iteration"] <= seen)]
        if fresh and not stopped and self.lacks_metric(trial, fresh):
            return "stop"  # as Ray's run raises at such a result: it never reaches the searcher or scheduler
        if fresh:  # a re-sent batch, or iterations a retry runs again, never reach the scheduler twice
            decision = self.do(Results(trial, attempt, fresh))
        elif decided_by != attempt and not stopped:
            decision = "continue"
        if checkpoint and checkpoint.get("uri"):
            known = (state.status.get("checkpoint") or {}).get("uri")
            if self.intake.spec.driver is not None and checkpoint["uri"] != known:
                self.do(Checkpointed(trial, attempt, checkpoint["uri"], checkpoint.get("iteration")))
            state.status["checkpoint"] = {"uri": checkpoint["uri"], "iteration": checkpoint.get("iteration")}
            state.dirty = True
        return decision
