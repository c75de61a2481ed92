"""The ``driver`` searcher: a Searcher of the user's, run in the Experiment's driver pod, as the operator sees it.

Owns :class:`DriverSearcher`, which holds the configs the driver pod's searcher suggested (each journaled as a
``suggested`` entry before the operator acts on it, :class:`kubetune_operator.journal.Suggested`) until the operator
asks for them, and the trial it asked for that has none yet, which the collector tells the driver pod
(``kubetune_operator.driver.driver_events``). The user's searcher runs only in that pod
(``kubetune.runtime.driver``); the operator never calls it. Created through
``kubetune_operator.algorithms.create_searcher`` for ``spec.searchAlgorithm.name: driver``.
"""

from __future__ import annotations

from typing import Any

from kubetune_operator.searchers.base import FINISHED, Searcher

__all__ = ["DriverSearcher"]


class DriverSearcher(Searcher):
    """Suggests what the driver pod's searcher answered for each trial, as Ray's ``SearchGenerator`` wraps a
    ``Searcher``: a config, ``FINISHED`` once the searcher said so, or once ``num_samples`` configs were given.

    Args:
        space, metric, mode, seed: accepted for the registry's uniform interface; the user's searcher has its own.
        num_samples: most configs given (``numSamples``, Ray's ``total_samples``).

    Attributes:
        asked: the trial the operator asked a config for and has none yet (the driver pod is told), or None.
    """

    quiet_wait = True  # a "not now" changes nothing here: the answer comes as a journal entry of its own

    def __init__(
        self,
        space: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        num_samples: int = 1,
        seed: int | None = None,
    ):
        super().__init__(metric, mode)
        self.num_samples = num_samples
        self.answers: dict[str, dict | str] = {}  # trial -> the driver's answer, not asked for yet
        self.given: dict[str, dict] = {}  # trial -> the config handed out for it (asked again if its create failed)
        self.finished = False
        self.asked: str | None = None

    def answer(self, trial: str, suggestion: dict | str) -> bool:
        """Take the driver pod's ``suggestion`` for ``trial`` (a config, or :data:`FINISHED`); False when one was
        taken for it already (a driver pod sends its answers again until it sees them journaled)."""
        if trial in self.answers or trial in self.given:
            return False
        self.answers[trial] = suggestion
        if self.asked == trial:
            self.asked = None
        return True

    def suggest(self, trial_id: str) -> dict | None | str:
        """The driver's answer for ``trial_id``; None until one came (``trial_id`` is then :attr:`asked`);
        :data:`FINISHED` once the searcher answered it or ``num_samples`` configs were given. Asking again for a
        trial given a config (its create failed) gives the same config."""
        if trial_id in self.given:
            return self.given[trial_id]
        if self.finished or len(self.given) >= self.num_samples:
            self.asked = None
            return FINISHED
        suggestion = self.answers.pop(trial_id, None)
        self.asked = trial_id if suggestion is None else None
        if suggestion == FINISHED:
            self.finished = True
        elif suggestion is not None:
            self.given[trial_id] = suggestion
        return suggestion

    def get_state(self) -> dict:
        return {"answers": dict(self.answers), "given": dict(self.given), "finished": self.finished}

    def set_state(self, state: dict) -> None:
        self.answers, self.given = dict(state["answers"]), dict(state["given"])
        self.finished = bool(state["finished"])
