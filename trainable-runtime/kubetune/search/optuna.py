"""Ray 2.x's ``ray.tune.search.optuna``: its names from :mod:`kubetune.search`."""

from kubetune.search import OptunaSearch

__all__ = ["OptunaSearch"]
