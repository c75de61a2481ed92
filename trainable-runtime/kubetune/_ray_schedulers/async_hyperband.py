"""Ray's ``ray.tune.schedulers.async_hyperband``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
