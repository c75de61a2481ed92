"""Ray's ``ray.tune.schedulers.hb_bohb``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
