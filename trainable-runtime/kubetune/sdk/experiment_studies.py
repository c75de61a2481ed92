"""Every Experiment a kubeconfig identity may list, one Optuna study each: the dashboard's experiment list.

Owns which Experiments ``kubetune dashboard`` with no name shows, and how each shows, in one Optuna
``InMemoryStorage`` (Optuna Dashboard's home page lists its studies). Callers: :mod:`kubetune.sdk.cli` (the
command, which hands over the cluster's calls) and :mod:`kubetune.sdk.dashboard` (whose refresh thread calls
:meth:`ExperimentStudies.refresh` every few seconds while it serves).

Which Experiments (:func:`readable_experiments`): one cluster-wide list when the identity may list Experiments in
every namespace; when the API server refuses that (403), the Experiments of each namespace given (the command's
``--namespace`` flags, else the kubeconfig context's namespace) that the identity may list. A namespace it may not
read is left out, without an error: the list shows what the identity may see and nothing else.

How each shows (:class:`ExperimentStudies`): a study named ``<namespace>/<name>`` (:func:`study_name`) kept in step
with the Experiment's storage by a :class:`kubetune.sdk.live_study.LiveStudy` (its trials, as ``kubetune dashboard
NAME`` shows them), with the Experiment's few words (:func:`kubetune.sdk.experiment_summary.summary`: phase, trials
by phase, best value, age) as the study's user attributes and as its note (Markdown, on the study's page; Optuna
Dashboard's home page shows only names); an Experiment with several objectives (``spec.objectives``) has a study of
as many directions, whose Pareto front Optuna Dashboard draws. Given the cluster's reads
(:class:`kubetune.sdk.cluster_notes.ClusterNotes`), the note goes on with what the cluster says of the Experiment
(its conditions, waiting Trials and Events), and each trial gets its Trial's status columns and a note of its own
(its status and the tail of its pod's log). An Experiment whose trials cannot be shown (no ``spec.metric``, nothing
in storage yet, storage unreachable) shows as a study without trials whose note says why; the last two are tried
again at each refresh. New Experiments appear at the next refresh; a deleted one keeps its study
as last seen, until an Experiment of the same name replaces it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from kubetune.resultkeys import is_multi_objective, spec_objectives
from kubetune.sdk.cluster_notes import Shown
from kubetune.sdk.experiment_summary import summary
from kubetune.sdk.live_study import DEFAULT_SETTLE_S, LiveStudy

if TYPE_CHECKING:
    import optuna

    from kubetune.sdk.analysis import ExperimentAnalysis
    from kubetune.sdk.cluster_notes import ClusterNotes

__all__ = ["ExperimentStudies", "note", "readable_experiments", "study_name", "unshown_reason"]

log = logging.getLogger(__name__)

#: The HTTP status of a request RBAC refuses.
FORBIDDEN = 403


def readable_experiments(
    list_all_namespaces: Callable[[], list[dict]],
    list_namespace: Callable[[str], list[dict]],
    namespaces: Sequence[str],
) -> list[dict]:
    """The Experiments the identity behind the two calls may list (module docstring), ordered by namespace and name.

    Args:
        list_all_namespaces: lists the Experiments of every namespace
            (:meth:`kubetune.sdk.client.Cluster.list_all_namespaces`).
        list_namespace: lists those of one namespace (:meth:`kubetune.sdk.client.Cluster.list`).
        namespaces: the namespaces to try, in order, when the cluster-wide list is refused; each once.

    Returns:
        The Experiments as the API returns them.

    Raises:
        kubernetes.client.ApiException: a refusal other than 403 (401: the credentials expired), or a 5xx.
        Exception: what the calls raise when the API server does not answer.
    """
    from kubernetes.client import ApiException

    try:
        found = list_all_namespaces()
    except ApiException as exc:
        if exc.status != FORBIDDEN:
            raise
        found = []
        for namespace in dict.fromkeys(namespaces):
            try:
                found += list_namespace(namespace)
            except ApiException as refused:
                if refused.status != FORBIDDEN:
                    raise
                log.debug("not listing the Experiments of namespace %s: forbidden", namespace)
    return sorted(found, key=lambda e: (e["metadata"]["namespace"], e["metadata"]["name"]))


def study_name(experiment: Mapping[str, Any]) -> str:
    """The name of ``experiment``'s study: ``<namespace>/<name>``."""
    meta = experiment["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def unshown_reason(spec: Mapping[str, Any]) -> str | None:
    """Why the trials of an Experiment with ``spec`` cannot be a study of their own, or None when they can.

    Returns:
        A sentence for an Experiment with neither ``spec.metric`` and ``spec.mode`` nor ``spec.objectives``;
        else None.
    """
    metric, mode = spec_objectives(spec)
    metrics, modes = (metric, mode) if is_multi_objective(metric) else ([metric], [mode])
    if not all(metrics) or not modes or not all(modes):
        return "it has no spec.metric and spec.mode to rank its trials by"
    return None


def note(experiment: Mapping[str, Any], words: Mapping[str, Any], reason: str | None = None) -> str:
    """The Markdown note of ``experiment``'s study: its :func:`~kubetune.sdk.experiment_summary.summary`
    ``words`` on one line, and why its trials are not shown when ``reason`` says so."""
    metric, _ = spec_objectives(experiment.get("spec") or {})
    parts = [f"**{words['phase']}**", f"trials: {words['trials']}"]
    if "best_value" in words:
        parts.append(f"best {metric}: {words['best_value']:g} ({words['best_trial']})")
    parts.append(f"age: {words['age']}")
    text = f"Experiment `{study_name(experiment)}`: " + " · ".join(parts)
    return text if reason is None else f"{text}\n\nIts trials are not shown: {reason}."


@dataclass
class _Entry:
    """One Experiment's study: the Experiment as last listed, and what its study holds."""

    experiment: dict
    study: optuna.Study | None = None
    live: LiveStudy | None = None
    reason: str | None = None
    written: dict[str, Any] = field(default_factory=dict)


class ExperimentStudies:
    """One Optuna study per Experiment listed, in one storage, brought up to date by :meth:`refresh`.

    Args:
        list_experiments: lists the Experiments to show as the API returns them (:func:`readable_experiments`
            bound to the cluster), each time :meth:`refresh` runs.
        analysis_of: reads an Experiment (as listed) from its storage, with its failed Trials' messages
            (:func:`kubetune.sdk.tuner.experiment_analysis` with the cluster's Trials), given its last reading
            (None at first) and the listing of its folder a refresh has just made (None at first) to pass on as
            ``previous`` and ``listed``; raises ``FileNotFoundError`` while nothing is stored.
        settle_s: as :class:`kubetune.sdk.live_study.LiveStudy`'s.
        notes: writes what the cluster says of each Experiment and its Trials into its study (its note after the
            few words, its trials' status columns and notes) at each refresh; None: the few words alone.

    Attributes:
        storage: the Optuna ``InMemoryStorage`` holding the studies (what Optuna Dashboard serves).
        settle_s: as given.
        notes: as given.

    Raises:
        ImportError: Optuna or Optuna Dashboard is not installed.
    """

    def __init__(
        self,
        list_experiments: Callable[[], list[dict]],
        analysis_of: Callable[[dict, ExperimentAnalysis | None, Mapping[str, Any] | None], ExperimentAnalysis],
        *,
        settle_s: float = DEFAULT_SETTLE_S,
        notes: ClusterNotes | None = None,
    ):
        from optuna.storages import InMemoryStorage

        self.storage = InMemoryStorage()
        self.settle_s = settle_s
        self.notes = notes
        self._list = list_experiments
        self._analysis_of = analysis_of
        self._entries: dict[str, _Entry] = {}  # by the Experiment's uid

    def studies(self) -> dict[str, optuna.Study]:
        """``{study name: study}`` of every Experiment listed so far (deleted ones included)."""
        return {study_name(e.experiment): e.study for e in self._entries.values() if e.study is not None}

    def refresh(self) -> bool:
        """List the Experiments again; add a study for each new one, bring the others' up to date.

        One Experiment whose storage cannot be read is logged and left as it was; the others are refreshed. Then
        :attr:`notes`, when given, writes what the cluster says of the Experiments listed (a read of the cluster
        that fails is said in the notes).

        Returns:
            Whether any study changed (a new study, new trials or results, new attributes or notes).

        Raises:
            Exception: what listing the Experiments raises (:func:`readable_experiments`); nothing changed then.
        """
        changed = False
        shown = []
        for experiment in self._list():
            try:
                changed |= self._refresh(experiment)
            except Exception:  # noqa: BLE001 - one Experiment's storage failing leaves the others' studies live
                log.warning("refreshing the study of Experiment %s failed", study_name(experiment), exc_info=True)
            entry = self._entries.get(experiment["metadata"]["uid"])
            if entry is not None and entry.study is not None:
                head = note(entry.experiment, summary(entry.experiment), entry.reason)
                shown.append(Shown(entry.experiment, entry.study, entry.live, head))
        if self.notes is not None:
            changed |= self.notes.refresh(shown)
        return changed

    def _refresh(self, experiment: dict) -> bool:
        uid = experiment["metadata"]["uid"]
        entry = self._entries.get(uid)
        if entry is None:
            self._forget(study_name(experiment))  # an Experiment of this name was deleted and created again
            entry = self._entries[uid] = _Entry(experiment)
        entry.experiment = experiment
        changed = entry.live.refresh() if entry.live is not None else self._show(entry)
        return self._describe(entry) or changed

    def _forget(self, name: str) -> None:
        """Delete the study named ``name`` and its entry, when there is one."""
        for uid, entry in list(self._entries.items()):
            if study_name(entry.experiment) == name:
                del self._entries[uid]
        self._delete_study(name)

    def _delete_study(self, name: str) -> None:
        try:
            self.storage.delete_study(self.storage.get_study_id_from_name(name))
        except KeyError:
            pass

    def _show(self, entry: _Entry) -> bool:
        """Give ``entry`` a live study of its trials when it can have one, else a study without trials (kept).

        Raises:
            Exception: what :class:`~kubetune.sdk.live_study.LiveStudy` raises reading storage once the
                Experiment was read; the next call tries again.
        """
        import optuna

        experiment, name = entry.experiment, study_name(entry.experiment)
        reason = unshown_reason(experiment["spec"])
        if reason is None:
            try:
                analysis = self._analysis_of(experiment, None, None)
            except FileNotFoundError:
                reason = "nothing is in its storage yet"
            except Exception as exc:  # noqa: BLE001 - storage unreachable, refused...: said in the note, tried again
                log.warning("reading Experiment %s from storage failed", name, exc_info=True)
                reason = f"its storage cannot be read ({type(exc).__name__}: {exc})"
        if reason is None:
            self._delete_study(name)  # the study without trials shown so far, or one a failed LiveStudy left
            entry.live = LiveStudy(
                analysis,
                storage=self.storage,
                study_name=name,
                reread=lambda previous, listed: self._analysis_of(entry.experiment, previous, listed),
                settle_s=self.settle_s,
                trial_attrs=self.notes.trial_attrs_of(experiment) if self.notes is not None else None,
            )
            entry.study, entry.reason, entry.written = entry.live.study, None, {}
            return True
        entry.reason = reason
        if entry.study is not None and self._has(name):
            return False
        _, mode = spec_objectives(experiment["spec"])
        directions = ["maximize" if m == "max" else "minimize" for m in (mode if is_multi_objective(mode) else [mode])]
        entry.study = optuna.create_study(storage=self.storage, study_name=name, directions=directions)
        entry.written = {}
        return True

    def _has(self, name: str) -> bool:
        try:
            self.storage.get_study_id_from_name(name)
        except KeyError:
            return False
        return True

    def _describe(self, entry: _Entry) -> bool:
        """Write the Experiment's few words into its study's user attributes and note where they changed."""
        from optuna_dashboard import save_note

        words = summary(entry.experiment)
        body = note(entry.experiment, words, entry.reason)
        wanted = {**words, "note": body}
        if wanted == entry.written:
            return False
        study_id = entry.study._study_id
        for key, value in words.items():
            if entry.written.get(key) != value:
                self.storage.set_study_user_attr(study_id, key, value)
        if entry.written.get("note") != body and self.notes is None:  # else the notes write it, with the cluster's
            save_note(entry.study, body)
        entry.written = wanted
        return True
