"""Ray Tune's search algorithms as client-side specifications (``tune.search.*``).

Owns the searcher classes a ported script builds, with Ray 2.x's names and arguments; each
serializes to the Experiment's ``spec.searchAlgorithm`` (:mod:`kubetune.algorithm_spec`), and the operator
runs the algorithm over ``spec.config``. Called by users (``from kubetune.search import
OptunaSearch``) and by :mod:`kubetune.sdk.tuner`.
"""

from __future__ import annotations

from typing import Any

from kubetune.algorithm_spec import AlgorithmSpec
from kubetune.resultkeys import is_multi_objective, objectives
from kubetune.search.optuna_space import convert_search_space
from kubetune.search.sample import space_spec
from kubetune.search.variants import find_domains

__all__ = ["FINISHED", "Searcher", "BasicVariantGenerator", "OptunaSearch", "ConcurrencyLimiter"]

#: What :meth:`Searcher.suggest` returns once it will suggest no more (Ray's ``Searcher.FINISHED``).
FINISHED = "FINISHED"


class Searcher(AlgorithmSpec):
    """Base of the searcher specifications, and Ray's ``Searcher`` for a searcher of the user's.

    kubetune's own searchers (:class:`OptunaSearch`, ...) run in the operator. A subclass of the user's, with
    Ray's methods (``suggest``, ``on_trial_result``, ``on_trial_complete``, ``set_search_properties``, ...),
    runs in the Experiment's driver pod, as Ray runs it in its driver: the SDK calls its
    ``set_search_properties(metric, mode, config)`` and ships it there (docs/sdk.md, "A searcher of your own").
    ``metric`` and ``mode`` are Ray's properties (``self._metric``, ``self._mode``).

    Attributes:
        seed: the searcher's random seed, or None (the operator derives one from the
            Experiment's uid, so a restart continues the same search).
        max_concurrent: most trials at once (Ray's ``max_concurrent``), 0 for no limit.
    """

    FINISHED = FINISHED
    CKPT_FILE_TMPL = "searcher-state-{}.pkl"
    seed: int | None = None
    max_concurrent = 0
    _metric: str | None = None
    _mode: str | None = None

    @property
    def metric(self) -> str | None:
        """The result key the searcher optimizes (Ray's ``Searcher.metric``)."""
        return self._metric

    @metric.setter
    def metric(self, value: str | None) -> None:
        self._metric = value

    @property
    def mode(self) -> str | None:
        """``"min"`` or ``"max"`` (Ray's ``Searcher.mode``)."""
        return self._mode

    @mode.setter
    def mode(self, value: str | None) -> None:
        self._mode = value

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec) -> bool:
        """Ray's: take the run's metric, mode and config; True if taken (default: False, the searcher keeps its own).
        Called on a searcher of the user's by the SDK before it ships it."""
        return False

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Ray's: True when the searcher limits its trials in flight itself (default: False)."""
        return False

    def suggest(self, trial_id: str) -> dict | str | None:
        """Ray's: the config of the new trial ``trial_id``, None for "not now", or :data:`FINISHED`.

        Raises:
            NotImplementedError: a searcher of the user's must define it.
        """
        raise NotImplementedError(f"{type(self).__name__} has no suggest()")

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Ray's: an intermediate result of ``trial_id`` (flattened: ``config/x`` keys; default: ignored)."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Ray's: ``trial_id`` ended with its last ``result`` (flattened), or ``error``.

        Raises:
            NotImplementedError: a searcher of the user's must define it, as Ray's must.
        """
        raise NotImplementedError(f"{type(self).__name__} has no on_trial_complete()")

    def to_spec(self) -> dict:
        """Return ``spec.searchAlgorithm``: ``{"name": ..., "params": {...}}`` plus ``seed`` when set."""
        spec = super().to_spec()
        if self.seed is not None:
            spec["seed"] = self.seed
        return spec


class BasicVariantGenerator(Searcher):
    """Ray's ``BasicVariantGenerator``: ``points_to_evaluate`` first, then the grid cross product × the
    remaining samples' random draws.

    Args:
        points_to_evaluate: configs to run first. As in Ray, each point takes the place of one of
            ``num_samples``, its values are set into the space, and the keys it leaves out are still
            crossed (``grid_search``) and drawn, so a point may give several trials. Values are sent as
            JSON (tuples become lists, NumPy scalars numbers).
        max_concurrent: most trials at once, 0 for no limit.
        constant_grid_search: draw the random values once per sample and keep them across the grid
            points (Ray's meaning); False draws afresh for every grid point.
        random_state: an ``int`` seed (Ray also takes a NumPy generator, which cannot travel).

    Raises:
        ValueError: a point that is not a dict of JSON values, a ``constant_grid_search`` that is not a
            bool, or a ``random_state`` that is not an int.
    """

    name = "basic"

    def __init__(
        self,
        points_to_evaluate: list[dict] | None = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state: int | None = None,
    ):
        points = []
        for i, point in enumerate(points_to_evaluate or []):
            if not isinstance(point, dict) or find_domains(point):
                raise ValueError(
                    f"BasicVariantGenerator: points_to_evaluate[{i}] must be a dict of values "
                    f"(no domains), got {point!r}"
                )
            points.append(space_spec(point, f"points_to_evaluate[{i}]", values=True))
        if not isinstance(constant_grid_search, bool):
            raise ValueError(
                f"BasicVariantGenerator: constant_grid_search must be a bool, got {constant_grid_search!r}"
            )
        if random_state is not None and (isinstance(random_state, bool) or not isinstance(random_state, int)):
            raise ValueError(f"BasicVariantGenerator: random_state must be an int seed, got {type(random_state)}")
        super().__init__(points_to_evaluate=points or None, constant_grid_search=constant_grid_search or None)
        self.seed, self.max_concurrent = random_state, max_concurrent


class OptunaSearch(Searcher):
    """Optuna's samplers over ``spec.config`` (Ray's ``OptunaSearch``), run by the operator.

    Args:
        space: None: the space is the run's ``config``/``param_space``, searched by the operator. A
            define-by-run function (``space(trial)`` calls Optuna's ``trial.suggest_*``) or a dict of
            Optuna distributions gives a :class:`~kubetune.search.optuna_define_by_run.DefineByRunOptunaSearch`
            instead, which runs in the Experiment's driver pod (it is user code, or objects only Optuna
            reads), with Ray's arguments (a sampler object allowed) and Optuna in the trial image.
        metric: result key to optimize; None uses the experiment's. A list of 2 to 8 keys makes a
            multi-objective search, as in Ray (the Experiment's ``status.paretoFront`` then shows the
            non-dominated trials; only the FIFO scheduler runs it).
        mode: ``"min"`` or ``"max"``; None uses the experiment's; a list, one per metric, with a
            list of metrics.
        points_to_evaluate: configs to try first.
        sampler: a name of Optuna's sampler: ``"tpe"`` (default), ``"random"``, ``"cmaes"``,
            ``"qmc"``, ``"nsga2"`` or ``"nsga3"`` (``"gp"`` is refused by the operator: it needs
            PyTorch). Optuna sampler objects cannot travel to the operator: name one and give
            its arguments as ``sampler_args``.
        seed: the sampler's seed.
        evaluated_rewards: one result per point of ``points_to_evaluate`` (a list of values per
            point with several metrics): the points are added to the search as finished trials
            and not run, as Ray does. Each point must then give every sampled parameter.
        sampler_args: keyword arguments of the sampler that take JSON values (kubetune's
            addition; the operator lists the valid ones per sampler), e.g.
            ``{"n_startup_trials": 5, "multivariate": True}`` or ``{"qmc_type": "halton"}``.
        prune_early_stopped: tell Optuna the trials a scheduler stopped early as pruned at the
            iteration they reached, not as complete (kubetune's addition: the BOHB idea with
            ``ASHAScheduler`` or ``HyperBandScheduler``; one metric only).

    Raises:
        ValueError: ``space`` a Ray Tune space (pass it as the run's config), a sampler object passed, metric and
            mode that are not both
            lists of the same length (or both not lists), or ``evaluated_rewards`` without
            ``points_to_evaluate`` of the same length.
    """

    name = "optuna"

    def __new__(cls, space: Any = None, *args: Any, **kwargs: Any):
        if callable(space) or _optuna_distributions(space):
            from kubetune.search.optuna_define_by_run import DefineByRunOptunaSearch

            return DefineByRunOptunaSearch(space, *args, **kwargs)  # not an OptunaSearch: __init__ is not called
        return super().__new__(cls)

    def __init__(
        self,
        space: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        sampler: str | None = None,
        seed: int | None = None,
        evaluated_rewards: list | None = None,
        sampler_args: dict | None = None,
        prune_early_stopped: bool = False,
    ):
        if space is not None:
            raise ValueError("OptunaSearch: pass the space as the run's config (param_space), not as space=")
        if evaluated_rewards is not None and (
            not isinstance(evaluated_rewards, list) or len(evaluated_rewards) != len(points_to_evaluate or [])
        ):
            raise ValueError("OptunaSearch: evaluated_rewards gives one result per point of points_to_evaluate")
        if sampler is not None and not isinstance(sampler, str):
            raise ValueError(
                f"OptunaSearch: sampler objects ({type(sampler).__name__}) cannot be sent to the "
                "operator; pass sampler='tpe', 'cmaes', 'qmc', 'nsga2', ... and sampler_args={...}"
            )
        multi = is_multi_objective(metric) or is_multi_objective(mode)
        if multi:
            try:
                metric, mode = (list(v) for v in objectives(metric, mode))
            except ValueError as exc:
                raise ValueError(f"OptunaSearch: {exc}") from None
        params = dict(sampler=sampler, sampler_args=sampler_args, points_to_evaluate=points_to_evaluate)
        if prune_early_stopped:
            params["prune_early_stopped"] = True
        super().__init__(
            None if multi else metric, None if multi else mode, **params, evaluated_rewards=evaluated_rewards
        )
        self.metric, self.mode = metric, mode
        self.seed = seed


OptunaSearch.convert_search_space = staticmethod(convert_search_space)  # Ray 2.x's static method


def _optuna_distributions(space: Any) -> bool:
    """Whether ``space`` is Optuna's own space format: a dict of ``optuna.distributions`` objects."""
    return (
        isinstance(space, dict)
        and bool(space)
        and all(type(v).__module__.startswith("optuna.distributions") for v in space.values())
    )


class ConcurrencyLimiter:
    """Limits the trials running at once (Ray's ``ConcurrencyLimiter``): ``spec.maxConcurrentTrials``.

    Args:
        searcher: the searcher to wrap.
        max_concurrent: most trials at once, >= 1.
        batch: must be False.

    Raises:
        ValueError: ``max_concurrent`` below 1, or ``batch`` set.
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False):
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter: max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        if batch:
            raise ValueError("ConcurrencyLimiter: batch is not supported")
        self.searcher, self.max_concurrent = searcher, max_concurrent
