"""What runs when a trial attempt ends: the closers of what the trainable opened for the attempt.

Owns :func:`at_attempt_end`, called by code that runs in the trial pod and opens something outside the pod that must
be closed when the attempt ends (``kubetune.integrations.mlflow.setup_mlflow`` ends its MLflow run,
``kubetune.integrations.wandb.setup_wandb`` finishes its W&B run), and :func:`attempt_ended`, called once by the
pod's process (:mod:`kubetune.runtime.main`) when the attempt has ended, with whether it failed. The trainable runs in
a thread of its own, so the libraries' own exit handlers, which close only what the main thread opened, cannot stand
in. Outside a pod (a trainable trained by hand, tests) nothing calls :func:`attempt_ended`, and the closers run at the
interpreter's exit instead, as not failed.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_closers: list[Callable[[bool], None]] = []


def at_attempt_end(closer: Callable[[bool], None]) -> None:
    """Call ``closer(failed)`` once when this attempt ends: ``failed`` is True when the trainable (or the runtime)
    raised, False when the attempt completed, stopped, paused or was terminated by a signal.

    Closers run in the order they were added; an exception of one is logged and the others still run.
    """
    with _lock:
        _closers.append(closer)


def attempt_ended(failed: bool) -> None:
    """Run and forget every closer added so far (see :func:`at_attempt_end`).

    Args:
        failed: whether the attempt failed.
    """
    with _lock:
        closers = list(_closers)
        _closers.clear()
    for closer in closers:
        try:
            closer(failed)
        except Exception:  # noqa: BLE001 - a tracker that cannot be closed must not change the attempt's outcome
            logger.warning("closing %r at the end of the attempt failed", closer, exc_info=True)


atexit.register(attempt_ended, False)
