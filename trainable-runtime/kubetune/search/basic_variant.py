"""Ray 2.x's ``ray.tune.search.basic_variant``: its names from :mod:`kubetune.search`."""

from kubetune.search import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]
