"""Ray's path ``ray.tune.tuner``: ``from kubetune.tuner import Tuner`` (also ``tune.tuner``).

The code lives in :mod:`kubetune.sdk.tuner` (it runs on the user's machine); this module keeps Ray's import
path, with the names a script uses beside ``Tuner`` (``kubetune.tuner.Detached``: ``docs/sdk.md``).
"""

from kubetune.sdk.tuner import (
    CheckpointConfig,
    Detached,
    FailureConfig,
    RunConfig,
    TuneConfig,
    TuneError,
    Tuner,
    run,
    run_experiments,
)

__all__ = [
    "CheckpointConfig",
    "Detached",
    "FailureConfig",
    "RunConfig",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "run",
    "run_experiments",
]
