"""The config every rank of a trial's gang runs with: the head's.

A config's ``sample_from`` values and a PBT exploit's user functions (``kubetune.runtime.pbt_explore``) are computed in
the trial pod, and may be random: computed again on each rank they would differ. So the head
(:meth:`kubetune.runtime.loop.TrialRunner.setup`) publishes the config it computed, with :func:`publish`, to
``.gang_config.pkl`` in the trial's folder (pickled: the values are the user's objects; one file, overwritten by
each attempt), and each worker (:meth:`kubetune.runtime.worker.WorkerRunner.setup`) takes it with :func:`receive`,
waiting for the file of its own attempt. A config with neither is the same on every rank and is not published.
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
    """Whether this attempt's config is computed in the pod: it has ``sample_from`` functions or a PBT exploit's
    user functions to call. Only then do the ranks need the head's."""
    return bool(env.pbt_explore) or holds_function(env.config)


def publish(storage: Storage, env: TrialEnv, config: dict) -> None:
    """Write the head's ``config`` for this attempt's workers (a gang whose config is computed in the pod).

    Raises:
        pickle.PicklingError, TypeError, AttributeError: a value cannot be pickled (the attempt fails saying so).
        Exception: what the storage raises.
    """
    if env.world_size > 1 and computed_in_pod(env):
        data = pickle.dumps({"attempt": env.attempt, "config": config})
        storage.put_bytes(join_uri(env.trial_dir_uri, FILE), data)


def receive(storage: Storage, env: TrialEnv, wait_s: float = WAIT_S) -> dict:
    """The config the head of this attempt published, waiting for it at most ``wait_s`` seconds.

    Raises:
        TimeoutError: the head did not publish it in time (it failed before, or is stuck computing it).
        Exception: what the storage raises, other than the file not existing yet.
    """
    uri, deadline, last_log = join_uri(env.trial_dir_uri, FILE), time.monotonic() + wait_s, time.monotonic()
    while True:
        try:
            published = pickle.loads(storage.get_bytes(uri))
            if published["attempt"] == env.attempt:
                return published["config"]
        except FileNotFoundError:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(
                f"the head (rank 0) did not publish attempt {env.attempt}'s config in {wait_s:.0f} s: its "
                "sample_from or PBT explore functions failed or did not return"
            )
        if now - last_log >= 30:
            last_log = now
            log.info("waiting for the head's config of attempt %d", env.attempt)
        time.sleep(_POLL_S)
