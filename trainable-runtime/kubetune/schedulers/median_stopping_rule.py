"""Ray's ``ray.tune.schedulers.median_stopping_rule``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
