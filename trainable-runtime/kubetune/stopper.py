"""Ray's path ``ray.tune.stopper``: ``from kubetune.stopper import TrialPlateauStopper`` (also ``tune.stopper``).

The code lives in :mod:`kubetune.sdk.stopper` (client-side specifications the operator runs); this module
keeps Ray's import path for users' scripts.
"""

from kubetune.sdk.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    Stopper,
    TimeoutStopper,
    TrialPlateauStopper,
)

__all__ = [
    "Stopper",
    "MaximumIterationStopper",
    "TrialPlateauStopper",
    "ExperimentPlateauStopper",
    "CombinedStopper",
    "TimeoutStopper",
    "FunctionStopper",
]
