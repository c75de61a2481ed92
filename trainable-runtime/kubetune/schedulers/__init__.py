"""Ray's path ``ray.tune.schedulers``: ``from kubetune.schedulers import ASHAScheduler`` (also ``tune.schedulers``).

The scheduler classes live in :mod:`kubetune.sdk.schedulers` (client-side specifications the operator runs);
this package keeps Ray's import paths: its names here, and Ray's submodules beside this file
(``from kubetune.schedulers.pb2 import PB2``; Ray 1.x and 2.x: ``ray.tune.schedulers.<module>``), each
re-exporting the names of Ray's module of that name. A scheduler kubetune has not raises the error of
:mod:`kubetune.sdk.schedulers` (why, and what to use instead).
"""

from kubetune.algorithm_spec import unsupported_names
from kubetune.sdk.schedulers import *  # noqa: F403 - the names of its __all__
from kubetune.sdk.schedulers import UNSUPPORTED, __all__  # noqa: F401

__getattr__ = unsupported_names(__name__, UNSUPPORTED)
