"""The ``bohb`` searcher: BOHB's model-based search (Ray's ``TuneBOHB``), run with the ``hyperband_bohb`` scheduler.

Owns :class:`TuneBOHB`. BOHB (Falkner et al., "BOHB: Robust and Efficient Hyperparameter Optimization at
Scale", ICML 2018) keeps, per budget (a HyperBand rung), the configs that reached it with their losses. A new
config comes from the largest budget that has enough of them: the best ``top_n_percent`` are the good ones,
the others the bad ones, a kernel density estimate is fitted to each, ``num_samples`` candidates are drawn
from the good one and the candidate maximizing good/bad density is taken; a ``random_fraction`` of configs,
and every config before a model exists, are drawn at random. The rules (budget choice, minimum points
``d + 1``, the good/bad split, failed trials as the worst loss) are those of hpbandster's ``BOHB`` config
generator, which Ray's ``TuneBOHB`` wraps; the densities are Optuna's multivariate Parzen estimators
(``TPESampler(multivariate=True)``, the TPE variant Optuna took from the BOHB paper), fitted to one budget's
observations, because hpbandster is unmaintained (0.7.4, 2018: an sdist that builds ``netifaces`` from C and
brings ``Pyro4`` and ``statsmodels``, drawing from NumPy's global random state, which a replay cannot repeat) and
Optuna is in the operator image already.

Ray feeds ``TuneBOHB`` only the results ``HyperBandForBOHB`` marks with ``hyperband_info.budget`` (a trial's
result at its rung); so does the operator (:mod:`kubetune_operator.schedulers.hyperband_bohb`). Each
suggestion is a function of ``(seed, suggestion number)`` and the observations so far, so replaying the
journal after a restart suggests the same configs. Created through
``kubetune_operator.algorithms.create_searcher``; ``optuna`` is imported with this module.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import create_trial
from pydantic import StrictInt

from kubetune.resultkeys import is_number
from kubetune.search import parse_space
from kubetune.search.variants import substitute
from kubetune_operator.params import Count, checked
from kubetune_operator.searchers.base import FINISHED, Searcher, decode_number, encode_number
from kubetune_operator.searchers.optuna_search import (
    _distribution,
    _to_value,
    check_params,
    point_params,
    sampled_domains,
    trial_seed,
)

__all__ = ["TuneBOHB", "BOHB_CONFIG"]

#: hpbandster's ``BOHB`` arguments that ``bohb_config`` may give, with their defaults (hpbandster's).
BOHB_CONFIG: dict[str, Any] = {
    "min_points_in_model": None,
    "top_n_percent": 15,
    "num_samples": 64,
    "random_fraction": 1 / 3,
}
#: hpbandster's arguments kubetune cannot honour, and why.
_REFUSED = {
    "bandwidth_factor": "the densities are Optuna's Parzen estimators, which set their own bandwidths",
    "min_bandwidth": "the densities are Optuna's Parzen estimators, which set their own bandwidths",
}


class TuneBOHB(Searcher):
    """BOHB over ``spec.config`` (Ray's ``TuneBOHB``); learns from the rung results of ``hyperband_bohb``.

    Supported domains are those of the ``optuna`` searcher (``uniform``, ``quniform``, ``loguniform``,
    ``qloguniform``, ``randint``, ``qrandint``, ``lograndint``, ``qlograndint``, ``choice``); ``grid_search``,
    ``randn`` and ``sample_from`` are refused, as Ray's ``TuneBOHB.convert_search_space`` refuses them.

    Args:
        space: ``spec.config`` (JSON) or an SDK space.
        metric, mode: required; the loss of a result is ``result[metric]``, negated for ``"max"``.
        num_samples: number of trials to suggest before :data:`FINISHED`.
        seed: seeds every draw; None picks one (kept in the state).
        bohb_config: hpbandster's ``BOHB`` arguments: ``min_points_in_model`` (observations a budget needs
            before its model is used; None or below ``d + 1``: ``d + 1``, ``d`` the number of sampled
            parameters), ``top_n_percent`` (15: the good share; at least ``min_points_in_model`` configs),
            ``num_samples`` (64 candidates drawn from the good density), ``random_fraction`` (1/3).
        points_to_evaluate: configs (full or partial, nested or by flattened path) suggested first.

    Raises:
        ValueError: missing metric or mode, an unsupported domain (its path named), a ``bohb_config`` key
            kubetune does not take (``bandwidth_factor``, ``min_bandwidth``: with the reason) or out of range,
            or a bad point.
    """

    @checked
    def __init__(
        self,
        space: Any,
        metric: str | None = None,
        mode: str | None = None,
        num_samples: Count = 1,
        seed: StrictInt | None = None,
        bohb_config: dict | None = None,
        points_to_evaluate: list[dict] | None = None,
    ):
        super().__init__(metric, mode)
        if metric is None or mode is None:
            raise ValueError("bohb search needs metric and mode")
        self.space = parse_space(space)
        self.num_samples = num_samples
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        self._domains = sampled_domains(self.space, "bohb")
        self._distributions: dict[str, BaseDistribution] = {
            name: _distribution(d, path) for name, (path, d) in self._domains.items()
        }
        config = _checked_config(dict(bohb_config or {}))
        dims = len(self._distributions)
        self.min_points = max(config["min_points_in_model"] or 0, dims + 1)
        self.top_n_percent, self.candidates = config["top_n_percent"], config["num_samples"]
        self.random_fraction = config["random_fraction"]
        self._points = [point_params(p, self._domains) for p in points_to_evaluate or []]
        self._params: dict[str, dict] = {}  # trial_id -> Optuna parameters, in suggestion order
        self._observations: dict[str, dict[str, float]] = {}  # budget (JSON key) -> {trial_id: loss}, in order

    def _config(self, params: dict) -> dict:
        return substitute(self.space, {p: _to_value(d, params[n]) for n, (p, d) in self._domains.items()})

    def suggest(self, trial_id: str) -> dict | str:
        """A config for ``trial_id`` (the same one when asked again); :data:`FINISHED` after ``num_samples``."""
        if trial_id in self._params:
            return self._config(self._params[trial_id])
        number = len(self._params)
        if number >= self.num_samples:
            return FINISHED
        point = self._points[number] if number < len(self._points) else None
        self._params[trial_id] = self._draw(number, point)
        return self._config(self._params[trial_id])

    def model_budget(self) -> str | None:
        """The budget (JSON key) whose observations the next model-based config comes from: the largest with
        more than ``d`` good and more than ``d`` bad configs (hpbandster's rule), or None (random configs)."""
        usable = [b for b, seen in self._observations.items() if self._split(len(seen)) is not None]
        return max(usable, key=float, default=None)

    def _split(self, n: int) -> int | None:
        """How many of ``n`` observations are good, or None when a model cannot be fitted to them."""
        if n < self.min_points:
            return None
        good = max(self.min_points, self.top_n_percent * n // 100)
        dims = len(self._distributions)
        return good if good > dims and n - good > dims else None

    def _draw(self, number: int, point: dict | None) -> dict:
        """Optuna parameters of suggestion ``number``: ``point``'s (the rest drawn at random), the model's, or
        random ones (no model yet, or with probability ``random_fraction``)."""
        seed = trial_seed(self.seed, number)
        budget = self.model_budget()
        use_model = point is None and budget is not None and random.Random(seed).random() >= self.random_fraction
        if not use_model:
            sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler(seed=seed)
            study = optuna.create_study(sampler=sampler)
            if point:
                study.enqueue_trial(point)
            return dict(study.ask(self._distributions).params)
        seen = self._observations[budget]
        good = self._split(len(seen))
        with warnings.catch_warnings():  # multivariate is experimental, gamma deprecated (Optuna 4.9) but kept in 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            sampler = optuna.samplers.TPESampler(
                multivariate=True, n_startup_trials=0, n_ei_candidates=self.candidates, gamma=lambda n: good, seed=seed
            )
        study = optuna.create_study(sampler=sampler)
        order = {trial_id: i for i, trial_id in enumerate(self._params)}  # suggestion order, not arrival order:
        # results of trials running side by side may arrive either way round; the model must not depend on it
        study.add_trials(
            [
                create_trial(params=self._params[t], distributions=self._distributions, value=seen[t])
                for t in sorted(seen, key=order.__getitem__)
            ]
        )
        return dict(study.ask(self._distributions).params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Record ``result`` when it carries ``hyperband_info.budget`` (a rung result of ``hyperband_bohb``):
        its loss at that budget; a missing or non-finite metric counts as the worst loss, as in hpbandster."""
        budget = (result.get("hyperband_info") or {}).get("budget")
        if trial_id not in self._params or not is_number(budget):
            return
        value = result.get(self.metric)
        loss = (-1.0 if self.mode == "max" else 1.0) * value if is_number(value) else math.inf
        self._observations.setdefault(str(budget), {})[trial_id] = loss if math.isfinite(loss) else math.inf

    def get_state(self) -> dict:
        """``{"seed", "params": {trial_id: {...}}, "observations": {budget: {trial_id: loss}}}``, strict JSON."""
        observations = {b: {t: encode_number(v) for t, v in seen.items()} for b, seen in self._observations.items()}
        return {"seed": self.seed, "params": dict(self._params), "observations": observations}

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state`'s output.

        Raises:
            ValueError: a trial's parameters do not fit the space (a spec edit changed it).
        """
        for params in state["params"].values():
            check_params(params, self._distributions)
        self.seed = state["seed"]
        self._params = dict(state["params"])
        self._observations = {
            b: {t: decode_number(v) for t, v in seen.items()} for b, seen in state["observations"].items()
        }


def _checked_config(config: dict) -> dict:
    """``bohb_config`` over :data:`BOHB_CONFIG`'s defaults.

    Raises:
        ValueError: an unknown or refused key, or a value out of range.
    """
    for key in config:
        if key in _REFUSED:
            raise ValueError(f"bohb_config: {key} is not supported: {_REFUSED[key]}")
        if key not in BOHB_CONFIG:
            raise ValueError(f"bohb_config: unknown key {key}; valid: {', '.join(sorted(BOHB_CONFIG))}")
    out = {**BOHB_CONFIG, **config}
    checks = {
        "min_points_in_model": out["min_points_in_model"] is None
        or (_whole(out["min_points_in_model"]) and out["min_points_in_model"] >= 1),
        "top_n_percent": _whole(out["top_n_percent"]) and 1 <= out["top_n_percent"] <= 99,
        "num_samples": _whole(out["num_samples"]) and out["num_samples"] >= 1,
        "random_fraction": is_number(out["random_fraction"]) and 0 <= out["random_fraction"] <= 1,
    }
    for key, ok in checks.items():
        if not ok:
            raise ValueError(f"bohb_config: {key} out of range or of the wrong type: {out[key]!r}")
    return {k: int(v) if k != "random_fraction" and v is not None else v for k, v in out.items()}


def _whole(value: Any) -> bool:
    return is_number(value) and math.isfinite(value) and float(value).is_integer()
