"""The ``basic``/``random`` searcher: Ray's basic variant generation, restart-safe.

Owns :class:`BasicVariantSearcher`, a :class:`~kubetune_operator.searchers.base.Searcher`
over :class:`kubetune.search.VariantSpace`. Variant ``i`` depends only on the spec
(``spec.config``, ``numSamples``, the ``points_to_evaluate`` and ``constant_grid_search``
params) and ``(seed, i)``, so the state is two integers and the operator may regenerate
any trial's config with :meth:`BasicVariantSearcher.variant`.
Created through ``kubetune_operator.algorithms.create_searcher``.
"""

from __future__ import annotations

from typing import Any

from kubetune.search import VariantSpace
from kubetune_operator.searchers.base import FINISHED, Searcher

__all__ = ["BasicVariantSearcher"]


class BasicVariantSearcher(Searcher):
    """Ray's ``BasicVariantGenerator``: ``points_to_evaluate`` first, then the grid cross product × the
    remaining samples' random draws, in Ray's order (see ``kubetune.search.variants``).

    Args:
        space: ``spec.config`` (JSON) or an SDK space with domains.
        metric, mode: accepted for a uniform interface; not used.
        num_samples: samples (``numSamples``); each point of ``points_to_evaluate`` is one of them.
        seed: seed of every draw; None picks one (kept in the state).
        points_to_evaluate: configs run first (Ray's); keys they leave out are crossed and drawn.
        constant_grid_search: Ray's: draw the random values once per sample, not per grid point.

    Attributes:
        total: number of variants (each point's, plus the grid size for each remaining sample).
        next_index: index of the next variant :meth:`suggest` returns.

    Raises:
        ValueError: a bad space, ``num_samples``, seed, mode, point or ``constant_grid_search``.
    """

    stateless = True  # the operator asks for variant(i), a function of (space, num_samples, seed, i)

    def __init__(
        self,
        space: Any,
        metric: str | None = None,
        mode: str | None = None,
        num_samples: int = 1,
        seed: int | None = None,
        points_to_evaluate: list[dict] | None = None,
        constant_grid_search: bool = False,
    ):
        super().__init__(metric, mode)
        self._space = space
        self.generator = VariantSpace(space, num_samples, seed, points_to_evaluate, constant_grid_search)
        self.total = self.generator.total
        self.next_index = 0

    def suggest(self, trial_id: str) -> dict | str:
        """The next variant's config, or :data:`FINISHED` after :attr:`total` suggestions (the ``Searcher``
        interface; the operator reads this random-access searcher by :meth:`variant`)."""
        if self.next_index >= self.total:
            return FINISHED
        self.next_index += 1
        return self.generator.variant(self.next_index - 1)[0]

    def variant(self, index: int) -> tuple[dict, str]:
        """``(config, tag)`` of variant ``index``, as first suggested (no state change).

        Raises:
            IndexError: ``index`` outside ``[0, total)``.
        """
        return self.generator.variant(index)

    def get_state(self) -> dict:
        """``{"seed": int, "next_index": int}``."""
        return {"seed": self.generator.seed, "next_index": self.next_index}

    def set_state(self, state: dict) -> None:
        """Resume: same seed (the stored one wins over the constructor's) and position.

        Raises:
            ValueError: ``next_index`` outside ``[0, total]``.
        """
        if state["seed"] != self.generator.seed:
            old = self.generator
            self.generator = VariantSpace(
                self._space, old.num_samples, state["seed"], old.points_to_evaluate, old.constant_grid_search
            )
        if not 0 <= state["next_index"] <= self.total:
            raise ValueError(f"next_index {state['next_index']!r} outside [0, {self.total}]")
        self.next_index = state["next_index"]
