"""The config every rank of a trial's gang runs with, and the trial's display name: the head's.

A config's ``sample_from`` values and a PBT exploit's user functions (``kubetune.runtime.pbt_explore``) are computed in
the trial pod, and may be random: computed again on each rank they would differ. A trial's first attempt calls the
``trial_name_creator`` (``kubetune.runtime.trial_name``) in the head alone, as Ray calls it once per trial. So the
head (:meth:`kubetune.runtime.loop.TrialRunner.setup`) publishes the config it computed and the display name it got,
with :func:`publish`, to ``.gang_config.pkl`` in the trial's folder (pickled: the values are the user's objects; one
file, overwritten by each attempt), and each worker (:meth:`kubetune.runtime.worker.WorkerRunner.setup`) takes them
with :func:`receive`, waiting for the file of its own attempt. An attempt with neither to compute runs the same config
and name (``env.display_name``, an earlier attempt's) on every rank and publishes nothing.
"""

from __future__ import annotations

import logging
import pickle
import time

from kubetune.env import TrialEnv
from kubetune.shipping import holds_function
from kubetune.storage import Storage, join_uri

log = logging.getLogger(__name__)

#: The file in the trial's folder.
FILE = ".gang_config.pkl"
#: Longest a worker waits for the head's config, seconds (the head computes it before it restores a checkpoint).
WAIT_S = 600.0
_POLL_S = 0.25


def computed_in_pod(env: TrialEnv) -> bool:
    """Whether this attempt's config or display name is computed in the pod: it has ``sample_from`` functions, a PBT
    exploit's user functions or a ``trial_name_creator`` to call. Only then do the ranks need the head's."""
    return bool(env.pbt_explore) or holds_function(env.config) or bool(env.name_creator)


def publish(storage: Storage, env: TrialEnv, config: dict, display_name: str | None = None) -> None:
    """Write the head's ``config`` and ``display_name`` (None: the creator gave none) for this attempt's workers (a
    gang whose config or name is computed in the pod).

    Raises:
        pickle.PicklingError, TypeError, AttributeError: a value cannot be pickled (the attempt fails saying so).
        Exception: what the storage raises.
    """
    if env.world_size > 1 and computed_in_pod(env):
        data = pickle.dumps({"attempt": env.attempt, "config": config, "displayName": display_name})
        storage.put_bytes(join_uri(env.trial_dir_uri, FILE), data)


def receive(storage: Storage, env: TrialEnv, wait_s: float = WAIT_S) -> tuple[dict, str | None]:
    """The config and display name (None: none) the head of this attempt published, waiting for them at most
    ``wait_s`` seconds.

    Raises:
        TimeoutError: the head did not publish it in time (it failed before, or is stuck computing it).
        Exception: what the storage raises, other than the file not existing yet.
    """
    uri, deadline, last_log = join_uri(env.trial_dir_uri, FILE), time.monotonic() + wait_s, time.monotonic()
    while True:
        try:
            published = pickle.loads(storage.get_bytes(uri))
            if published["attempt"] == env.attempt:
                return published["config"], published.get("displayName")
        except FileNotFoundError:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(
                f"the head (rank 0) did not publish attempt {env.attempt}'s config in {wait_s:.0f} s: its "
                "sample_from, PBT explore or trial_name_creator functions failed or did not return"
            )
        if now - last_log >= 30:
            last_log = now
            log.info("waiting for the head's config of attempt %d", env.attempt)
        time.sleep(_POLL_S)
