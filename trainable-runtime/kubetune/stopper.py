"""Ray's path ``ray.tune.stopper``: ``from kubetune.stopper import TrialPlateauStopper`` (also ``tune.stopper``).

The code lives in :mod:`kubetune.sdk.stopper` (client-side specifications the operator runs); this module
keeps Ray's import path for users' scripts.
"""

from kubetune.sdk.stopper import *  # noqa: F403 - the names of its __all__
from kubetune.sdk.stopper import __all__  # noqa: F401
