"""The trial lifecycle as a table: how an ended pod, seen in the Experiment's situation, moves its Trial.

``TrialLifecycle._pod_ended`` (``trial_lifecycle.py``) classifies what it sees (:func:`observe`) and carries out the
:class:`Transition` :func:`transition` gives; ``tests/unit/test_lifecycle.py`` checks every row.
Observations:

* ``end``: how the attempt's pod ended: ``Succeeded`` (exit 0), ``Failed`` (non-zero exit), or
  ``Disrupted`` (Kubernetes ended it: eviction, preemption, a drain, ``DisruptionTarget``, or the pod
  was deleted while it ran), which never counts as a failure, as a Job's ``podFailurePolicy``
  ignores disruptions.
* ``outcome``: the runtime's word in the termination message (``kubetune.env.OUTCOME_*``) when the
  pod exited 0, else None.
* ``situation``: ``running``, ``suspending`` (``spec.suspend``) or ``stopping`` (the Experiment is
  ending: goal, time budget, too many failures).
"""

from __future__ import annotations

from typing import NamedTuple

from kubetune.env import OUTCOME_COMPLETED, OUTCOME_FENCED, OUTCOME_PAUSED, OUTCOME_STOPPED, OUTCOME_TERMINATED

ENDS = ("Succeeded", "Failed", "Disrupted")
OUTCOMES = (OUTCOME_COMPLETED, OUTCOME_STOPPED, OUTCOME_PAUSED, OUTCOME_TERMINATED, OUTCOME_FENCED, None)
SITUATIONS = ("running", "suspending", "stopping")

#: What a transition does to the Trial: ``complete`` (Succeeded; the scheduler hears it completed),
#: ``finish`` (Succeeded, ended early; the scheduler hears it removed), ``pause`` (Paused; resumed later
#: from its checkpoint), ``retry`` (Pending, a new attempt from the checkpoint, not counted) and
#: ``fail`` (counted against ``failure.maxFailures``: retried, or Failed once none are left).
ACTIONS = ("complete", "finish", "pause", "retry", "fail")


class Transition(NamedTuple):
    """What becomes of the Trial.

    Attributes:
        action: one of :data:`ACTIONS`.
        reason: the Trial's ``status.reason``; :data:`STOP_REASON` stands for why the Experiment is ending.
        pod_reason: the pod's own reason wins over ``reason`` when it has one (the disruption's, such as
            ``Evicted``, or the container's, such as ``OOMKilled``).
    """

    action: str
    reason: str
    pod_reason: bool = False


#: Stands for why the Experiment is ending (``GoalReached``, ``TimeBudgetExhausted``...).
STOP_REASON = "<stop reason>"


def _row(end: str, outcome: str | None, situation: str) -> Transition:
    if end == "Succeeded" and outcome == OUTCOME_COMPLETED:
        return Transition("complete", "Completed")  # a trial that completed did, whatever else is going on
    if end == "Failed":
        return Transition("fail", "Error", pod_reason=True)
    if end == "Succeeded" and outcome == OUTCOME_STOPPED and situation == "running":
        return Transition("finish", "EarlyStopped")
    if situation == "suspending" and end == "Succeeded":
        return Transition("pause", "Suspended")
    if situation == "stopping" and end == "Succeeded":
        return Transition("finish", STOP_REASON)
    if end == "Disrupted":  # asked to stop or suspend: the pod was deleted on purpose
        return {
            "running": Transition("retry", "PodDeleted", pod_reason=True),
            "suspending": Transition("pause", "Suspended"),
            "stopping": Transition("finish", STOP_REASON),
        }[situation]
    return {
        OUTCOME_PAUSED: Transition("pause", "SchedulerPaused"),
        OUTCOME_TERMINATED: Transition("retry", "Terminated", pod_reason=True),
        OUTCOME_FENCED: Transition("retry", "Fenced"),
        None: Transition("fail", "NoOutcome"),
    }[outcome]


#: The whole table: ``(end, outcome, situation) -> Transition``.
TRANSITIONS = {
    (end, outcome, situation): _row(end, outcome, situation)
    for end in ENDS
    for outcome in (OUTCOMES if end == "Succeeded" else (None,))
    for situation in SITUATIONS
}


def transition(end: str, outcome: str | None, situation: str) -> Transition:
    """The row of :data:`TRANSITIONS`; an outcome the runtime does not write reads as None.

    Raises:
        KeyError: ``end`` or ``situation`` is not one of :data:`ENDS` / :data:`SITUATIONS`.
    """
    if end != "Succeeded" or outcome not in OUTCOMES:
        outcome = None
    return TRANSITIONS[end, outcome, situation]
