"""Ray 2.x's ``ray.tune.search.concurrency_limiter``: its names from :mod:`kubetune.search`."""

from kubetune.search import ConcurrencyLimiter

__all__ = ["ConcurrencyLimiter"]
