"""Search algorithms and trial schedulers by name: the one registry behind ``spec.searchAlgorithm.name``
and ``spec.scheduler.name``.

Owns :data:`SEARCH_ALGORITHMS` and :data:`SCHEDULERS` (keys are exactly the CRD's enum values, values
``"module:Class"``, Ray's ``SEARCH_ALG_IMPORT`` idea), the import of a class only when an Experiment
chooses it (so ``optuna`` loads only for Experiments that use it), and the check of parameters against
the class's signature, so a typo becomes a clear ``ValueError`` (the operator turns it into an
``InvalidSpec`` condition) instead of a ``TypeError``. Called by the controller once per Experiment (then
``set_state`` after a restart) and by ``docker/install.sh``'s check that every entry imports in the
operator image. Pure Python: no kopf, no Kubernetes imports.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from pydantic import ValidationError

from kubetune_operator.params import describe
from kubetune_operator.schedulers.base import TrialScheduler
from kubetune_operator.searchers.base import Searcher

__all__ = [
    "SEARCH_ALGORITHMS",
    "SCHEDULERS",
    "searcher_class",
    "scheduler_class",
    "create_searcher",
    "create_scheduler",
]

#: Search algorithm name → ``"module:Class"``. ``random`` is an alias of ``basic``, as in Ray.
SEARCH_ALGORITHMS: dict[str, str] = {
    "basic": "kubetune_operator.searchers.basic:BasicVariantSearcher",
    "random": "kubetune_operator.searchers.basic:BasicVariantSearcher",
    "optuna": "kubetune_operator.searchers.optuna_search:OptunaSearch",
    "bohb": "kubetune_operator.searchers.bohb:TuneBOHB",
    "katib-hyperband": "kubetune_operator.searchers.katib_hyperband:KatibHyperBand",
    "driver": "kubetune_operator.searchers.driver:DriverSearcher",
}

#: Scheduler name → ``"module:Class"``. Parameters use Ray Tune's snake_case names (``grace_period``,
#: ``reduction_factor``, ``max_t``, ``time_attr``, ...).
SCHEDULERS: dict[str, str] = {
    "fifo": "kubetune_operator.schedulers.fifo:FIFOScheduler",
    "asha": "kubetune_operator.schedulers.asha:AsyncHyperBandScheduler",
    "median_stopping_rule": "kubetune_operator.schedulers.median_stopping:MedianStoppingRule",
    "katib-medianstop": "kubetune_operator.schedulers.katib_medianstop:KatibMedianStop",
    "hyperband": "kubetune_operator.schedulers.hyperband:HyperBandScheduler",
    "hyperband_bohb": "kubetune_operator.schedulers.hyperband_bohb:HyperBandForBOHB",
    "pbt": "kubetune_operator.schedulers.pbt:PopulationBasedTraining",
    "pbt_replay": "kubetune_operator.schedulers.pbt:PopulationBasedTrainingReplay",
    "pb2": "kubetune_operator.schedulers.pb2:PB2",
}


def _class(registry: dict[str, str], kind: str, name: str) -> type:
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}")
    module, _, attr = registry[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def _create(registry: dict[str, str], kind: str, name: str, params: dict[str, Any], **fixed: Any) -> Any:
    """``cls(**fixed, **params)`` for the class registered as ``name``, after checking ``params`` against its
    signature (``fixed``: what the operator always passes, not the user's to set)."""
    cls = _class(registry, kind, name)
    accepted = [p for p in inspect.signature(cls).parameters if p not in fixed]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for {kind} {name!r}; valid: {', '.join(accepted) or 'none'}"
        )
    try:
        return cls(**fixed, **params)
    except ValidationError as exc:  # a parameter of the wrong type or out of range (kubetune_operator.params)
        raise ValueError(f"{kind} {name!r}: {describe(exc)}") from None


def searcher_class(name: str) -> type[Searcher]:
    """Import and return the search algorithm registered as ``name``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the valid names).
    """
    return _class(SEARCH_ALGORITHMS, "search algorithm", name)


def scheduler_class(name: str) -> type[TrialScheduler]:
    """Import and return the scheduler registered as ``name``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the valid names).
    """
    return _class(SCHEDULERS, "scheduler", name)


def create_searcher(
    name: str,
    space: Any,
    metric: str | None = None,
    mode: str | None = None,
    num_samples: int = 1,
    seed: int | None = None,
    **params: Any,
) -> Searcher:
    """Build the search algorithm ``name`` for an Experiment.

    Args:
        name: ``spec.searchAlgorithm.name``.
        space: ``spec.config``.
        metric, mode: the Experiment's ``metric`` and ``mode``.
        num_samples: ``spec.numSamples``.
        seed: ``spec.searchAlgorithm.seed``.
        **params: the algorithm's own parameters (snake_case, as in Ray).

    Raises:
        ValueError: unknown ``name`` or parameter (both listed with the valid ones), or invalid
            arguments (from the algorithm).
    """
    return _create(
        SEARCH_ALGORITHMS,
        "search algorithm",
        name,
        params,
        space=space,
        metric=metric,
        mode=mode,
        num_samples=num_samples,
        seed=seed,
    )


def create_scheduler(name: str, metric: str | None = None, mode: str | None = None, **params: Any) -> TrialScheduler:
    """Build the scheduler ``name`` for an Experiment.

    Args:
        name: ``spec.scheduler.name``.
        metric, mode: the Experiment's ``metric`` and ``mode``.
        **params: the scheduler's parameters (``spec.scheduler`` minus ``name``), Ray's names.

    Raises:
        ValueError: unknown ``name`` or parameter (both listed with the valid ones), or invalid
            values (from the scheduler).
    """
    return _create(SCHEDULERS, "scheduler", name, params, metric=metric, mode=mode)
