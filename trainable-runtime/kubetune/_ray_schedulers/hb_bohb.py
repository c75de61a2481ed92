"""Ray's ``ray.tune.schedulers.hb_bohb``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
