"""Ray's ``ray.tune.schedulers.async_hyperband``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
