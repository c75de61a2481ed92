"""The trial-scheduler interface (Ray Tune's ``TrialScheduler``) and its decisions.

Owns :class:`TrialScheduler`, the base of every scheduler in
``kubetune_operator.schedulers``, and the decisions ``CONTINUE``, ``CHECKPOINT``
(continue after a checkpoint of this result, as PBT asks of its top trials), ``PAUSE``
and ``STOP``, spelled as the collector sends them to the runtime
(``kubetune.env.DECISIONS``). Callers: the collector (``on_trial_result`` for
every result it receives, replying with the decision) and the reconcile loop
(``on_trial_add`` when it creates a Trial, ``on_trial_complete`` /
``on_trial_remove`` when one ends, ``choose_trial_to_run`` / ``trials_to_stop``
for paused trials, ``get_state``/``set_state`` around a restart). The optional hooks
(``set_trial_config``, ``sampled``, ``fill_config``, ``required_attrs``, ``take_exploit``,
``take_exploits``, ``take_budget``, ``next_exploration``, ``explored``) are no-ops here: a scheduler
overrides those it needs and the operator calls them all (docs/architecture.md, "Adding a scheduler").
Also owns :class:`Exploit`, the record of a PBT exploit that travels from the scheduler to the operator
(and into the journal's snapshots).

Schedulers never read the clock: time is the result's ``time_attr``
(``training_iteration``, ``time_total_s``, ...). Pure Python: no kopf, no
Kubernetes imports.
"""

from __future__ import annotations

from typing import Sequence, TypedDict

from kubetune.resultkeys import check_mode

__all__ = ["CHECKPOINT", "CONTINUE", "PAUSE", "STOP", "Exploit", "ExploreInPod", "TrialScheduler"]

CONTINUE = "continue"
CHECKPOINT = "checkpoint"
PAUSE = "pause"
STOP = "stop"


class ExploreInPod(TypedDict):
    """The user functions an exploited trial's pod calls to explore its config (they cannot run in the operator).

    Attributes:
        resample: ``[{"path", "function", "int"}]``: the ``hyperparam_mutations`` keys resampled by a function.
        customExploreFn: the URI of the pickled ``custom_explore_fn``, or None.
    """

    resample: list[dict]
    customExploreFn: str | None


class _ExploitKeys(TypedDict):
    """The keys every :class:`Exploit` has (Python 3.10 has no ``NotRequired``)."""

    donor: str
    iteration: int
    config: dict | None
    oldConfig: dict
    donorConfig: dict
    operations: dict
    trialIteration: int


class Exploit(_ExploitKeys, total=False):
    """A PBT exploit: a trial continues from ``donor``'s checkpoint with an explored config
    (:meth:`TrialScheduler.take_exploit`). The keys are camelCase as the journal's snapshots keep them.

    Attributes:
        donor: the trial whose checkpoint is restored (the trial itself for a PBT replay).
        iteration: the donor checkpoint's ``training_iteration``: where the trial's next attempt starts over.
        config: the explored config; None while PB2 has yet to choose it (:meth:`TrialScheduler.explored`).
        oldConfig: the trial's config before the exploit.
        donorConfig: the donor's config the new one was explored from.
        operations: ``{key: what explore did to it}`` (the perturbation record's ``operations``).
        trialIteration: the exploited trial's iteration at the result that decided it.
        logConfig: whether the exploit goes into the policy log (PBT's ``log_config``; True when absent).
        explore: the user functions the trial's pod calls to choose the config, when some must be called.
        attempt: the trial's attempt the exploit was decided at (the operator adds it).
        error: why PB2's explore step failed (the operator adds it; the donor's config is kept).
    """

    logConfig: bool
    explore: ExploreInPod | None
    attempt: int
    error: str


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

    # ----- optional hooks: no-ops here; a scheduler overrides those it needs --------------------------
    #: Result keys every result must have besides the experiment's metric (PBT's ``require_attrs``); a result
    #: without one fails the experiment (``MetricMissing``), as Ray's run raises at it.
    required_attrs: tuple[str, ...] = ()

    def set_trial_config(self, trial_id: str, config: dict) -> None:
        """The config ``trial_id`` was created with (results reach the operator without it); after ``on_trial_add``."""

    def sampled(self, trial_id: str, config: dict) -> None:
        """``trial_id``'s config with the values its pod drew for ``sample_from`` functions: its config from now on."""

    def fill_config(self, trial_id: str, config: dict) -> dict:
        """The config the new trial ``trial_id`` is created with, given the searcher's ``config`` (PB2 fills in the
        bounded keys it lacks). Default: ``config`` itself."""
        return config

    def take_exploit(self, trial_id: str) -> Exploit | None:
        """The exploit the last result of ``trial_id`` decided (it returned ``PAUSE`` for it), once (then
        forgotten); None when it decided none. The operator restarts the trial from the donor's checkpoint."""
        return None

    def take_exploits(self) -> dict[str, Exploit]:
        """Every exploit decided for trials other than the one whose result is being decided (synchronous PBT
        decides those of waiting trials), by trial, once; called after every decision."""
        return {}

    def take_budget(self, trial_id: str) -> int | float | None:
        """The rung budget of ``trial_id``'s last result, once, when the searcher should learn from it with that
        budget (``result["hyperband_info"]["budget"]``, as HyperBandForBOHB hands it to BOHB); else None."""
        return None

    def next_exploration(self) -> dict | None:
        """A job to compute off the event loop (PB2's explore step, in the operator's worker process), or None.
        Its outcome comes back through :meth:`explored`."""
        return None

    def explored(self, trial_id: str, outcome: dict) -> dict:
        """The outcome of ``trial_id``'s open exploration (the job of :meth:`next_exploration`, or the config its pod
        chose by calling the user's explore functions: ``{"config": ...}``).

        Returns:
            What the exploit's record takes of it (``{"config": ...}``, PB2 adds ``"donorConfig"``).

        Raises:
            ValueError: no exploration of ``trial_id`` is open (this default: the scheduler explores nothing).
        """
        raise ValueError(f"{type(self).__name__} has no exploration of {trial_id!r} open")

    def get_state(self) -> dict:
        """Everything needed to resume, as strict JSON (no NaN/Infinity)."""
        return {}

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output (possibly from another process)."""
