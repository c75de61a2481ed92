"""The operator's in-memory registry: one controller and one wake-up event per
Experiment, plus the settings and the collector's key.

Created once by the startup handler and kept in kopf's ``memo``; the
Experiment daemons, the pod event handler and the collector all reach the
controllers through it.
"""

from __future__ import annotations

import asyncio
from typing import Mapping

from .controller import ExperimentController
from .settings import Settings


class Registry:
    """Controllers by ``(namespace, experiment name)``."""

    def __init__(self, settings: Settings, key: bytes):
        self.settings = settings
        self.key = key
        self._controllers: dict[tuple[str, str], ExperimentController] = {}
        self._wake: dict[tuple[str, str], asyncio.Event] = {}

    def get(self, namespace: str, name: str) -> ExperimentController | None:
        """The loaded controller of the Experiment, or None."""
        return self._controllers.get((namespace, name))

    def load(self, experiment: Mapping) -> ExperimentController:
        """Create the controller of ``experiment``, or give the existing one its new version.

        Raises:
            kubetune_operator.controller.InvalidSpec: the spec cannot be run.
        """
        key = (experiment["metadata"]["namespace"], experiment["metadata"]["name"])
        ctl = self._controllers.get(key)
        if ctl is None:
            ctl = self._controllers[key] = ExperimentController(experiment, self.settings, self.key)
        else:
            ctl.update(experiment)
        return ctl

    def forget(self, namespace: str, name: str) -> None:
        """Drop the Experiment's controller and wake-up event (it was deleted)."""
        self._controllers.pop((namespace, name), None)
        self._wake.pop((namespace, name), None)

    def event(self, namespace: str, name: str) -> asyncio.Event:
        """The Experiment's wake-up event (created on first use); its daemon waits on it between passes."""
        return self._wake.setdefault((namespace, name), asyncio.Event())

    def wake(self, namespace: str, name: str) -> None:
        """Make the Experiment's daemon run its next pass now."""
        self.event(namespace, name).set()
