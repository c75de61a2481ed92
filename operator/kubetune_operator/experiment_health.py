"""The Experiment's health: whether its latest spec is accepted and its trials can start, be written and run.

Owns :class:`ExperimentHealth`: why the latest spec was refused (and its generation), why the API server refused
the last trial pod, the names other owners hold, why the last pass failed, and the conditions they make
(``Ready``, ``Degraded``, ``TrialsStalled``, ``TrialsWaiting``: :meth:`ExperimentHealth.conditions`). Called by the
registry (a spec refused or accepted), ``kube.py`` through the controller (a pod refused or accepted, a name taken),
the handlers (a pass failed) and the status projection (the conditions of each status it writes). Pure.
"""

from __future__ import annotations

from datetime import datetime

from kubetune.env import STALL_REASONS

from . import status as st
from .podview import WAITING_CAUSES
from .spec_intake import SpecIntake
from .trial_book import TrialBook, TrialState

#: Status writes of one Trial that fail in a row before the Experiment stops waiting for it: it may finish
#: without that Trial's last status, which is tried again at ``status.write_interval_s`` and shown in the
#: ``Degraded`` condition (reason ``TrialStatusNotWritten``) and a Warning event on the Experiment.
STATUS_WRITE_ATTEMPTS = 3


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


class ExperimentHealth:
    """What keeps one Experiment from being Ready or healthy.

    Args:
        intake: the spec in force; book: the trials.
        notices: the controller's events found between passes (posted with the next plan).
    """

    def __init__(self, intake: SpecIntake, book: TrialBook, notices: list):
        self.intake, self.book, self.notices = intake, book, notices
        self.names_taken: dict[str, str] = {}  # Trial or pod name -> why it is not ours (Ready=False TrialNameTaken)
        self.invalid: str | None = None  # why the latest spec was refused (it keeps Ready=False)
        self.refused_generation: int | None = None  # metadata.generation of the latest refused spec, if any
        self.pod_refused: str | None = None  # why the API server refused the last trial pod (Ready=False too)
        self.degraded: str | None = None  # why the last pass failed (the Degraded condition)

    def spec_refused(self, message: str, generation: int | None) -> None:
        """The Experiment's spec of ``generation`` was refused (``message``): the previous one stays in force and
        the Experiment is ``Ready=False`` until a later one is accepted."""
        self.invalid, self.refused_generation = message, generation

    def spec_accepted(self) -> None:
        """The Experiment's latest spec was accepted: what refused the spec or its last pod no longer holds."""
        self.invalid = self.pod_refused = None

    def name_free(self, name: str) -> None:
        """The create of ``name`` succeeded: it is this Experiment's."""
        self.names_taken.pop(name, None)

    def pass_failed(self, message: str | None) -> None:
        """Why the last pass failed (the ``Degraded`` condition), or None: it went through."""
        self.degraded = message

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

    def conditions(self, conditions: list | None, now: datetime) -> list[dict]:
        """``conditions`` with ``Ready`` (the latest spec accepted, or why not: ``InvalidSpec``,
        ``TrialNameTaken``), ``Degraded`` (the last pass failed, and why, or trials whose status cannot be
        written: :meth:`StatusProjection.unwritable`), ``TrialsStalled`` (running trials that report a stall, e.g.
        storage unreachable) and ``TrialsWaiting`` (trial pods that cannot start, and why: unschedulable, waiting for
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
        for trial in self.book.open.values():  # one look at each open trial
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
        gen = self.intake.experiment["metadata"].get("generation")
        if gen is None or self.refused_generation is None:
            return gen
        return max(gen, self.refused_generation)
