"""Ray's ``tune.create_scheduler`` and ``tune.create_searcher``: a scheduler or searcher by Ray's name.

Owns the two functions and Ray's name tables (``ray.tune.schedulers.SCHEDULER_IMPORT`` and
``ray.tune.search.SEARCH_ALG_IMPORT``, Ray 2.x). Each name maps to the class of
:mod:`kubetune.sdk.schedulers` or :mod:`kubetune.search`; a class kubetune has not raises that module's
error (why, and what to use instead). Called by users as ``tune.create_scheduler("asha", ...)``.
"""

from __future__ import annotations

from typing import Any

from kubetune import search
from kubetune.sdk import schedulers

__all__ = ["create_scheduler", "create_searcher"]

SCHEDULERS = {
    "fifo": "FIFOScheduler",
    "async_hyperband": "AsyncHyperBandScheduler",
    "asynchyperband": "AsyncHyperBandScheduler",
    "median_stopping_rule": "MedianStoppingRule",
    "medianstopping": "MedianStoppingRule",
    "hyperband": "HyperBandScheduler",
    "hb_bohb": "HyperBandForBOHB",
    "pbt": "PopulationBasedTraining",
    "pbt_replay": "PopulationBasedTrainingReplay",
    "pb2": "PB2",
    "resource_changing": "ResourceChangingScheduler",
}
SEARCHERS = {
    "variant_generator": "BasicVariantGenerator",
    "random": "BasicVariantGenerator",
    "ax": "AxSearch",
    "dragonfly": "DragonflySearch",
    "skopt": "SkOptSearch",
    "hyperopt": "HyperOptSearch",
    "bayesopt": "BayesOptSearch",
    "bohb": "TuneBOHB",
    "nevergrad": "NevergradSearch",
    "optuna": "OptunaSearch",
    "zoopt": "ZOOptSearch",
    "sigopt": "SigOptSearch",
    "hebo": "HEBOSearch",
    "blendsearch": "BlendSearch",
    "cfo": "CFO",
}


def create_scheduler(scheduler: str, **kwargs: Any) -> schedulers.TrialScheduler:
    """The scheduler Ray names ``scheduler`` (ASHA is ``"async_hyperband"``), built with ``kwargs``.

    Raises:
        ValueError: an unknown name (Ray's message, listing the names).
        NotImplementedError: a scheduler kubetune has not (why and what to use).
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"The `scheduler` argument must be one of {list(SCHEDULERS)}. Got: {scheduler}")
    return getattr(schedulers, SCHEDULERS[scheduler])(**kwargs)


def create_searcher(search_alg: str, **kwargs: Any) -> search.Searcher:
    """The searcher Ray names ``search_alg``, built with ``kwargs``.

    Raises:
        ValueError: an unknown name (Ray's message, listing the names).
        NotImplementedError: a searcher kubetune has not (why and what to use).
    """
    if search_alg not in SEARCHERS:
        raise ValueError(f"The `search_alg` argument must be one of {list(SEARCHERS)}. Got: {search_alg}")
    return getattr(search, SEARCHERS[search_alg])(**kwargs)
