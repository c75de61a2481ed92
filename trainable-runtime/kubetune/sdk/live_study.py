"""An Optuna study kept in step with an experiment's storage while a view shows it: the live dashboard's study.

Owns :class:`LiveStudy`: it fills an Optuna study from an :class:`kubetune.sdk.analysis.ExperimentAnalysis` as
:func:`kubetune.sdk.optuna_study.fill_study` does, then, at each :meth:`LiveStudy.refresh`, lists the experiment's
folder (one listing), and when an object there changed reads the experiment again and writes only the difference
into the study, looking only at the trials whose objects changed or whose error did (every trial when the
experiment turns quiet, or when an object outside the trials' folders changed): a trial not seen before is added
(its Optuna ``number`` is the count of trials added before it, so each kubetune trial keeps its number), a trial
still ``RUNNING`` in the study gets the intermediate values and user attributes it did not have, and its final
state and value once it ends. Caller: :mod:`kubetune.sdk.dashboard`, whose server thread calls
:meth:`LiveStudy.refresh` every couple of seconds while Optuna Dashboard's page polls.

The states (Optuna's rule, not kubetune's: a finished Optuna trial cannot change, and Optuna Dashboard's page never
fetches again a finished trial that comes before its first running one):

* ``FAIL`` for a failed trial, at once (as :func:`kubetune.sdk.optuna_study.trial_state`);
* while the experiment is *live*, ``RUNNING`` for every other trial: from storage alone a trial stopped early
  (ASHA's stop) looks like one that will report again, so none is given a final state yet;
* once the experiment is *quiet* (no object under its folder written for ``settle_s`` seconds), the states of
  :func:`kubetune.sdk.optuna_study.trial_state`: ``PRUNED`` behind the longest trial, ``COMPLETE`` otherwise,
  ``RUNNING`` without a value. An experiment quiet when the study is filled shows so at once, as the
  snapshot of :func:`~kubetune.sdk.optuna_study.fill_study` would.

A PBT exploit restores a trial from a donor's checkpoint and its pod drops the results written after the donor's
iteration from ``result.json`` (:mod:`kubetune.sdk.pbt_exploits`); Optuna cannot delete an intermediate value,
so a running trial's step that its results no longer have is set to NaN (Optuna Dashboard's API serves it as
``"nan"``) until the trial reports that step again; a view started afresh leaves the step out.

Whoever knows the cluster's Trials (:mod:`kubetune.sdk.cluster_notes`) hands their status columns over with
:meth:`LiveStudy.set_trial_attrs`: they are added to each trial's user attributes, at once for a trial the study
holds and still runs, and when a trial is added. A trial that is final in the study stays as it is: results it
reports after that (a trial written again after the experiment was quiet for ``settle_s``, a retry after an
``error.txt`` without the cluster's word), and its Trial's status after that, show after
the view is started again.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from kubetune.sdk.analysis import changed_trials
from kubetune.sdk.optuna_study import (
    create_study,
    distributions,
    final_values,
    frozen_trial,
    histories,
    longest_iteration,
    study_modes,
    trial_state,
    user_attrs,
)
from kubetune.sdk.pbt_exploits import read_exploits

if TYPE_CHECKING:
    from kubetune.sdk.analysis import ExperimentAnalysis, TrialRecord
    from kubetune.sdk.optuna_study import History
    from kubetune.sdk.pbt_exploits import Exploit

__all__ = ["DEFAULT_SETTLE_S", "LiveStudy", "live_state"]

log = logging.getLogger(__name__)

#: Seconds without a write under the experiment's folder after which its trials get their final states. The
#: runtime uploads a trial's results at least every 10 s while it reports, but an iteration can take minutes.
DEFAULT_SETTLE_S = 300.0


def live_state(trial: TrialRecord, histories: Sequence[History], longest: int, quiet: bool) -> str:
    """The Optuna state of ``trial`` in a live study (the rule of the module docstring), by name.

    Args:
        trial: the trial as read from storage.
        histories: its ``(training_iteration, value)`` pairs of finite values, one list per objective.
        longest: the highest last ``training_iteration`` of any trial of the experiment.
        quiet: whether the experiment has written nothing for the settle time.

    Returns:
        ``"FAIL"``, ``"RUNNING"``, ``"PRUNED"`` or ``"COMPLETE"``.
    """
    if trial.error is None and not quiet:
        return "RUNNING"
    return trial_state(trial, histories, longest)


class LiveStudy:
    """An Optuna study of one experiment that :meth:`refresh` brings up to date with storage (module docstring).

    Args:
        analysis: the experiment, read from storage.
        metric, mode: the study's objective; default the analysis's (:func:`kubetune.sdk.optuna_study.fill_study`).
        reread: reads the experiment again, as it is now, given the analysis last read (to pass as the new one's
            ``previous``: the trials whose objects did not change are not read again) and the listing of its
            folder the refresh has just made (``Storage.stamps``, to pass as ``listed``: the folder is listed once
            per refresh); default ``ExperimentAnalysis.reread`` (the same storage folder, the same
            ``trial_errors``). The ``kubetune dashboard`` command passes one that asks the cluster again.
        settle_s: seconds without a write under the experiment's folder after which it is quiet.
        storage: the Optuna storage to create the study in; default a new ``InMemoryStorage``. The dashboard's
            experiment list keeps one study per Experiment in one storage.
        study_name: the study's name; default ``<namespace>/<experiment>`` from the analysis's path.
        trial_attrs: the first :meth:`set_trial_attrs`, before the first trials are added (so that a trial final
            at once, failed or of a quiet experiment, has them too).

    Attributes:
        study: the Optuna study; trial ``number`` ``n`` is the ``n``-th kubetune trial seen (user attribute
            ``kubetune_trial``), the trials of the first reading in the analysis's order.
        storage: the Optuna storage that holds it (an ``InMemoryStorage`` in this process: what Optuna Dashboard
            serves).
        analysis: the analysis last read.
        settle_s: as given.

    Raises:
        ValueError: as :func:`kubetune.sdk.optuna_study.fill_study`.
        optuna.exceptions.DuplicatedStudyError: ``storage`` holds a study named ``study_name`` already.
        ImportError: Optuna is not installed.
    """

    def __init__(
        self,
        analysis: ExperimentAnalysis,
        metric: str | None = None,
        mode: str | None = None,
        *,
        reread: Callable[[ExperimentAnalysis, Mapping[str, Any]], ExperimentAnalysis] | None = None,
        settle_s: float = DEFAULT_SETTLE_S,
        storage: Any = None,
        study_name: str | None = None,
        trial_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        from optuna.storages import InMemoryStorage

        self.storage = storage if storage is not None else InMemoryStorage()
        self.study, self._metrics = create_study(analysis, metric, mode, storage=self.storage, study_name=study_name)
        self._study_id = self.storage.get_study_id_from_name(self.study.study_name)
        self._reread = reread or type(analysis).reread
        self.settle_s = settle_s
        self.analysis = analysis
        self._stamps = analysis.storage.stamps(analysis.experiment_path)
        self._written_at = max((written for written, _ in self._stamps.values()), default=0.0)
        self._modes = study_modes(self.study)
        self._trial_ids: dict[str, int] = {}
        self._errors: dict[str, str | None] = {}  # each trial's error when last applied
        self._trial_attrs = {name: dict(values) for name, values in (trial_attrs or {}).items()}
        self._applied_quiet = False
        self._apply()

    def trial_id(self, name: str) -> int | None:
        """The Optuna ``trial_id`` (in :attr:`storage`) of the kubetune trial ``name``; None while the study has no
        such trial (nothing of it in storage yet)."""
        return self._trial_ids.get(name)

    def set_trial_attrs(self, attrs: Mapping[str, Mapping[str, Any]]) -> bool:
        """Add ``attrs`` to the user attributes of the trials they name, now where the study's trial still runs, and
        to a trial when it is added (module docstring).

        Args:
            attrs: ``{kubetune trial name: {user attribute: value}}`` (values Optuna stores: JSON's); replaces
                what an earlier call gave.

        Returns:
            Whether a trial's user attributes changed.
        """
        self._trial_attrs = {name: dict(values) for name, values in attrs.items()}
        changed = False
        for name, values in self._trial_attrs.items():
            trial_id = self._trial_ids.get(name)
            if trial_id is None:
                continue
            current = self.storage.get_trial(trial_id)
            if current.state.is_finished():
                continue
            for key, value in values.items():
                if current.user_attrs.get(key) != value:
                    self.storage.set_trial_user_attr(trial_id, key, value)
                    changed = True
        return changed

    def _quiet(self) -> bool:
        return time.time() - self._written_at >= self.settle_s

    def refresh(self) -> bool:
        """List the experiment's folder; when an object changed, read the experiment again (from that listing: the
        folder is listed once) and write what is new.

        Returns:
            Whether the study changed (new results, new trials, or final states once the experiment is quiet).

        Raises:
            Exception: what listing or reading storage raises (an unreachable endpoint, say); the study is as it
                was, or updated in part for the trials before the one that failed.
        """
        stamps = self.analysis.storage.stamps(self.analysis.experiment_path)
        written: set[str] | None = set()
        if stamps != self._stamps:
            analysis = self._reread(self.analysis, stamps)
            if analysis.experiment_path != self.analysis.experiment_path:
                log.warning(
                    "the experiment is read from %s now, not %s: still showing the latter",
                    analysis.experiment_path,
                    self.analysis.experiment_path,
                )
                return False
            written = changed_trials(self._stamps, stamps, analysis.experiment_path)
            self._stamps, self._written_at, self.analysis = stamps, time.time(), analysis
        elif self._applied_quiet or not self._quiet():
            return False
        return self._apply(written)

    def _apply(self, written: set[str] | None = None) -> bool:
        """Write :attr:`analysis` into the study where it differs; return whether anything was written.

        Args:
            written: the trials whose objects changed since the last call (:func:`changed_trials`); the others are
                looked at only when their error changed, or when the experiment turned quiet or live. None: every
                trial.
        """
        analysis, metrics = self.analysis, self._metrics
        quiet = self._quiet()
        if quiet != self._applied_quiet:
            written = None
        longest = longest_iteration(analysis)
        exploits = read_exploits(analysis)
        dists = None
        changed = False
        for trial in analysis.trials:
            seen = trial.trial_id in self._trial_ids
            if seen and written is not None and trial.trial_id not in written:
                if self._errors.get(trial.trial_id) == trial.error:
                    continue
            self._errors[trial.trial_id] = trial.error
            found = histories(analysis, trial, metrics)
            state = live_state(trial, found, longest, quiet)
            own = exploits.get(trial.trial_id, [])
            trial_id = self._trial_ids.get(trial.trial_id)
            if trial_id is None:
                if dists is None:
                    dists = distributions(analysis)
                number = len(self._trial_ids)
                extra = self._trial_attrs.get(trial.trial_id)
                self.study.add_trial(frozen_trial(trial, found, state, dists, metrics, own, self._modes, extra))
                self._trial_ids[trial.trial_id] = self.storage.get_trial_id_from_study_id_trial_number(
                    self._study_id, number
                )
                changed = True
            else:
                changed |= self._update(trial_id, trial, found, state, own)
        self._applied_quiet = quiet
        return changed

    def _update(
        self, trial_id: int, trial: TrialRecord, histories: list[History], state: str, exploits: list[Exploit]
    ) -> bool:
        """Write into the study's trial ``trial_id``, while it runs, what it lacks of ``trial``, and NaN at each
        step it holds that the trial's lineage no longer has (module docstring)."""
        from optuna.trial import TrialState

        current = self.storage.get_trial(trial_id)
        if current.state.is_finished():
            return False
        changed = False
        wanted = dict(histories[0])
        for step, value in current.intermediate_values.items():
            if step not in wanted and not math.isnan(value):
                self.storage.set_trial_intermediate_value(trial_id, step, math.nan)
                changed = True
        for step, value in wanted.items():
            if current.intermediate_values.get(step) != value:
                self.storage.set_trial_intermediate_value(trial_id, step, value)
                changed = True
        attrs = {
            **user_attrs(trial, histories, self._metrics, exploits, self._modes),
            **self._trial_attrs.get(trial.trial_id, {}),
        }
        for key, value in attrs.items():
            if current.user_attrs.get(key) != value:
                self.storage.set_trial_user_attr(trial_id, key, value)
                changed = True
        if state != "RUNNING":
            self.storage.set_trial_state_values(trial_id, TrialState[state], final_values(histories, state))
            changed = True
        return changed
