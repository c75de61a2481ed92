"""Ray's path ``ray.tune.analysis``: ``from kubetune.analysis import ExperimentAnalysis`` (also ``tune.analysis``).

The code lives in :mod:`kubetune.sdk.analysis` (it runs on the user's machine); this module keeps Ray's
import path, with Ray 2.x's ``ResultGrid`` and ``Result`` beside ``ExperimentAnalysis``.
"""

from kubetune.sdk.analysis import ExperimentAnalysis, Result, ResultGrid

__all__ = ["ExperimentAnalysis", "Result", "ResultGrid"]
