"""Ray's ``OptunaSearch`` over a space the operator cannot run: a define-by-run function, or Optuna's distributions.

Owns :class:`DefineByRunOptunaSearch`, the searcher ``OptunaSearch(space=<function or dict of Optuna
distributions>)`` builds (:class:`kubetune.search.algorithms.OptunaSearch`). Such a space is user code, or objects
only Optuna reads, so the searcher is a searcher of the user's: the SDK ships it to the Experiment's driver pod, which
asks it for each trial's config (``kubetune.runtime.driver``), as Ray's driver does; the operator never runs it.
Needs Optuna in the trial image (``kubetune[optuna]``). Ray's behaviour (``ray.tune.search.optuna.OptunaSearch``):
an in-memory study, TPE (seeded by ``seed``) unless a sampler is given, no pruner, each result reported at its
``training_iteration``, a trial told COMPLETE with its metric, FAIL on an error and PRUNED without a value.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from kubetune.search.algorithms import Searcher

__all__ = ["DefineByRunOptunaSearch"]

log = logging.getLogger(__name__)


class DefineByRunOptunaSearch(Searcher):
    """Ray's ``OptunaSearch`` with ``space`` a define-by-run function (``space(trial)`` calls
    ``trial.suggest_*``, and may return a dict of constants) or a dict of Optuna distributions; runs in the driver pod.

    Args:
        space: the function, or ``{name: optuna.distributions.BaseDistribution}`` (``/`` in a name nests the key).
        metric, mode: Ray's; lists of them for several objectives (no intermediate results are reported then).
        points_to_evaluate: configs asked first (Optuna's ``enqueue_trial``).
        sampler: an Optuna sampler object; None: ``TPESampler(seed=seed)``, or NSGA-II for several objectives.
        seed: the default sampler's seed.
        sampler_args: keyword arguments of the default sampler (kubetune's, as for the operator's OptunaSearch).
        study_name: the in-memory study's name (default ``"optuna"``).

    Raises:
        TypeError: ``evaluated_rewards`` (Ray refuses them with a define-by-run function), a ``storage`` (the study
            lives in the driver pod's memory and is saved with its state), ``prune_early_stopped``, or
            ``sampler_args`` beside a sampler object.
    """

    def __init__(
        self,
        space: Callable | dict,
        metric: Any = None,
        mode: Any = None,
        points_to_evaluate: list[dict] | None = None,
        sampler: Any = None,
        seed: int | None = None,
        evaluated_rewards: list | None = None,
        study_name: str | None = None,
        storage: Any = None,
        sampler_args: dict | None = None,
        prune_early_stopped: bool = False,
    ):
        if evaluated_rewards is not None:
            raise TypeError(
                "Define-by-run function passed in `space` argument is not yet supported when using "
                "`evaluated_rewards`. Please provide an `OptunaDistribution` dict or pass a Ray Tune search space "
                "to `tune.Tuner()`."
                if callable(space)
                else "OptunaSearch: evaluated_rewards with Optuna's distributions: pass the space as the run's "
                "config (param_space), where the operator's OptunaSearch adds them"
            )
        if prune_early_stopped or (sampler_args and sampler is not None):
            raise TypeError(
                "OptunaSearch: prune_early_stopped, and sampler_args beside a sampler object, are for the "
                "operator's OptunaSearch (the run's config as its space)"
            )
        if storage is not None:
            raise TypeError(
                "OptunaSearch: storage= is not supported with this space: the study lives in the driver pod's "
                "memory, saved with the driver's state"
            )
        self._metric, self._mode = metric, mode  # lists allowed, as Ray's
        self.params = {}
        self._space, self._points = space, list(points_to_evaluate or [])
        self._sampler, self._seed, self._study_name = sampler, seed, study_name or "optuna"
        self._sampler_args = dict(sampler_args or {})
        self._study = None
        self._ot_trials: dict[str, Any] = {}
        self._completed: set[str] = set()

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        """Ray's: False, the searcher has its own space (the run's metric and mode are not taken either)."""
        return False

    def _study_of(self):
        if self._study is None:
            import optuna

            multi = isinstance(self._mode, list)
            default = optuna.samplers.NSGAIISampler if multi else optuna.samplers.TPESampler
            sampler = self._sampler or default(seed=self._seed, **self._sampler_args)
            directions = [("minimize" if m == "min" else "maximize") for m in (self._mode if multi else [self._mode])]
            self._study = optuna.create_study(
                sampler=sampler, pruner=optuna.pruners.NopPruner(), study_name=self._study_name, directions=directions
            )
            for point in self._points:
                self._study.enqueue_trial(point)
        return self._study

    def suggest(self, trial_id: str) -> dict:
        """The config of a new Optuna trial: what the function suggested (and returned), or the distributions' values.

        Raises:
            RuntimeError: no metric or mode (Ray's).
            TypeError: the function returned something other than None or a dict with str keys (Ray's).
        """
        if not self._metric or not self._mode:
            raise RuntimeError(
                f"Trying to sample a configuration from {type(self).__name__}, but the `metric` ({self._metric}) or "
                f"`mode` ({self._mode}) parameters have not been set. Either pass these arguments when instantiating "
                "the search algorithm, or pass them to `tune.TuneConfig()`."
            )
        study = self._study_of()
        if trial_id not in self._ot_trials:
            fixed = None if callable(self._space) else self._space
            self._ot_trials[trial_id] = study.ask(fixed_distributions=fixed)
        ot_trial = self._ot_trials[trial_id]
        if not callable(self._space):
            return _unflatten(ot_trial.params)
        returned = self._space(ot_trial)
        if returned is not None and (not isinstance(returned, dict) or not all(isinstance(k, str) for k in returned)):
            raise TypeError(
                "The return value of the define-by-run function passed in the `space` argument should be either "
                f"None or a `dict` with `str` keys. Got {type(returned)}."
            )
        return _unflatten({**ot_trial.params, **(returned or {})})

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Report ``result[metric]`` at its ``training_iteration`` (one metric only, as Ray)."""
        if isinstance(self._metric, list) or trial_id in self._completed or trial_id not in self._ot_trials:
            return
        self._ot_trials[trial_id].report(result[self._metric], result["training_iteration"])

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Tell the study: COMPLETE with the metric's value(s), else FAIL after an error, else PRUNED (Ray's)."""
        import optuna

        if trial_id in self._completed or trial_id not in self._ot_trials:
            return
        metrics = self._metric if isinstance(self._metric, list) else [self._metric]
        values = [result.get(m) for m in metrics] if result else [None]
        value = None if any(v is None for v in values) else (values if len(values) > 1 else values[0])
        state = optuna.trial.TrialState.COMPLETE
        if value is None:
            state = optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.PRUNED
        try:
            self._study_of().tell(self._ot_trials[trial_id], value, state=state)
        except Exception as exc:  # noqa: BLE001 - Ray logs it too (a NaN value, say) and goes on
            log.warning("%s", exc)
        self._completed.add(trial_id)


def _unflatten(params: dict) -> dict:
    """``{"a/b": 1}`` as ``{"a": {"b": 1}}`` (Ray's ``unflatten_dict``)."""
    out: dict = {}
    for key, value in params.items():
        *parents, last = key.split("/")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out
