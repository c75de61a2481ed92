"""Ray's ``ray.tune.schedulers.hyperband``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
