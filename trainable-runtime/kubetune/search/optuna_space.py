"""Ray's ``OptunaSearch.convert_search_space``: a Tune parameter space as Optuna distributions.

Owns :func:`convert_search_space`, reached as ``OptunaSearch.convert_search_space(space)`` (a static
method, as in Ray 2.x) by users who build an Optuna study of their own. The mapping is Ray's
(``ray/tune/search/optuna/optuna_search.py``): Float → ``FloatDistribution`` (log for
``loguniform``, whose quantization is dropped; ``step`` for ``quniform``), Integer →
``IntDistribution`` (upper bound exclusive unless quantized, ``log`` for ``lograndint``), choice →
``CategoricalDistribution``. Optuna is imported when called: the SDK does not need it otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

from kubetune.search.sample import Categorical, Domain, Float, Integer, parse_space
from kubetune.search.variants import find_domains

log = logging.getLogger(__name__)

__all__ = ["convert_search_space"]


def convert_search_space(spec: dict) -> dict[str, Any]:
    """The Optuna distribution of every domain of ``spec``, keyed by its path joined with ``/``.

    Args:
        spec: a parameter space (domain objects, or their JSON form).

    Returns:
        ``{"a/b": optuna.distributions.BaseDistribution, ...}``; constants are left out.

    Raises:
        ValueError: a ``grid_search`` (Ray's message), or a domain Optuna cannot hold (``randn``,
            ``sample_from``).
        ImportError: Optuna is not installed.
    """
    import optuna.distributions as dist

    found = find_domains(parse_space(spec))
    if any(not isinstance(node, Domain) for _, node in found):
        raise ValueError("Grid search parameters cannot be automatically converted to an Optuna search space.")

    def resolve(domain: Domain) -> Any:
        q = getattr(domain, "q", None)
        if isinstance(domain, Float) and domain.log:
            if q:
                log.warning("Optuna does not support both quantization and sampling from LogUniform: dropped it")
            return dist.FloatDistribution(domain.lower, domain.upper, log=True)
        if isinstance(domain, Float):
            return dist.FloatDistribution(domain.lower, domain.upper, step=q)
        if isinstance(domain, Integer):
            upper = domain.upper - 1 if domain.log else domain.upper - int(not q)
            return dist.IntDistribution(domain.lower, upper, step=q or 1, log=domain.log)
        if isinstance(domain, Categorical):
            return dist.CategoricalDistribution(domain.categories)
        raise ValueError(
            f"Optuna search does not support parameters of type `{type(domain).__name__}` (the {domain.name} domain)"
        )

    return {"/".join(str(part) for part in path): resolve(node) for path, node in found}
