"""Ray's path ``ray.tune.logger``: Ray 0.8–1.x's result loggers (:class:`Logger`, :class:`JsonLogger`,
:class:`CSVLogger`, :class:`TBXLogger`, :class:`UnifiedLogger`, :class:`NoopLogger`, :data:`DEFAULT_LOGGERS`) and
Ray 2.x's logger callbacks (:class:`LoggerCallback`, :class:`JsonLoggerCallback`, :class:`CSVLoggerCallback`,
:class:`TBXLoggerCallback`), with Ray's names and signatures.

What Ray's built-in loggers write, kubetune's trial pods write for every trial unasked, next to its checkpoints in
the experiment's storage: ``result.json`` (the JSON logger's file), ``progress.csv`` (the CSV logger's) and
TensorBoard events (the TBX logger's, when ``tensorboardX`` is in the trial image). So ``tune.run`` and ``Tuner``
accept them (:data:`WRITTEN_BY_THE_PODS`: ``loggers=DEFAULT_LOGGERS``, ``callbacks=[JsonLoggerCallback()]``) as
what happens anyway; their methods are not called. A logger callback of your own (a subclass of
:class:`LoggerCallback`) is user code that Ray runs in its driver: it runs in the Experiment's driver pod, as every
:class:`kubetune.callback.Callback` does (:mod:`kubetune.runtime.driver`). A ``Logger`` class of your own (Ray 0.8's
``loggers=``) runs where Ray runs it, beside each trial in its own process: in the trial pod, handed every result
(:func:`kubetune.shipping.with_loggers`).
"""

from __future__ import annotations

from typing import Any

from kubetune.callback import Callback

__all__ = [
    "CSVLogger",
    "CSVLoggerCallback",
    "DEFAULT_LOGGERS",
    "JsonLogger",
    "JsonLoggerCallback",
    "Logger",
    "LoggerCallback",
    "NoopLogger",
    "TBXLogger",
    "TBXLoggerCallback",
    "UnifiedLogger",
    "WRITTEN_BY_THE_PODS",
]


class Logger:
    """Ray's base class of a trial's result logger (Ray 0.8–1.x): one per trial, handed each result.

    Args:
        config: the trial's config.
        logdir: the trial's directory.
        trial: the trial (Ray's ``Trial``), when the driver made the logger.
    """

    def __init__(self, config: dict, logdir: str, trial: Any = None):
        self.config, self.logdir, self.trial = config, logdir, trial
        self._init()

    def _init(self) -> None:
        """Set up, once the attributes are there (Ray's hook for subclasses); nothing by default."""

    def on_result(self, result: dict) -> None:
        """Log one result.

        Raises:
            NotImplementedError: a subclass must log it.
        """
        raise NotImplementedError(f"{type(self).__name__} must override on_result()")

    def update_config(self, config: dict) -> None:
        """The trial's config changed (a PBT exploit): log from now on with ``config``."""
        self.config = config

    def close(self) -> None:
        """Release what the logger holds; nothing by default."""

    def flush(self) -> None:
        """Write out what the logger buffers; nothing by default."""


class NoopLogger(Logger):
    """Ray's logger that logs nothing."""

    def on_result(self, result: dict) -> None:
        """Log nothing."""


class _PodFile(Logger):
    """A built-in logger whose file the trial pod writes itself (its name: :attr:`FILE`); accepted by ``tune.run``
    for Ray's sake, never called."""

    FILE = ""

    def on_result(self, result: dict) -> None:
        """Refuse: kubetune's trial pods write this logger's file themselves.

        Raises:
            NotImplementedError: always, naming the file.
        """
        raise NotImplementedError(
            f"{type(self).__name__} is not run by kubetune: each trial pod writes {self.FILE} itself, next to "
            "its checkpoints in the experiment's storage; pass the class to tune.run(loggers=...) or leave it out"
        )


class JsonLogger(_PodFile):
    """Ray's JSON logger: ``result.json``, one JSON object per result (the trial pod writes it)."""

    FILE = "result.json"


class CSVLogger(_PodFile):
    """Ray's CSV logger: ``progress.csv``, one row per result (the trial pod writes it)."""

    FILE = "progress.csv"


class TBXLogger(_PodFile):
    """Ray's TensorBoard logger: an event file of the numeric results (the trial pod writes it, with
    ``tensorboardX`` in its image)."""

    FILE = "the TensorBoard event file"


#: Ray 0.8's default loggers, which kubetune's trial pods stand in for.
DEFAULT_LOGGERS = (JsonLogger, CSVLogger, TBXLogger)


class UnifiedLogger(Logger):
    """Ray's logger that hands each call to several loggers, one of each class of ``loggers``.

    Args:
        config, logdir, trial: as :class:`Logger`.
        loggers: the logger classes (default :data:`DEFAULT_LOGGERS`).
    """

    def __init__(self, config: dict, logdir: str, trial: Any = None, loggers: Any = None):
        self._logger_classes = tuple(DEFAULT_LOGGERS if loggers is None else loggers)
        super().__init__(config, logdir, trial)

    def _init(self) -> None:
        """Make one logger of each class."""
        self._loggers = [cls(self.config, self.logdir, self.trial) for cls in self._logger_classes]

    def on_result(self, result: dict) -> None:
        """Hand ``result`` to each logger."""
        for logger in self._loggers:
            logger.on_result(result)

    def update_config(self, config: dict) -> None:
        """Hand the new config to each logger."""
        self.config = config
        for logger in self._loggers:
            logger.update_config(config)

    def close(self) -> None:
        """Close each logger."""
        for logger in self._loggers:
            logger.close()

    def flush(self) -> None:
        """Flush each logger."""
        for logger in self._loggers:
            logger.flush()


class LoggerCallback(Callback):
    """Ray 2.x's base class of a logger callback, which Ray's driver calls for every trial: ``log_trial_start``,
    ``log_trial_result``, ``log_trial_save``, ``log_trial_restore``, ``log_trial_end``. Subclass it as in Ray: a
    subclass of your own runs in the Experiment's driver pod, its hooks called from the :class:`Callback` hooks as
    Ray's ``LoggerCallback`` calls them (``on_trial_error`` is ``log_trial_end(trial, failed=True)``)."""

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration: int, trials: list, trial: Any, **info) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info) -> None:
        self.log_trial_save(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
        self.log_trial_end(trial, failed=True)

    def log_trial_start(self, trial: Any) -> None:
        """A trial started; nothing by default."""

    def log_trial_restore(self, trial: Any) -> None:
        """A trial was restored from a checkpoint; nothing by default."""

    def log_trial_save(self, trial: Any) -> None:
        """A trial saved a checkpoint; nothing by default."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        """A trial reported ``result`` (``iteration``: the driver's count of results); nothing by default."""

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """A trial ended (``failed``: with an error); nothing by default."""


class JsonLoggerCallback(LoggerCallback):
    """Ray 2.x's callback that writes each trial's ``result.json``: kubetune's trial pods write it themselves."""


class CSVLoggerCallback(LoggerCallback):
    """Ray 2.x's callback that writes each trial's ``progress.csv``: kubetune's trial pods write it themselves."""


class TBXLoggerCallback(LoggerCallback):
    """Ray 2.x's callback that writes each trial's TensorBoard events: kubetune's trial pods write them themselves
    (with ``tensorboardX`` in the image)."""


#: The classes whose files kubetune's trial pods write unasked: ``tune.run``/``Tuner`` accept these exact classes
#: (not subclasses, which are user code) in ``loggers`` and ``callbacks``.
WRITTEN_BY_THE_PODS = frozenset(
    {JsonLogger, CSVLogger, TBXLogger, JsonLoggerCallback, CSVLoggerCallback, TBXLoggerCallback}
)
