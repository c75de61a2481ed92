"""Ray's path ``ray.tune.session`` (Ray 1.x): the function API, ``from kubetune.session import report``.

The code lives in :mod:`kubetune.runtime.session` (it runs in the trial pod); this module keeps Ray's import
path for users' scripts. New code calls the same functions on ``kubetune`` (``tune.report``).
"""

from kubetune.runtime.session import (
    checkpoint_dir,
    get_checkpoint,
    get_trial_dir,
    get_trial_id,
    get_trial_name,
    is_session_enabled,
    report,
)

__all__ = [
    "checkpoint_dir",
    "get_checkpoint",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "is_session_enabled",
    "report",
]
