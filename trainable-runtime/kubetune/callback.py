"""Ray Tune's ``Callback``: user code that Ray calls from its driver as the experiment goes on.

Owns :class:`Callback`, ``tune.Callback`` (Ray's ``ray.tune.callback.Callback``, 2.x's hooks and signatures). A
script passes instances as ``tune.run(callbacks=[...])`` or ``RunConfig(callbacks=[...])``; the SDK
(:mod:`kubetune.sdk.tuner`) pickles them to the experiment's storage and the operator runs them in the Experiment's
driver pod (:mod:`kubetune.runtime.driver`), never in its own process. The driver calls the hooks in the order the
operator's journal holds the trials' events (docs/sdk.md, "Callbacks run in the driver pod").
"""

from __future__ import annotations

from typing import Any

__all__ = ["Callback"]


class Callback:
    """Ray's driver-side callback; every hook does nothing unless overridden.

    ``iteration`` is the driver's step: the journal position of the event being handled (it grows through the
    run, as Ray's loop counter does). ``trials`` is every trial the driver has seen, in creation order; each is a
    :class:`kubetune.runtime.driver.DriverTrial` (``trial_id``, ``config``, ``last_result``, ``status``, ``path``).
    """

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info):
        """Called once as the driver starts, before any other hook (Ray: when the run starts)."""

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        """Before the driver handles a batch of events."""

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        """After the driver handled a batch of events."""

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info) -> None:
        """``trial`` was created (kubetune starts its pod next)."""

    def on_trial_restore(self, iteration: int, trials: list, trial: Any, **info) -> None:
        """Never called by kubetune's driver: a trial's pod restores its checkpoint itself (docs/sdk.md)."""

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info) -> None:
        """``trial`` committed a checkpoint (called after :meth:`on_checkpoint`, as Ray's controller does)."""

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info) -> None:
        """``trial`` reported ``result`` (with the trial's ``config``, as Ray's results carry it)."""

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
        """``trial`` ended without an error: it finished, or a scheduler or stopper stopped it (Ray's rule)."""

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
        """``trial`` ended with an error, its retries spent."""

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info) -> None:
        """``trial`` committed ``checkpoint`` to the experiment's storage: a
        :class:`kubetune.checkpoint_store.StoredCheckpoint` (its ``uri``; ``path``, ``to_directory`` and
        ``as_directory`` download it), after the result it was reported with."""

    def on_experiment_end(self, trials: list, **info) -> None:
        """Every trial ended and the search is over; the Experiment ends once this returns."""
