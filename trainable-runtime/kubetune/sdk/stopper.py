"""Ray Tune's built-in stoppers as client-side specifications (``tune.stopper``).

Owns the stopper classes a ported script passes as ``stop=``: each serializes to one entry of the
Experiment's ``spec.stoppers`` (or, for :class:`TimeoutStopper`, ``spec.timeBudget``), and the
operator runs it on every result, so it continues where it was after an operator restart. Called
by users through Ray's path :mod:`kubetune.stopper` (``from kubetune.stopper import TrialPlateauStopper``)
and by :mod:`kubetune.sdk.tuner`.

A ``Stopper`` subclass of the user's own, or a callable ``stop``, is user code, which the operator
never runs: :func:`kubetune.run` runs it in each trial's pod (:func:`kubetune.shipping.with_stopper`). The
operator's stoppers state the same defaults (``tests/unit/test_ray_defaults.py`` fails when the two differ).
"""

from __future__ import annotations

import datetime

from kubetune.algorithm_spec import AlgorithmSpec

__all__ = [
    "Stopper",
    "MaximumIterationStopper",
    "TrialPlateauStopper",
    "ExperimentPlateauStopper",
    "CombinedStopper",
    "TimeoutStopper",
    "FunctionStopper",
]


class Stopper(AlgorithmSpec):
    """Base of the stopper specifications (Ray's ``tune.Stopper``).

    A subclass of the user's own implements ``__call__(trial_id, result) -> bool`` and runs in each
    trial's pod; ``stop_all`` cannot be overridden (a pod sees one trial).
    """

    def __call__(self, trial_id: str, result: dict) -> bool:
        """Whether the trial should stop at ``result`` (the user's subclass decides)."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(trial_id, result)")

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop; always False here (see the class docstring)."""
        return False


class MaximumIterationStopper(Stopper):
    """Stops a trial after ``max_iter`` results (Ray's ``MaximumIterationStopper``)."""

    name = "maximum_iteration"

    def __init__(self, max_iter: int):
        super().__init__(max_iter=max_iter)


class TrialPlateauStopper(Stopper):
    """Stops a trial whose metric plateaued (Ray's ``TrialPlateauStopper``, same arguments).

    Args:
        metric: result key watched.
        std: a trial stops when the standard deviation of its last ``num_results`` values is below this.
        num_results: values in the window.
        grace_period: results before the rule applies.
        metric_threshold: also require the latest value to be at least this good.
        mode: ``"min"`` or ``"max"``, needed with ``metric_threshold``.
    """

    name = "trial_plateau"

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ):
        super().__init__(std=std, num_results=num_results, grace_period=grace_period, metric_threshold=metric_threshold)
        self.metric, self.mode = metric, mode

    def to_spec(self) -> dict:
        """Return ``{"name": "trial_plateau", "params": {...}}`` with ``metric`` and ``mode`` in the params."""
        spec = super().to_spec()
        spec["params"].update({k: v for k, v in (("metric", self.metric), ("mode", self.mode)) if v is not None})
        return spec


class ExperimentPlateauStopper(TrialPlateauStopper):
    """Stops the whole experiment once its top results plateaued (Ray's ``ExperimentPlateauStopper``).

    Args:
        metric: result key watched.
        std: the experiment stops when the standard deviation of the ``top`` values is below this.
        top: how many best values are compared.
        mode: ``"min"`` or ``"max"``.
        patience: plateaued results tolerated before stopping.
    """

    name = "experiment_plateau"

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0):
        AlgorithmSpec.__init__(self, std=std, top=top, patience=patience)
        self.metric, self.mode = metric, mode


class CombinedStopper(Stopper):
    """Stops when any of its stoppers does (Ray's ``CombinedStopper``).

    Attributes:
        stoppers: the stoppers combined.
    """

    def __init__(self, *stoppers: Stopper):
        super().__init__()
        self.stoppers = stoppers


class TimeoutStopper(Stopper):
    """Stops the experiment after ``timeout`` (Ray's ``TimeoutStopper``): ``spec.timeBudget``.

    Args:
        timeout: seconds (int or float) or a ``datetime.timedelta``.

    Raises:
        ValueError: a timeout that is not positive.
    """

    def __init__(self, timeout: float | datetime.timedelta):
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"TimeoutStopper: timeout must be a positive number of seconds, got {timeout!r}")
        super().__init__()
        self.timeout_s = float(seconds)


class FunctionStopper(Stopper):
    """Wraps a ``stop(trial_id, result) -> bool`` function (Ray's ``FunctionStopper``); runs in the trial pods."""

    def __init__(self, function):
        super().__init__()
        self._function = function

    def __call__(self, trial_id: str, result: dict) -> bool:
        return bool(self._function(trial_id, result))
