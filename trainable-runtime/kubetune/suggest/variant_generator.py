"""Ray 1.x's ``ray.tune.suggest.variant_generator``: its names from :mod:`kubetune.search`."""

from kubetune.search import grid_search

__all__ = ["grid_search"]
