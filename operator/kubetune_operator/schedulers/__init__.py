"""Trial schedulers by name: the registry behind ``spec.scheduler.name``.

Owns :data:`SCHEDULERS` (keys are exactly the CRD's enum values) and
:func:`create_scheduler`, which the operator calls once per Experiment (then
``set_state`` after a restart). Classes are imported only when chosen.
Parameters use Ray Tune's snake_case names (``grace_period``,
``reduction_factor``, ``max_t``, ``time_attr``, ``brackets``, ...). Pure
Python: no kopf, no Kubernetes imports.
"""

from __future__ import annotations

from typing import Any

from kubetune_operator.schedulers.base import CHECKPOINT, CONTINUE, PAUSE, STOP, TrialScheduler
from kubetune_operator.searchers.registry import create_registered, registered_class

__all__ = ["CHECKPOINT", "CONTINUE", "PAUSE", "STOP", "TrialScheduler", "SCHEDULERS", "scheduler_class",
           "create_scheduler"]

#: Name → ``"module:Class"``.
SCHEDULERS: dict[str, str] = {
    "fifo": "kubetune_operator.schedulers.fifo:FIFOScheduler",
    "asha": "kubetune_operator.schedulers.asha:AsyncHyperBandScheduler",
    "median_stopping_rule": "kubetune_operator.schedulers.median_stopping:MedianStoppingRule",
    "hyperband": "kubetune_operator.schedulers.hyperband:HyperBandScheduler",
    "pbt": "kubetune_operator.schedulers.pbt:PopulationBasedTraining",
    "pbt_replay": "kubetune_operator.schedulers.pbt:PopulationBasedTrainingReplay",
}


def scheduler_class(name: str) -> type[TrialScheduler]:
    """Import and return the class registered as ``name``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the valid names).
    """
    return registered_class(SCHEDULERS, "scheduler", name)


def create_scheduler(name: str, metric: str | None = None, mode: str | None = None, **params: Any) -> TrialScheduler:
    """Build the scheduler ``name`` for an Experiment.

    Args:
        name: ``spec.scheduler.name``.
        metric, mode: the Experiment's ``metric`` and ``mode``.
        **params: the scheduler's parameters (``spec.scheduler`` minus ``name``), Ray's names.

    Raises:
        ValueError: unknown ``name`` or parameter (both listed with the valid ones), or
            invalid values (from the scheduler).
    """
    return create_registered(SCHEDULERS, "scheduler", name, params, metric=metric, mode=mode)
