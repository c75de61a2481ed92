"""Ray 1.x's ``ray.tune.suggest.optuna``: its names from :mod:`kubetune.search`."""

from kubetune.search import OptunaSearch

__all__ = ["OptunaSearch"]
