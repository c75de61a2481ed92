"""The operator's in-memory registry: one controller and one wake-up event per
Experiment, the settings, the collector's key, and how journals are written.

Created once by the startup handler and kept in kopf's ``memo``; the
Experiment daemons, the pod event handler and the collector all reach the
controllers through it, and commit an Experiment's journal with
:meth:`Registry.commit` before a decision leaves the operator.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Mapping

from . import journal
from .controller import ExperimentController
from .labels import label_value
from .settings import Settings
from .spec_intake import InvalidSpec

#: Carries out a journal :class:`~kubetune_operator.journal.Write` in a namespace (raises on failure).
JournalWriter = Callable[[str, journal.Write], Awaitable[None]]


class Registry:
    """Controllers by ``(namespace, experiment name)``.

    Args:
        settings: the operator's settings.
        key: the collector's HMAC key.
        write_journal: carries out journal writes (:meth:`kubetune_operator.kube.Kube.write_journal`).
    """

    def __init__(self, settings: Settings, key: bytes, write_journal: JournalWriter):
        self.settings = settings
        self.key = key
        self.write_journal = write_journal
        self._controllers: dict[tuple[str, str], ExperimentController] = {}
        self._wake: dict[tuple[str, str], asyncio.Event] = {}
        self._slot_freed: dict[tuple[str, str], asyncio.Event] = {}

    def get(self, namespace: str, name: str) -> ExperimentController | None:
        """The loaded controller of the Experiment, or None."""
        return self._controllers.get((namespace, name))

    def load(self, experiment: Mapping) -> ExperimentController:
        """Create the controller of ``experiment``, or give the existing one its new version.

        Raises:
            kubetune_operator.spec_intake.InvalidSpec: the spec cannot be run.
        """
        key = (experiment["metadata"]["namespace"], experiment["metadata"]["name"])
        ctl = self._controllers.get(key)
        if ctl is not None and ctl.experiment["metadata"].get("uid") != experiment["metadata"].get("uid"):
            ctl = None  # deleted and created again: a new Experiment
        if ctl is None:
            ctl = self._controllers[key] = ExperimentController(experiment, self.settings, self.key)
            return ctl
        try:
            ctl.update(experiment)
        except InvalidSpec as exc:
            # the previous spec stays in force; Ready stays False until fixed
            ctl.spec_refused(str(exc), experiment["metadata"].get("generation"))
            raise
        ctl.spec_accepted()
        return ctl

    async def commit(self, ctl: ExperimentController) -> None:
        """Commit ``ctl``'s journal (see :func:`kubetune_operator.journal.commit`).

        Raises:
            Exception: the write failed; the entries stay pending.
        """
        await journal.commit(ctl.journal, lambda write: self.write_journal(ctl.namespace, write), ctl.snapshot)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the Experiment's controller and wake-up event (it was deleted, or it finished)."""
        self._controllers.pop((namespace, name), None)
        self._wake.pop((namespace, label_value(name)), None)
        self._slot_freed.pop((namespace, label_value(name)), None)

    def event(self, namespace: str, name: str) -> asyncio.Event:
        """The Experiment's wake-up event (created on first use); its daemon waits on it between passes.

        ``name`` may be the Experiment's name or its label value (pods carry the latter).
        """
        return self._wake.setdefault((namespace, label_value(name)), asyncio.Event())

    def slot_freed(self, namespace: str, name: str) -> asyncio.Event:
        """The Experiment's event for a trial pod that ended or went (created on first use; ``name`` as for
        :meth:`event`): a slot may be free, so its daemon runs the next pass without the usual spacing."""
        return self._slot_freed.setdefault((namespace, label_value(name)), asyncio.Event())

    def wake(self, namespace: str, name: str, slot_freed: bool = False) -> None:
        """Make the Experiment's daemon run its next pass now (``name`` as for :meth:`event`).

        Args:
            slot_freed: a trial pod ended or went (see :meth:`slot_freed`).
        """
        self.event(namespace, name).set()
        if slot_freed:
            self.slot_freed(namespace, name).set()
