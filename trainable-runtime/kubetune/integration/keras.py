"""Ray's path ``ray.tune.integration.keras``: Keras callbacks that turn the hooks of ``model.fit`` (each epoch's end
by default) into kubetune results, with the model as a checkpoint (``from kubetune.integration.keras import
TuneReportCheckpointCallback``), and :class:`KerasReporter`, which Ray 2.x's ``ReportCheckpointCallback``
(:mod:`kubetune.integrations.keras`) extends too.

The user's function trainable passes them to ``model.fit(..., callbacks=[...])``; they run in the trial pod, in the
function's thread, and report through ``kubetune.report`` (:mod:`kubetune.integration.rounds` picks the metrics and
writes the checkpoint). Signatures, defaults and semantics are Ray 1.x's (``ray/tune/integration/keras.py`` of Ray
1.13 and the ``TuneCallback`` it extends), and ``TuneReportCheckpointCallback`` also takes the arguments Ray 2.7+
gave it (``checkpoint_on``, ``report_metrics_on``); the deprecated ``TuneReportCallback`` still reports, with a
``DeprecationWarning``. Differences, for Keras 3, in ``docs/ray-tune.md`` ("Integrations"). Keras 3 runs on the
backend it is configured with (``KERAS_BACKEND``, ``~/.keras/keras.json``): kubetune does not choose one.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import keras

from kubetune.integration.rounds import report_with_model, select_metrics
from kubetune.runtime.session import report

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]

#: The hooks Ray 1.x's callbacks take in ``on``: Keras's ``Callback.on_<hook>`` methods, with ``batch_begin`` and
#: ``batch_end``, Keras's aliases of ``train_batch_begin`` and ``train_batch_end`` (called once per training batch).
RAY1_HOOKS = (
    "batch_begin",
    "batch_end",
    "epoch_begin",
    "epoch_end",
    "train_batch_begin",
    "train_batch_end",
    "test_batch_begin",
    "test_batch_end",
    "predict_batch_begin",
    "predict_batch_end",
    "train_begin",
    "train_end",
    "test_begin",
    "test_end",
    "predict_begin",
    "predict_end",
)
#: The hooks Ray 2.x's callbacks take (``checkpoint_on``, ``report_metrics_on``): Ray 1.x's without the aliases.
HOOKS = RAY1_HOOKS[2:]
#: The model's file in each checkpoint directory: Keras 3's native format, ``keras.saving.load_model`` reads it.
MODEL_FILENAME = "model.keras"


def hooks_of(on: str | list[str], allowed: tuple[str, ...]) -> list[str]:
    """``on`` (a hook or a list of them) as a list, checked as Ray checks it.

    Raises:
        ValueError: a hook is not in ``allowed`` (the message lists them).
    """
    hooks = [on] if isinstance(on, str) else list(on)
    invalid = [hook for hook in hooks if hook not in allowed]
    if invalid:
        raise ValueError(
            f"invalid Keras hook(s) {invalid}: each must be one of {list(allowed)} (a Callback method less 'on_')"
        )
    return hooks


def ray2_schedule(checkpoint_on: str | list[str], report_metrics_on: str | list[str]) -> dict[str, int]:
    """Ray 2.x's arguments as a :class:`KerasReporter` schedule: each call of a hook of ``report_metrics_on`` reports,
    each call of a hook of ``checkpoint_on`` reports with a checkpoint.

    Raises:
        ValueError: a hook is not one of :data:`HOOKS`.
    """
    schedule = dict.fromkeys(hooks_of(report_metrics_on, HOOKS), 0)
    schedule.update(dict.fromkeys(hooks_of(checkpoint_on, HOOKS), 1))
    return schedule


def ray1_schedule(on: str | list[str], frequency: int | list[int]) -> dict[str, int]:
    """Ray 1.x's ``on`` and ``frequency`` as a :class:`KerasReporter` schedule.

    Raises:
        ValueError: a hook not in :data:`RAY1_HOOKS`, a list of frequencies with ``on`` not a list of as many
            hooks (Ray's check), or a frequency that is not an integer from 0.
    """
    hooks = hooks_of(on, RAY1_HOOKS)
    if isinstance(frequency, list):
        if isinstance(on, str) or len(frequency) != len(hooks):
            raise ValueError(f"frequency {frequency} is a list: on must be a list of as many hooks, not {on!r}")
        frequencies = frequency
    else:
        frequencies = [frequency] * len(hooks)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in frequencies):
        raise ValueError(f"frequency {frequency!r}: checkpoint every n calls of a hook, n an integer from 0 (never)")
    return dict(zip(hooks, frequencies))


class KerasReporter(keras.callbacks.Callback):
    """A Keras callback that reports the ``logs`` of chosen hooks, with the model as a checkpoint on some calls.

    Each call of a scheduled hook is one ``kubetune.report`` (one ``training_iteration``) of the hook's ``logs``
    (Keras's Python floats: ``loss``, the compiled metrics, ``val_*`` at ``epoch_end``), picked and renamed by
    ``metrics``. Only the scheduled hooks' methods are overridden, on the instance: Keras then still dispatches the
    others' batch hooks asynchronously, and calls the overridden ones in ``fit``'s thread, where ``kubetune.report``
    reaches the function's session. A checkpoint is a directory holding the model as ``model.save(filename)``
    writes it (weights, optimizer state, compiled configuration), saved on the gang's rank 0 only.

    Args:
        metrics: a Keras log key (``"val_loss"``) or a list of them, reported under the same names, or
            ``{reported name: Keras log key}``; None (or empty) reports the whole ``logs``.
        schedule: ``{hook: n}``: every ``n``-th call of ``on_<hook>`` (counted per hook from 1) reports with a
            checkpoint, the other calls without; ``n = 0``: never with one.
        filename: the model's file in each checkpoint directory.

    Raises:
        TypeError: ``metrics`` is not None, a str, a list or a dict.
        ValueError: ``filename`` ends neither in ``.keras`` nor in ``.h5``, the two files Keras 3's ``model.save``
            writes.
        KeyError: (in training) a key of ``metrics`` is not among the hook's ``logs``.
    """

    def __init__(
        self, metrics: str | list[str] | dict[str, str] | None, schedule: dict[str, int], filename: str = MODEL_FILENAME
    ):
        super().__init__()
        if metrics is not None and not isinstance(metrics, (str, list, tuple, dict)):
            raise TypeError(f"metrics must be None, a Keras log key, a list or a dict of them, not {metrics!r}")
        if not filename.endswith((".keras", ".h5")):
            raise ValueError(
                f"filename {filename!r}: Keras 3 saves a model to a '.keras' (native) or '.h5' file "
                f"(Ray 1.x's default 'checkpoint' was TensorFlow's SavedModel; kubetune's is {MODEL_FILENAME!r})"
            )
        self._metrics = metrics
        self._schedule = schedule
        self._filename = filename
        self._calls: Counter[str] = Counter()
        for hook in schedule:
            self._override(hook)

    def _override(self, hook: str) -> None:
        """Make ``self.on_<hook>`` report, then run Keras's own method (``on_train_batch_*`` calls its alias
        ``on_batch_*`` there)."""
        keras_method = getattr(keras.callbacks.Callback, f"on_{hook}")
        if "batch" in hook or "epoch" in hook:

            def on_hook(index: int, logs: dict[str, Any] | None = None) -> None:
                self._handle(hook, logs)
                keras_method(self, index, logs=logs)
        else:

            def on_hook(logs: dict[str, Any] | None = None) -> None:
                self._handle(hook, logs)
                keras_method(self, logs=logs)

        setattr(self, f"on_{hook}", on_hook)

    def _handle(self, hook: str, logs: dict[str, Any] | None) -> None:
        self._calls[hook] += 1
        result = select_metrics(self._metrics, logs or {}, f"the logs of Keras's on_{hook}")
        every = self._schedule[hook]
        if every and self._calls[hook] % every == 0:
            report_with_model(result, self._filename, self.model.save)
        else:
            report(result)


class TuneReportCheckpointCallback(KerasReporter):
    """Reports the ``logs`` of the hooks ``on`` (each epoch's end by default) and saves the model as a checkpoint.

    Each call of a hook of ``on`` is one ``kubetune.report``, so one ``training_iteration``; every ``frequency``-th
    call of a hook (counted per hook) carries the model as a checkpoint (Ray 1.x's rule). With Ray 2.7+'s
    ``checkpoint_on`` and ``report_metrics_on`` instead: each call of a hook of either reports, those of
    ``checkpoint_on`` with a checkpoint.

    Args:
        metrics: a Keras log key (``"val_loss"``) or a list of them, reported under the same names, or
            ``{reported name: Keras log key}``; None (default) reports the whole ``logs``.
        filename: the model's file in the checkpoint directory, ``.keras`` or ``.h5`` (default ``model.keras``;
            load it with ``keras.saving.load_model``).
        frequency: checkpoint every this many calls of each hook (default 1: every call), or a list of one
            frequency per hook of ``on``; 0: never.
        on: a Keras hook (``Callback.on_<hook>`` less ``on_``: ``"epoch_end"``, ``"batch_end"``, ``"train_end"``,
            ...; :data:`RAY1_HOOKS`) or a list of them.
        checkpoint_on: (Ray 2.7+, keyword only) the hooks that report with a checkpoint each call (default
            ``"epoch_end"`` when ``report_metrics_on`` is given); :data:`HOOKS`.
        report_metrics_on: (Ray 2.7+, keyword only) the hooks that report (default ``"epoch_end"`` when
            ``checkpoint_on`` is given); :data:`HOOKS`.

    Raises:
        ValueError: a hook that is not Keras's, ``frequency`` a list with ``on`` not a list of as many hooks, a
            negative or non-integer frequency, or a ``filename`` Keras 3 cannot save to.
        TypeError: ``metrics`` of another type, or ``checkpoint_on``/``report_metrics_on`` with ``on`` or
            ``frequency`` other than the defaults.
        KeyError: (in training) a key of ``metrics`` is not among the hook's ``logs``.
    """

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = MODEL_FILENAME,
        frequency: int | list[int] = 1,
        on: str | list[str] = "epoch_end",
        *,
        checkpoint_on: str | list[str] | None = None,
        report_metrics_on: str | list[str] | None = None,
    ):
        if checkpoint_on is None and report_metrics_on is None:
            schedule = ray1_schedule(on, frequency)
        elif on != "epoch_end" or frequency != 1:
            raise TypeError(
                "pass either Ray 1.x's on and frequency or Ray 2.7+'s checkpoint_on and report_metrics_on, not both"
            )
        else:
            schedule = ray2_schedule(
                "epoch_end" if checkpoint_on is None else checkpoint_on,
                "epoch_end" if report_metrics_on is None else report_metrics_on,
            )
        super().__init__(metrics, schedule, filename)


class TuneReportCallback(KerasReporter):
    """Ray 1.x's callback that reports the ``logs`` of the hooks ``on`` and saves nothing; deprecated in Ray 2.x.

    Args:
        metrics: as ``TuneReportCheckpointCallback``'s.
        on: as ``TuneReportCheckpointCallback``'s.

    Raises:
        ValueError: a hook that is not Keras's.
        TypeError: ``metrics`` of another type.
    """

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, on: str | list[str] = "epoch_end"):
        warnings.warn(
            "TuneReportCallback is deprecated (Ray 2.x): use kubetune.integrations.keras.ReportCheckpointCallback"
            "(checkpoint_on=[], report_metrics_on=on, metrics=metrics)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(metrics, dict.fromkeys(hooks_of(on, RAY1_HOOKS), 0))
