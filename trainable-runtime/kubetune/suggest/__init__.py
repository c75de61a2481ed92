"""Ray 1.x's ``ray.tune.suggest`` (renamed ``ray.tune.search`` in Ray 2.0): the same names.

``from kubetune.suggest import ConcurrencyLimiter`` and ``from kubetune.suggest.optuna import
OptunaSearch`` work as in a Ray 1.x script with ``ray.tune`` replaced by ``kubetune``. Every name is
:mod:`kubetune.search`'s, so a searcher kubetune has not raises the same error, saying why and what
to use instead.
"""

from kubetune import search
from kubetune.search import BasicVariantGenerator, ConcurrencyLimiter, OptunaSearch, Searcher, grid_search

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "OptunaSearch", "Searcher", "grid_search"]


def __getattr__(name: str):
    return getattr(search, name)  # Ray's searchers kubetune has not: search's error
