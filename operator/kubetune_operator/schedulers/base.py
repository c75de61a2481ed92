"""The trial-scheduler interface (Ray Tune's ``TrialScheduler``) and its decisions.

Owns :class:`TrialScheduler`, the base of every scheduler in
``kubetune_operator.schedulers``, and the decisions ``CONTINUE``, ``CHECKPOINT``
(continue after a checkpoint of this result, as PBT asks of its top trials), ``PAUSE``
and ``STOP``, spelled as the collector sends them to the runtime
(``kubetune.env.DECISIONS``). Callers: the collector (``on_trial_result`` for
every result it receives, replying with the decision) and the reconcile loop
(``on_trial_add`` when it creates a Trial, ``on_trial_complete`` /
``on_trial_remove`` when one ends, ``choose_trial_to_run`` / ``trials_to_stop``
for paused trials, ``get_state``/``set_state`` around a restart).

Schedulers never read the clock: time is the result's ``time_attr``
(``training_iteration``, ``time_total_s``, ...). Pure Python: no kopf, no
Kubernetes imports.
"""

from __future__ import annotations

from typing import Sequence

from kubetune.resultkeys import check_mode

__all__ = ["CHECKPOINT", "CONTINUE", "PAUSE", "STOP", "TrialScheduler"]

CONTINUE = "continue"
CHECKPOINT = "checkpoint"
PAUSE = "pause"
STOP = "stop"


class TrialScheduler:
    """Decides, result by result, whether each trial continues, pauses or stops (Ray's ``TrialScheduler``).

    The base class is also the FIFO behaviour: every trial runs to its end.

    Args:
        metric: result key the scheduler compares trials by.
        mode: ``"max"`` or ``"min"``.

    Raises:
        ValueError: a bad ``mode``.
    """

    CONTINUE = CONTINUE
    PAUSE = PAUSE
    STOP = STOP
    #: True when no call changes what the scheduler knows (the operator then journals nothing for it).
    stateless = False

    def __init__(self, metric: str | None = None, mode: str | None = None):
        check_mode(metric, mode, required=False)
        self.metric = metric
        self.mode = mode
        self._metric_op = -1.0 if mode == "min" else 1.0

    def on_trial_add(self, trial_id: str) -> None:
        """A new trial was created (before its first result)."""

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        """The decision for ``trial_id`` after ``result``: :data:`CONTINUE`, :data:`PAUSE` or :data:`STOP`.

        A trial the scheduler has not seen is added first, so a restarted operator
        that lost track of one does not fail.
        """
        return CONTINUE

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        """``trial_id`` ended on its own (done, stop criteria) with last ``result``."""

    def on_trial_remove(self, trial_id: str) -> None:
        """``trial_id`` ended for another reason (stopped, failed, deleted)."""

    def choose_trial_to_run(self, paused_ids: Sequence[str], search_finished: bool = False) -> str | None:
        """Which paused trial a free slot should resume, or None to start a new trial instead.

        Args:
            paused_ids: trials now paused (in the operator's order).
            search_finished: the searcher will suggest no more trials.

        Returns:
            The default (Ray's FIFO order: pending trials before paused ones)
            resumes the first paused trial only once the searcher is finished.
        """
        return paused_ids[0] if search_finished and paused_ids else None

    def trials_to_stop(self, paused_ids: Sequence[str]) -> list[str]:
        """Paused trials the scheduler has decided to end (the operator stops them, then calls ``on_trial_remove``)."""
        return []

    def get_state(self) -> dict:
        """Everything needed to resume, as strict JSON (no NaN/Infinity)."""
        return {}

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output (possibly from another process)."""
