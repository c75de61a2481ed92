"""kubetune: Ray-Tune-compatible trainables, run one pod per trial by the kubetune operator.

The public surface users import (``import kubetune as tune`` works for most Ray Tune code):
the class API :class:`Trainable`, the function API (:func:`report`, :func:`get_checkpoint`,
:class:`Checkpoint`, :func:`checkpoint_dir`, ``kubetune.track.log``) and, below, the search
space helpers. The in-pod runtime lives in ``kubetune.runtime``; object storage in
``kubetune.storage``.
"""

from kubetune import track
from kubetune.checkpoint import Checkpoint
from kubetune.function_trainable import as_trainable_class, wrap_function
from kubetune.session import checkpoint_dir, get_checkpoint, get_trial_dir, get_trial_id, get_trial_name, report
from kubetune.trainable import Trainable

__all__ = [
    "Checkpoint", "Trainable", "as_trainable_class", "checkpoint_dir", "get_checkpoint", "get_trial_dir",
    "get_trial_id", "get_trial_name", "report", "track", "wrap_function",
]

# Search space helpers: `from kubetune.search import uniform, ...` and `__all__ += [...]` go below. ----
