"""Ray's path ``ray.tune.trainable``: ``from kubetune.trainable import Trainable``.

The class API's code lives in :mod:`kubetune.runtime.trainable` (it runs in the trial pod); this module keeps
Ray's import path for users' scripts.
"""

from kubetune.runtime.trainable import Trainable

__all__ = ["Trainable"]
