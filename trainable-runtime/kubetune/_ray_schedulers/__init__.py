"""Ray's scheduler modules under ``kubetune.schedulers`` (``from kubetune.schedulers.pb2 import PB2``).

``kubetune.schedulers`` is one module; its ``__path__`` names this folder, so Python finds
``kubetune.schedulers.<module>`` here. Each module re-exports, from :mod:`kubetune.schedulers`, the
names of Ray's module of that name (Ray 1.x and 2.x: ``ray.tune.schedulers.<module>``).
"""
