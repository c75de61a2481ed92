"""Ray's ``TuneBOHB`` as a client-side specification (``from kubetune.search.bohb import TuneBOHB``).

Owns :class:`TuneBOHB`, which serializes to ``spec.searchAlgorithm`` ``bohb``; the operator runs BOHB's model
(``kubetune_operator.searchers.bohb``) with the ``hyperband_bohb`` scheduler
(:class:`kubetune.schedulers.HyperBandForBOHB`). Called by users and by :mod:`kubetune.sdk.tuner`.
"""

from __future__ import annotations

from typing import Any

from kubetune.search.algorithms import Searcher

__all__ = ["TuneBOHB"]


class TuneBOHB(Searcher):
    """BOHB (Falkner et al., ICML 2018) over the run's ``config``, Ray's ``TuneBOHB``; use it with
    ``HyperBandForBOHB``, whose rung results it learns from (the operator refuses another scheduler).

    Args:
        space: must be None: the space is the run's ``config``/``param_space`` (a ``ConfigSpace`` object
            cannot travel to the operator).
        bohb_config: hpbandster's ``BOHB`` arguments: ``min_points_in_model``, ``top_n_percent`` (15),
            ``num_samples`` (64), ``random_fraction`` (1/3). ``bandwidth_factor`` and ``min_bandwidth`` are
            refused by the operator (its densities are Optuna's Parzen estimators).
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        points_to_evaluate: configs to try first.
        seed: the random seed of every draw.
        max_concurrent: most trials at once (``spec.maxConcurrentTrials``), 0 for no limit.

    Raises:
        ValueError: ``space`` given, or ``bohb_config`` not a dict.
    """

    name = "bohb"

    def __init__(
        self,
        space: Any = None,
        bohb_config: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        seed: int | None = None,
        max_concurrent: int = 0,
    ):
        if space is not None:
            raise ValueError("TuneBOHB: pass the space as the run's config (param_space), not as space=")
        if bohb_config is not None and not isinstance(bohb_config, dict):
            raise ValueError(f"TuneBOHB: bohb_config must be a dict, got {type(bohb_config).__name__}")
        super().__init__(metric, mode, bohb_config=bohb_config or None, points_to_evaluate=points_to_evaluate)
        self.seed, self.max_concurrent = seed, max_concurrent
