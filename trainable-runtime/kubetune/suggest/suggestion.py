"""Ray 1.x's ``ray.tune.suggest.suggestion``: its names from :mod:`kubetune.search`."""

from kubetune.search import ConcurrencyLimiter, Searcher

__all__ = ["ConcurrencyLimiter", "Searcher"]
