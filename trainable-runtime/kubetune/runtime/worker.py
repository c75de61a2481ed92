"""The workers of a trial's gang: the pods of rank 1 and above (``spec.resourcesPerTrial.workers``).

:func:`kubetune.runtime.main.main` runs a :class:`WorkerRunner` instead of a
:class:`kubetune.runtime.loop.TrialRunner` when ``KUBETUNE_RANK`` is above 0. The head (rank 0) is the trial:
it alone reports results, answers the operator's decisions and commits checkpoints. A worker runs the
user's program and keeps nothing:

* ``trainable.workerEntrypoint`` (``module:function``, called with the config) when the Experiment sets
  one; a function of an inline ``source`` is ``kubetune_trainable_source:<name>``;
* else a function trainable runs on every rank, as Ray Train runs the training function on each worker:
  its ``tune.report`` calls return at once and are dropped, only rank 0's count;
* else a ``Trainable`` class's static ``worker(config)`` method (the processes an RLlib-style trainable
  drives, as its rollout workers); a class without one is an error that fails the attempt.

Each worker restores the checkpoint the head restores (the trial's latest committed checkpoint of its
lineage, else ``restoreFrom``), so ``tune.get_checkpoint()`` answers the same on every rank; nothing a worker
does writes to the trial's folder. A config computed in the pod (``sample_from`` values, a PBT exploit's user
functions) is the head's on every rank (:mod:`kubetune.runtime.gang_config`).
"""

from __future__ import annotations

import logging

from kubetune.runtime import gang_config
from kubetune.runtime.function_trainable import as_trainable_class, wrap_function
from kubetune.runtime.loader import import_entrypoint, load_trainable
from kubetune.runtime.loop import DONE, TERMINATED, TrialRunner

log = logging.getLogger(__name__)


def worker_program(trainable: object, worker_entrypoint: str | None) -> type:
    """The ``Trainable`` class a worker runs, from the trial's ``trainable`` (a class or function, as loaded)
    and ``workerEntrypoint``.

    Raises:
        ValueError: ``trainable`` is a class without a ``worker`` method and no ``workerEntrypoint`` is set.
        ImportError, AttributeError: ``workerEntrypoint`` does not import.
    """
    if worker_entrypoint:
        return wrap_function(import_entrypoint(worker_entrypoint))
    if not isinstance(trainable, type):
        return as_trainable_class(trainable)
    worker = getattr(trainable, "worker", None)
    if not callable(worker):
        raise ValueError(
            f"the trainable {trainable.__name__} is a class and the trial has workers: give it a static method "
            "worker(config) that the worker pods run, or set spec.trainable.workerEntrypoint"
        )
    return wrap_function(worker)


class WorkerRunner(TrialRunner):
    """A :class:`TrialRunner` for a worker: the same restore, no reports, no checkpoints, no result log."""

    def setup(self) -> None:
        """Load the worker's program, take the head's config and display name when they were computed in the pod,
        restore the trial's checkpoint (read-only).

        Raises:
            TimeoutError: the head did not publish its config (:func:`kubetune.runtime.gang_config.receive`).
            Exception: loading, constructing or restoring failed.
        """
        env = self.env
        trainable = load_trainable(env, self.storage)  # first: a source's module must exist for workerEntrypoint
        cls = worker_program(trainable, env.worker_entrypoint)
        if gang_config.computed_in_pod(env):
            config, display_name = gang_config.receive(self.storage, env)
        else:
            config, display_name = env.config, env.display_name
        self.trainable = cls(  # trial_name is the head's: the display name when the trial has one
            config=config, trial_id=env.trial, trial_name=display_name or env.trial, logdir=str(self.workdir / "logdir")
        )
        self._restore()
        log.info("worker %d of %d of trial %s ready", env.rank, env.world_size, env.trial)

    def iterate(self) -> str | None:
        """Run one step of the worker's program and drop its result; return why it ends, or None to go on."""
        result = self.train_once()
        if result is None:
            return TERMINATED
        return DONE if result.get("__duplicate__") or result.get("done") else None

    def finish(self, reason: str, *, stop_trainable: bool = True, reporter_timeout_s: float = 10.0) -> None:
        """End the worker's program; nothing is checkpointed or reported."""
        if stop_trainable and self.trainable is not None:
            self.trainable.stop()
