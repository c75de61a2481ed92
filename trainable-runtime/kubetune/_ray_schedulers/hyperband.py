"""Ray's ``ray.tune.schedulers.hyperband``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
