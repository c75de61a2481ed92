"""The function API's session: what ``kubetune.report`` and friends talk to.

A function trainable runs in its own thread. :class:`FunctionSession` is the hand-over between
that thread and :meth:`kubetune.runtime.function_trainable.FunctionTrainable.step`: each
:func:`report` passes one result over and blocks until the next ``step()``, so the function
never runs ahead of ``train()`` and a checkpoint taken between two ``train()`` calls sees it
paused. Checkpoint directories the function reports are copied into a staging directory the
session owns (the caller may delete its own copy at once).

Public functions, exported by ``kubetune``: :func:`report`, :func:`get_checkpoint`,
:func:`checkpoint_dir`, :func:`get_trial_id`, :func:`get_trial_name`, :func:`get_trial_dir`,
and the :class:`StatusReporter` passed to ``def f(config, reporter)``. Semantics follow Ray Tune
(``tune.report``/``track.log``/``tune.checkpoint_dir`` of 1.x, ``train.report`` and
``train.get_checkpoint`` of 2.x).
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import queue
import shutil
import tempfile
import threading
import warnings
from typing import Any, Callable, Iterator

from kubetune.checkpoint_layout import Checkpoint, copy_tree

logger = logging.getLogger(__name__)

_local = threading.local()  # the session of the function running in this thread


class _SessionEnded(BaseException):
    """Raised inside the function's thread to unwind it when its trainable stops or restarts it."""


class FunctionSession:
    """One run of a trainable function, from start to return, error or stop.

    Args:
        trial_id: the trial's id, for :func:`get_trial_id`.
        trial_name: the trial's name.
        logdir: the trainable's local directory, for :func:`get_trial_dir`.
        staging_dir: directory this session copies reported checkpoints into. A checkpoint handed
            to ``step()`` then belongs to the trainable, which deletes it once a newer one arrives.
        checkpoint: staged directory to resume from (after a restore), or None.

    Attributes:
        checkpoint: the newest checkpoint directory the function knows (restored or reported), or None.
    """

    def __init__(self, *, trial_id: str, trial_name: str, logdir: str, staging_dir: str, checkpoint: str | None = None):
        self.trial_id, self.trial_name, self.logdir = trial_id, trial_name, logdir
        self.checkpoint = checkpoint
        self._staging_dir = staging_dir
        self._pending: str | None = None
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._resume = threading.Semaphore(0)
        self._ending = False
        self._thread: threading.Thread | None = None
        self._final: tuple | None = None

    # ------------------------------------------------------------ trainable side
    def next_item(self, target: Callable[[], None]) -> tuple[str, Any, str | None]:
        """Let the function run to its next report; start it with ``target`` on the first call.

        Returns:
            ``(kind, payload, new_checkpoint)``: ``("result", metrics dict, dir or None)``,
            ``("done", None, dir or None)`` once the function returned, or ``("error", exception, None)``.
            ``new_checkpoint`` is the staged directory of a checkpoint that came with this item.
            After "done" or "error" every call returns that item again (without the checkpoint).
        """
        if self._final is not None:
            return self._final
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(target,), daemon=True, name=f"kubetune-function-{self.trial_name}"
            )
            self._thread.start()
        else:
            self._resume.release()
        while True:
            try:
                item = self._items.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._items.empty():
                    item = ("error", RuntimeError("the trainable function's thread ended without a result"), None)
                    break
        if item[0] != "result":
            self._final = (item[0], item[1], None)
        return item

    def end(self, timeout_s: float = 10.0) -> None:
        """Unwind a function paused in :meth:`report` (its ``finally`` blocks run) and wait for it."""
        self._ending = True
        if self._thread is not None and self._thread.is_alive():
            self._resume.release()
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning("trainable function of %s did not stop within %.0f s", self.trial_name, timeout_s)

    def _run(self, target: Callable[[], None]) -> None:
        _local.session = self
        try:
            target()
        except _SessionEnded:
            return
        except BaseException as e:  # handed to step(), which raises it with its traceback
            self._items.put(("error", e, None))
            return
        self._items.put(("done", None, self._promote_pending()))

    # ------------------------------------------------------------ function side
    def report(self, metrics: dict, checkpoint: Checkpoint | None = None) -> None:
        """Hand ``metrics`` to ``step()`` and wait for the next ``step()``.

        Raises:
            _SessionEnded: the trainable stopped or restarted the function meanwhile.
        """
        if self._ending:
            raise _SessionEnded()
        if checkpoint is not None:
            self.register(self._stage(checkpoint.path))
        self._items.put(("result", dict(metrics), self._promote_pending()))
        self._resume.acquire()
        if self._ending:
            raise _SessionEnded()

    def new_checkpoint_dir(self, step: int) -> str:
        """Return a fresh, empty staged directory for the checkpoint of ``step``."""
        return tempfile.mkdtemp(prefix=f"checkpoint_{step:06d}_", dir=self._staging_dir)

    def register(self, path: str) -> None:
        """Make the staged directory ``path`` the checkpoint attached to the next report."""
        if self._pending not in (None, path, self.checkpoint):  # superseded before anyone saw it
            shutil.rmtree(self._pending, ignore_errors=True)
        self._pending = path

    def _stage(self, path: str) -> str:
        if self._owns(path):
            return path
        staged = tempfile.mkdtemp(prefix="reported_", dir=self._staging_dir)
        copy_tree(path, staged)
        return staged

    def _promote_pending(self) -> str | None:
        """Make the pending checkpoint the newest and return it (None when there is none)."""
        if self._pending is not None:
            self.checkpoint, self._pending = self._pending, None
            return self.checkpoint
        return None

    def _owns(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) == os.path.abspath(self._staging_dir)


def _current() -> FunctionSession | None:
    """The session of the function running in the calling thread (threads it starts have none)."""
    return getattr(_local, "session", None)


def _session_or_warn(what: str) -> FunctionSession | None:
    session = _current()
    if session is None:
        warnings.warn(f"kubetune.{what} called outside a function trainable; ignored", RuntimeWarning, stacklevel=3)
    return session


def report(
    metrics: dict | numbers.Number | None = None, *, checkpoint: Checkpoint | None = None, **kwargs: Any
) -> None:
    """Report one result (one ``train()`` iteration) from a function trainable.

    Blocks until the trainable asks for the next result. Outside a function trainable it warns
    and does nothing, like Ray.

    Args:
        metrics: the result dict (Ray 2.x ``train.report(metrics)``); a bare number is reported as
            ``_metric`` (Ray 1.x ``tune.report(_metric)``).
        checkpoint: a checkpoint directory to keep with this result; it is copied before this returns.
        **kwargs: further metrics (Ray 1.x ``tune.report(**kwargs)``), merged over ``metrics``.
    """
    session = _session_or_warn("report")
    if session is None:
        return
    if isinstance(metrics, numbers.Number):
        metrics = {"_metric": metrics}
    session.report({**(metrics or {}), **kwargs}, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """Return the newest checkpoint of this trial (the restored one, or the last reported), or None."""
    session = _session_or_warn("get_checkpoint")
    if session is None or session.checkpoint is None:
        return None
    return Checkpoint(session.checkpoint)


@contextlib.contextmanager
def checkpoint_dir(step: int) -> Iterator[str]:
    """Yield a fresh directory to write the checkpoint of ``step`` into (Ray 1.x ``tune.checkpoint_dir``).

    On exit the directory is registered and travels with the next :func:`report` (whose result
    then has ``should_checkpoint``); a function that returns first attaches it to its final result.

    Raises:
        RuntimeError: called outside a function trainable.
    """
    session = _current()
    if session is None:
        raise RuntimeError("kubetune.checkpoint_dir() must be called inside a function trainable")
    path = session.new_checkpoint_dir(step)
    yield path
    session.register(path)


def is_session_enabled() -> bool:
    """Whether the caller runs inside a function trainable's session (Ray 2.0's ``tune.is_session_enabled``)."""
    return _current() is not None


def get_trial_id() -> str | None:
    """The running trial's id, or None outside a function trainable."""
    session = _current()
    return session.trial_id if session else None


def get_trial_name() -> str | None:
    """The running trial's name, or None outside a function trainable."""
    session = _current()
    return session.trial_name if session else None


def get_trial_dir() -> str | None:
    """The running trial's local directory, or None outside a function trainable."""
    session = _current()
    return session.logdir if session else None


class StatusReporter:
    """The ``reporter`` passed to ``def f(config, reporter)`` (Ray's ``StatusReporter``).

    ``reporter(**metrics)`` or ``reporter(value)`` (reported as ``_metric``) is :func:`report`.
    """

    def __init__(self, session: FunctionSession):
        self._session = session

    def __call__(self, _metric: Any = None, **kwargs: Any) -> None:
        if _metric is not None:
            kwargs["_metric"] = _metric
        self._session.report(kwargs)

    @property
    def logdir(self) -> str:
        """The trial's local directory."""
        return self._session.logdir

    @property
    def trial_id(self) -> str:
        """The trial's id."""
        return self._session.trial_id

    @property
    def trial_name(self) -> str:
        """The trial's name."""
        return self._session.trial_name
