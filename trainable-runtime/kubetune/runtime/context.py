"""``tune.get_context()``: what a running trial knows about itself (Ray 2.x's ``TuneContext``).

Owns :class:`TuneContext` and :func:`get_context`, called by user code in a trial pod (function or
class trainable). The trial's id and name come from the function session when there is one, else
from the pod's ``KUBETUNE_*`` variables (:mod:`kubetune.env`), which the operator sets; the
resources are the Experiment's ``spec.resourcesPerTrial`` as the pod was given them
(``KUBETUNE_RESOURCES``); the ranks are the pod's place in the trial's gang (``KUBETUNE_RANK``,
``KUBETUNE_WORLD_SIZE``; Ray Train's ``TrainContext`` getters, one process per pod). Outside a trial every
getter returns None, as Ray's do outside a session (the ranks: 0 and 1, a one-pod trial).
"""

from __future__ import annotations

import json
import os

from kubetune.env import EXPERIMENT, HOSTS, RANK, RESOURCES, STORAGE_URI, TRIAL, WORLD_SIZE
from kubetune.runtime import session

__all__ = ["TuneContext", "get_context", "get_trial_resources"]


class TuneContext:
    """The running trial's identity, resources and storage (Ray 2.x's ``ray.tune.TuneContext``)."""

    def get_trial_id(self) -> str | None:
        """The trial's id: its Trial's name (Ray's ``trial_id`` of the results)."""
        return session.get_trial_id() or os.environ.get(TRIAL)

    def get_trial_name(self) -> str | None:
        """The trial's name: its Trial's name."""
        return session.get_trial_name() or os.environ.get(TRIAL)

    def get_trial_dir(self) -> str | None:
        """The trainable's local directory (the function's; the runtime's folder for a class), or None."""
        return session.get_trial_dir()

    def get_experiment_name(self) -> str | None:
        """The Experiment's name."""
        return os.environ.get(EXPERIMENT)

    def get_storage(self) -> str | None:
        """The trial's folder in storage (``<storage.uri>/<namespace>/<experiment>/<uid8>/<trial>``)."""
        return os.environ.get(STORAGE_URI)

    def get_trial_resources(self) -> dict | None:
        """``spec.resourcesPerTrial`` as the pod was given it: ``{"cpu": ..., "gpu": ..., "memory": ...}``
        (Ray returns a ``PlacementGroupFactory``; each trial is one pod of that shape)."""
        text = os.environ.get(RESOURCES)
        return json.loads(text) if text else None

    def get_world_rank(self) -> int:
        """This pod's rank in the trial's gang: 0 for the head (the pod that reports), 1.. for workers."""
        return int(os.environ.get(RANK, "0"))

    def get_world_size(self) -> int:
        """How many pods the trial's gang has (1 + ``resourcesPerTrial.workers.replicas``)."""
        return int(os.environ.get(WORLD_SIZE, "1"))

    def get_local_rank(self) -> int:
        """The process's rank on its pod: always 0 (one process per pod; start more yourself, as ``torchrun``)."""
        return 0

    def get_node_rank(self) -> int:
        """The pod's rank, as ``torchrun``'s ``NODE_RANK`` (each pod is a node of the gang)."""
        return self.get_world_rank()

    def get_hosts(self) -> list[str]:
        """Each rank's DNS name in the gang's headless Service, index = rank; ``[]`` for a one-pod trial."""
        return [h for h in os.environ.get(HOSTS, "").split(",") if h]

    def __repr__(self) -> str:
        return f"TuneContext(trial_id={self.get_trial_id()!r}, experiment={self.get_experiment_name()!r})"


def get_context() -> TuneContext:
    """The running trial's :class:`TuneContext` (Ray 2.x's ``tune.get_context()``)."""
    return TuneContext()


def get_trial_resources() -> dict | None:
    """The running trial's resources (Ray 2.0's ``tune.get_trial_resources()``):
    :meth:`TuneContext.get_trial_resources`."""
    return TuneContext().get_trial_resources()
