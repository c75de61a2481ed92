"""Ray 1.x's ``ray.tune.suggest.basic_variant``: its names from :mod:`kubetune.search`."""

from kubetune.search import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]
