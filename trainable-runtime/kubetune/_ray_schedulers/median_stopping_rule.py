"""Ray's ``ray.tune.schedulers.median_stopping_rule``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
