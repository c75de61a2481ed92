"""Ray's ``ray.tune.schedulers.pb2``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import PB2

__all__ = ["PB2"]
