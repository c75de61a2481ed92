"""A trial's display name, made in its pod by the user's ``trial_name_creator`` (Ray's ``Trial.custom_trial_name``).

Owns :class:`TrialInfo`, what the creator is called with, and :func:`create_display_name`, which loads the
creator the SDK pickled (:meth:`kubetune.shipping.FunctionPickles.pickle`), calls it and checks what it returned.
Called by :class:`kubetune.runtime.loop.TrialRunner` when an attempt starts with ``KUBETUNE_TRIAL_NAME_CREATOR``
(the operator sets it while the Trial has no display name); the runner reports the name with the attempt's first
batch and the operator keeps it as the Trial's ``status.displayName``, so later attempts call nothing.

Ray calls the creator in its driver as it creates a trial, with the ``Trial`` whose ``str()`` it then becomes;
the operator never runs user code, so the trial's first pod calls it, after the config's ``sample_from``
values are drawn (Ray's trial is created with its config resolved). A creator that raises, or returns a value
that is not a string, fails the attempt (Ray's run raises in the driver); None or ``""`` leaves the trial
without a display name (Ray's ``str(trial)`` then falls back to its default).
"""

from __future__ import annotations

from typing import Any

from kubetune.limits import display_name_problem
from kubetune.shipping import loads
from kubetune.storage import Storage

#: What :class:`TrialInfo` offers a creator, as Ray's ``Trial`` has it when Ray calls the creator.
ATTRIBUTES = ("trainable_name", "trial_id", "config", "experiment_tag", "status", "path")


class TrialInfo:
    """The trial a ``trial_name_creator`` is called with: the attributes of Ray's ``Trial`` that are set when Ray
    calls it, as the trial's pod knows them.

    Attributes:
        trainable_name: the trainable's name (the class's, or the function's it wraps).
        trial_id: the Trial's object name (``<experiment>-<index:05d>``), kubetune's trial id everywhere.
        config: the trial's config, ``sample_from`` values drawn.
        experiment_tag: the Trial's ``spec.tag`` (``"<index>_<key>=<value>,..."``), or ``""``.
        status: ``"PENDING"``, as Ray's trial is when it is created.
        path: URI of the trial's folder in the experiment's storage.
    """

    __slots__ = ATTRIBUTES

    def __init__(self, trainable_name: str, trial_id: str, config: dict, experiment_tag: str, path: str):
        self.trainable_name, self.trial_id, self.config = trainable_name, trial_id, config
        self.experiment_tag, self.status, self.path = experiment_tag, "PENDING", path

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"the trial a trial_name_creator gets in kubetune has {', '.join(ATTRIBUTES)}, not {name!r}"
        )

    def __str__(self) -> str:
        """Ray's name of a trial without a custom name: ``<trainable>[_<config env>]_<trial id>``, ``/`` as ``_``."""
        env = self.config.get("env")
        env = getattr(env, "__name__", env)
        identifier = f"{self.trainable_name}_{env}" if env is not None else self.trainable_name
        return f"{identifier}_{self.trial_id}".replace("/", "_")

    __repr__ = __str__


def create_display_name(uri: str, storage: Storage, trial: TrialInfo) -> str | None:
    """Call the ``trial_name_creator`` pickled at ``uri`` with ``trial``; return the display name it gave.

    Returns:
        The name, or None when the creator returned None or ``""``.

    Raises:
        FileNotFoundError: the creator's pickle is missing from ``storage``.
        RuntimeError: it was pickled by another Python minor version.
        ValueError: the creator raised (chained), or returned a string that is not a display name
            (:func:`kubetune.limits.display_name_problem`: empty lines, control characters, too long).
        TypeError: it returned something other than a string or None.
    """
    creator = loads(storage.get_bytes(uri))
    label = getattr(creator, "__qualname__", type(creator).__name__)
    try:
        name = creator(trial)
    except Exception as exc:
        raise ValueError(f"trial_name_creator {label} raised {type(exc).__name__}: {exc}") from exc
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise TypeError(f"trial_name_creator {label} must return a string, got {type(name).__name__}")
    name = str(name)  # a subclass of str, as the plain string it reports
    problem = display_name_problem(name)
    if problem is not None:
        raise ValueError(f"trial_name_creator {label} returned a name kubetune cannot show: {problem}")
    return name
