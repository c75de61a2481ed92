"""Ray's ``ray.tune.schedulers.pb2``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import PB2

__all__ = ["PB2"]
