"""Ray 2.x's ``ray.tune.search.searcher``: its names from :mod:`kubetune.search`."""

from kubetune.search import Searcher

__all__ = ["Searcher"]
