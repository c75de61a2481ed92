"""Function trainables: turning ``def train_fn(config): ... report(...)`` into a :class:`Trainable`.

Owns :func:`wrap_function`, which builds a :class:`FunctionTrainable` subclass around a
function, and :func:`as_trainable_class`, which the in-pod runtime (``kubetune.runtime``)
calls on whatever the Experiment's ``trainable`` names. The function runs in its own thread
and hands results over through a :class:`kubetune.runtime.session.FunctionSession`; every report is one
``train()`` result. Its checkpoints are saved and restored in Ray's 1.x layout like any class
trainable's, so the runtime treats both kinds alike.

Accepted signatures, as Ray Tune detects them: ``f(config)`` (modern ``report``/``get_checkpoint``
or ``track.log``), ``f(config, reporter)``, ``f(config, checkpoint_dir=None)`` and
``f(config, reporter, checkpoint_dir=None)``; also generators, whose yielded values are reported.
"""

from __future__ import annotations

import copy
import inspect
import numbers
import os
import shutil
import tempfile
import threading
from typing import Any, Callable

from kubetune.checkpoint_layout import CHECKPOINT_MARKER, METADATA_SUFFIX, copy_tree, find_checkpoint_dir
from kubetune.runtime.session import FunctionSession, StatusReporter
from kubetune.runtime.trainable import DONE, RESULT_DUPLICATE, SHOULD_CHECKPOINT, Trainable


class FunctionTrainable(Trainable):
    """A :class:`Trainable` whose ``step()`` runs a function up to its next report.

    Do not subclass directly; :func:`wrap_function` sets the function. ``save_checkpoint`` copies
    the function's newest checkpoint (the directory its last checkpointed report carried), and the
    saved metadata holds the counters as of that report, so a restore resumes numbering right
    after it. Without any checkpoint the save records iteration 0, and a restore starts the
    function afresh.

    ``save()`` may run in another thread while ``train()`` runs (the runtime checkpoints on SIGTERM
    during a long step): the checkpoint directory and its counters change together under a lock
    once ``train()`` has its result, so a save sees either the old pair or the new one.
    """

    _function: Callable[..., Any]
    _wants_reporter = False
    _reporter_positional = False
    _wants_checkpoint_dir = False

    def setup(self, config: dict) -> None:
        self._fn_config = config
        self._staging_dir = tempfile.mkdtemp(prefix=".function_checkpoints_", dir=self.logdir)
        self._session = self._new_session(None)
        self._checkpoint_lock = threading.RLock()
        self._checkpoint_dir: str | None = None  # newest checkpoint of a result train() returned
        self._checkpoint_state: dict | None = None  # get_state() as of that result
        self._incoming: str | None = None  # checkpoint of the result step() is returning

    def _new_session(self, checkpoint: str | None) -> FunctionSession:
        return FunctionSession(
            trial_id=self.trial_id,
            trial_name=self.trial_name,
            logdir=self.logdir,
            staging_dir=self._staging_dir,
            checkpoint=checkpoint,
        )

    def _restart(self, checkpoint_dir: str | None) -> None:
        """End the running function and prepare a fresh run resuming from ``checkpoint_dir`` (copied)."""
        self._session.end()
        with self._checkpoint_lock:
            for name in os.listdir(self._staging_dir):
                shutil.rmtree(os.path.join(self._staging_dir, name), ignore_errors=True)
            staged = None
            if checkpoint_dir is not None:
                staged = tempfile.mkdtemp(prefix="restored_", dir=self._staging_dir)
                copy_tree(checkpoint_dir, staged, skip_top=(CHECKPOINT_MARKER, METADATA_SUFFIX))
            self._checkpoint_dir, self._incoming = staged, None
            self._checkpoint_state = Trainable.get_state(self) if staged is not None else None
        self._session = self._new_session(staged)

    def _run_function(self, session: FunctionSession) -> None:
        fn = type(self)._function
        args: list[Any] = [self._fn_config]
        kwargs: dict[str, Any] = {}
        if self._reporter_positional:
            args.append(StatusReporter(session))
        elif self._wants_reporter:
            kwargs["reporter"] = StatusReporter(session)
        if self._wants_checkpoint_dir:
            kwargs["checkpoint_dir"] = session.checkpoint
        output = fn(*args, **kwargs)
        if inspect.isgenerator(output):
            for value in output:
                _report_output(session, value)
        else:
            _report_output(session, output)

    def step(self) -> dict:
        session = self._session
        kind, payload, new_checkpoint = session.next_item(lambda: self._run_function(session))
        if kind == "error":
            raise payload
        self._incoming = new_checkpoint
        if kind == "done" and not self._last_result and new_checkpoint is not None:
            # the function checkpointed but never reported: as Ray, the checkpoint is kept, with a final
            # result (the auto-filled fields) that it belongs to
            return {DONE: True, SHOULD_CHECKPOINT: True}
        if kind == "done":
            return {
                **self._last_result,
                RESULT_DUPLICATE: True,
                DONE: True,
                SHOULD_CHECKPOINT: new_checkpoint is not None,
            }
        if new_checkpoint is not None:
            payload[SHOULD_CHECKPOINT] = True
        return payload

    def train(self) -> dict:
        result = super().train()
        if self._incoming is not None:
            with self._checkpoint_lock:
                previous, self._checkpoint_dir, self._incoming = self._checkpoint_dir, self._incoming, None
                self._checkpoint_state = Trainable.get_state(self)
                if previous not in (None, self._checkpoint_dir):
                    shutil.rmtree(previous, ignore_errors=True)
        return result

    def get_state(self) -> dict:
        """Counters as of the newest checkpoint's report; iteration 0 when there is no checkpoint."""
        with self._checkpoint_lock:
            if self._checkpoint_state is not None:
                return dict(self._checkpoint_state)
        return {
            **super().get_state(),
            "iteration": 0,
            "timesteps_total": None,
            "time_total": 0.0,
            "episodes_total": None,
            "last_result": {},
        }

    def _save_local(self, parent: str) -> tuple[str, str, dict]:
        with self._checkpoint_lock:  # the state and the directory saved must belong together
            return super()._save_local(parent)

    def save_checkpoint(self, checkpoint_dir: str) -> str | dict:
        if self._checkpoint_dir is None:
            return {}
        copy_tree(self._checkpoint_dir, checkpoint_dir)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str | dict) -> None:
        self._restart(None if isinstance(checkpoint, dict) else find_checkpoint_dir(checkpoint))

    def reset_config(self, new_config: dict) -> bool:
        self._fn_config = copy.deepcopy(new_config)
        self._restart(None)
        return True

    def cleanup(self) -> None:
        self._session.end()
        shutil.rmtree(self._staging_dir, ignore_errors=True)


def _report_output(session: FunctionSession, value: Any) -> None:
    """Report a returned or yielded value: a dict as a result, a number as ``_metric`` (Ray's rule)."""
    if value is None:
        return
    if isinstance(value, dict):
        session.report(value)
    elif isinstance(value, numbers.Number):
        session.report({"_metric": value})
    else:
        raise TypeError(f"a trainable function may return or yield a number or a dict, got {type(value).__name__}")


def wrap_function(fn: Callable[..., Any]) -> type[FunctionTrainable]:
    """Return a :class:`FunctionTrainable` subclass that runs ``fn``.

    The signature decides what ``fn`` is given, as in Ray Tune: a parameter named ``reporter`` gets
    a :class:`kubetune.runtime.session.StatusReporter`; a second positional parameter without default under
    another name gets it too (Ray 0.8's rule); a parameter named ``checkpoint_dir`` gets the
    directory of the checkpoint to resume from, or None. The class is named after ``fn``.

    Raises:
        TypeError: ``fn`` is not callable or cannot be called with a config and those arguments.
    """
    if not callable(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    signature = inspect.signature(fn)
    params = signature.parameters
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    wants_reporter = "reporter" in params
    wants_checkpoint_dir = "checkpoint_dir" in params
    reporter_positional = (
        not wants_reporter
        and len(positional) == 2
        and positional[1].default is inspect.Parameter.empty
        and positional[1].name != "checkpoint_dir"
    )
    try:
        signature.bind(
            {},
            *([None] if reporter_positional else []),
            **({"reporter": None} if wants_reporter else {}),
            **({"checkpoint_dir": None} if wants_checkpoint_dir else {}),
        )
    except TypeError as e:
        raise TypeError(
            f"trainable function {getattr(fn, '__qualname__', fn)!r} must accept (config), "
            f"(config, reporter) or (config, checkpoint_dir=None): {e}"
        ) from None
    name = getattr(fn, "__name__", type(fn).__name__)
    return type(
        name,
        (FunctionTrainable,),
        {
            "_function": staticmethod(fn),
            "_wants_reporter": wants_reporter,
            "_reporter_positional": reporter_positional,
            "_wants_checkpoint_dir": wants_checkpoint_dir,
            "__doc__": getattr(fn, "__doc__", None),
        },
    )


def as_trainable_class(obj: Any) -> type[Trainable]:
    """Return the Trainable class for what an Experiment's ``trainable`` names.

    A :class:`Trainable` subclass is returned as is; any other callable that is not a class is
    wrapped with :func:`wrap_function`.

    Raises:
        TypeError: ``obj`` is a class that does not subclass ``kubetune.Trainable`` (for example
            Ray's own ``ray.tune.Trainable``), or not callable.
    """
    if isinstance(obj, type):
        if issubclass(obj, Trainable):
            return obj
        raise TypeError(
            f"class {obj.__module__}.{obj.__qualname__} is not a subclass of kubetune.Trainable "
            "(a Ray Tune trainable must subclass kubetune.Trainable instead of ray.tune.Trainable)"
        )
    if callable(obj):
        return wrap_function(obj)
    raise TypeError(f"a trainable must be a kubetune.Trainable subclass or a function, got {type(obj).__name__}")
