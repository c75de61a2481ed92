"""Ray 1.x's ``ray.tune.suggest.bohb``: ``TuneBOHB`` from :mod:`kubetune.search.bohb`."""

from kubetune.search.bohb import TuneBOHB

__all__ = ["TuneBOHB"]
