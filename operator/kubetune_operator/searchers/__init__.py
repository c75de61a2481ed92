"""Search algorithms by name: the registry behind ``spec.searchAlgorithm.name``.

Owns :data:`SEARCH_ALGORITHMS` (keys are exactly the CRD's enum values) and
:func:`create_searcher`, which the operator's reconcile loop calls once per
Experiment (then ``set_state`` after a restart). Classes are imported only
when chosen (like Ray's ``SEARCH_ALG_IMPORT``), so ``optuna`` loads only for
Experiments that use it. Pure Python: no kopf, no Kubernetes imports.
"""

from __future__ import annotations

from typing import Any

from kubetune_operator.searchers.base import FINISHED, Searcher
from kubetune_operator.searchers.registry import create_registered, registered_class

__all__ = ["FINISHED", "Searcher", "SEARCH_ALGORITHMS", "searcher_class", "create_searcher"]

#: Name → ``"module:Class"``. ``random`` is an alias of ``basic``, as in Ray.
SEARCH_ALGORITHMS: dict[str, str] = {
    "basic": "kubetune_operator.searchers.basic:BasicVariantSearcher",
    "random": "kubetune_operator.searchers.basic:BasicVariantSearcher",
    "optuna": "kubetune_operator.searchers.optuna_search:OptunaSearch",
}


def searcher_class(name: str) -> type[Searcher]:
    """Import and return the class registered as ``name``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the valid names).
    """
    return registered_class(SEARCH_ALGORITHMS, "search algorithm", name)


def create_searcher(name: str, space: Any, metric: str | None = None, mode: str | None = None,
                    num_samples: int = 1, seed: int | None = None, **params: Any) -> Searcher:
    """Build the searcher ``name`` for an Experiment.

    Args:
        name: ``spec.searchAlgorithm.name``.
        space: ``spec.config``.
        metric, mode: the Experiment's ``metric`` and ``mode``.
        num_samples: ``spec.numSamples``.
        seed: ``spec.searchAlgorithm.seed``.
        **params: the algorithm's own parameters (snake_case, as in Ray).

    Raises:
        ValueError: unknown ``name`` or parameter (both listed with the valid ones),
            or invalid arguments (from the algorithm).
    """
    return create_registered(SEARCH_ALGORITHMS, "search algorithm", name, params, space=space, metric=metric,
                             mode=mode, num_samples=num_samples, seed=seed)
