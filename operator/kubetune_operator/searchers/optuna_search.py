"""The ``optuna`` searcher: model-based search (TPE by default) through Optuna's ask/tell API.

Owns :class:`OptunaSearch`, the counterpart of Ray's ``OptunaSearch``: the
parameter space becomes Optuna distributions, ``suggest`` asks a trial,
``on_trial_complete`` tells its value. The study lives in memory; the state
holds every asked trial's parameters and outcome, and ``set_state`` replays
them into a fresh study, so an operator restart keeps what was learned and
can still tell the trials that were running. Each ask draws from a sampler
seeded by ``(seed, trial number)``, so a suggestion depends only on the seed
and the study's history: replaying the same calls after a restart (the
operator's journal) gives the same configs as an uninterrupted run. ``optuna`` is imported here only,
and this module only when the Experiment chooses ``optuna`` (see the registry
in ``kubetune_operator.searchers``).
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from kubetune.search import Categorical, Domain, Float, Integer, is_grid, parse_space
from kubetune.search.variants import find_domains, substitute
from kubetune_operator.searchers.base import FINISHED, Searcher, check_count, decode_number, encode_number

__all__ = ["OptunaSearch"]

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a study per restart and per spec edit is not news
_SAMPLERS = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
_STATES = {"running": TrialState.RUNNING, "complete": TrialState.COMPLETE, "fail": TrialState.FAIL}


def _flat_name(path: tuple) -> str:
    return "/".join(map(str, path))


def _dotted(path: tuple) -> str:
    return ".".join(["config", *map(str, path)])


def _distribution(domain: Domain, path: tuple) -> BaseDistribution:
    """Optuna's distribution for ``domain`` at ``path``; choices are searched by index (any JSON value works)."""
    if isinstance(domain, Categorical):
        return CategoricalDistribution(list(range(len(domain.categories))))
    if isinstance(domain, Float):
        # Optuna has no step on a log scale: qloguniform is searched continuously, then rounded.
        step = domain.q if domain.q is not None and not domain.log else None
        return FloatDistribution(domain.lower, domain.upper, log=domain.log, step=step)
    if isinstance(domain, Integer):
        low, high = domain.bounds()
        if domain.q is None or domain.q == 1:
            return IntDistribution(low, high - 1, log=domain.log)  # randint's upper bound is exclusive
        return IntDistribution(low, high, log=domain.log, step=1 if domain.log else domain.q)
    raise ValueError(f"{_dotted(path)}: optuna search does not support {domain.name}")


def _to_value(domain: Domain, internal: Any) -> Any:
    """The config value for Optuna's parameter value ``internal``."""
    if isinstance(domain, Categorical):
        return domain.categories[internal]
    if isinstance(domain, (Float, Integer)) and domain.q is not None and domain.log:
        value = round(internal / domain.q) * domain.q
        return int(value) if isinstance(domain, Integer) else float(value)
    return internal


def _to_internal(domain: Domain, value: Any, name: str) -> Any:
    """Optuna's parameter value for a config value (``points_to_evaluate``)."""
    if isinstance(domain, Categorical):
        for i, category in enumerate(domain.categories):
            if category == value and type(category) is type(value):
                return i
        raise ValueError(f"points_to_evaluate: {name}={value!r} is not one of {domain.categories!r}")
    return value


class OptunaSearch(Searcher):
    """Optuna ask/tell search over ``spec.config`` (Ray's ``OptunaSearch`` for kubetune).

    Supported domains: ``uniform``, ``quniform``, ``loguniform``, ``qloguniform``
    (searched continuously, then rounded), ``randint``, ``qrandint``,
    ``lograndint``, ``qlograndint`` (likewise), ``choice``; constants are kept.
    ``grid_search``, ``randn``/``qrandn`` and ``sample_from`` are rejected, as in Ray.
    Parameter names inside the study are the flattened config paths (``model/lr``).

    Args:
        space: ``spec.config`` (JSON) or an SDK space.
        metric, mode: required; the value told to Optuna is ``result[metric]``.
        num_samples: number of trials to suggest before :data:`FINISHED`.
        seed: seeds the sampler; None picks one (kept in the state).
        sampler: ``"tpe"`` (default) or ``"random"``.
        sampler_args: keyword arguments for the sampler (e.g. ``{"n_startup_trials": 5}``).
        points_to_evaluate: configs (full or partial: sampled keys by flattened path
            or nested) evaluated first, as Ray's ``points_to_evaluate``.

    Raises:
        ValueError: missing metric/mode, an unsupported domain (message names its
            path), an unknown sampler or sampler argument, or a bad point.
    """

    def __init__(
        self,
        space: Any,
        metric: str | None = None,
        mode: str | None = None,
        num_samples: int = 1,
        seed: int | None = None,
        sampler: str = "tpe",
        sampler_args: dict | None = None,
        points_to_evaluate: list[dict] | None = None,
    ):
        super().__init__(metric, mode)
        if metric is None or mode is None:
            raise ValueError("optuna search needs metric and mode")
        check_count("num_samples", num_samples)
        if sampler not in _SAMPLERS:
            raise ValueError(f"unknown optuna sampler {sampler!r}; valid: {', '.join(sorted(_SAMPLERS))}")
        self.space = parse_space(space)
        self.num_samples = num_samples
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        self._sampler_name, self._sampler_args = sampler, dict(sampler_args or {})
        self._domains: dict[str, tuple[tuple, Domain]] = {}
        for path, node in find_domains(self.space):
            if is_grid(node):
                raise ValueError(f"{_dotted(path)}: optuna search does not support grid_search")
            self._domains[_flat_name(path)] = (path, node)
        self._distributions = {name: _distribution(d, path) for name, (path, d) in self._domains.items()}
        self._points = [self._point_params(p) for p in points_to_evaluate or []]
        self._trials: dict[str, dict] = {}  # trial_id -> {"number", "params", "state", "value"}
        if "seed" in self._sampler_args:
            raise ValueError("sampler_args: give the seed as spec.searchAlgorithm.seed")
        try:
            self._study = self._new_study(0)
        except TypeError as exc:
            raise ValueError(f"sampler_args: {exc}") from None

    def _point_params(self, point: dict) -> dict:
        flat = self._flatten(point, ())
        unknown = sorted(set(flat) - set(self._domains))
        if unknown:
            raise ValueError(f"points_to_evaluate: {', '.join(unknown)} not sampled parameters of the space")
        return {name: _to_internal(self._domains[name][1], value, name) for name, value in flat.items()}

    def _flatten(self, point: dict, prefix: tuple) -> dict:
        flat: dict = {}
        for key, value in point.items():
            name = _flat_name(prefix + (key,))
            if isinstance(value, dict) and name not in self._domains:
                flat.update(self._flatten(value, prefix + (key,)))
            else:
                flat[name] = value
        return flat

    def _sampler(self, number: int) -> optuna.samplers.BaseSampler:
        """The sampler for trial ``number``: seeded by ``(seed, number)`` alone, so a suggestion never
        depends on how many samplers drew before it in this process."""
        digest = hashlib.sha256(f"{self.seed}:{number}".encode()).digest()
        return _SAMPLERS[self._sampler_name](seed=int.from_bytes(digest[:4], "big"), **self._sampler_args)

    def _new_study(self, suggested: int) -> optuna.Study:
        direction = "maximize" if self.mode == "max" else "minimize"
        return optuna.create_study(direction=direction, sampler=self._sampler(suggested))

    def _config(self, params: dict) -> dict:
        values = {path: _to_value(domain, params[name]) for name, (path, domain) in self._domains.items()}
        return substitute(self.space, values)

    def suggest(self, trial_id: str) -> dict | str:
        """Ask Optuna for a config; :data:`FINISHED` after ``num_samples`` suggestions.

        Asking again for a ``trial_id`` already suggested returns the same config (the operator
        asks again when creating the Trial failed).
        """
        if trial_id in self._trials:
            return self._config(self._trials[trial_id]["params"])
        count = len(self._trials)
        if count >= self.num_samples:
            return FINISHED
        if count < len(self._points):
            self._study.enqueue_trial(self._points[count])
        self._study.sampler = self._sampler(count)
        trial = self._study.ask(self._distributions)
        self._trials[trial_id] = {"number": trial.number, "params": trial.params, "state": "running", "value": None}
        return self._config(trial.params)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Tell Optuna the trial's ``result[metric]``; errors, missing or NaN values count as failed."""
        record = self._trials.get(trial_id)
        if record is None or record["state"] != "running":
            return
        value = (result or {}).get(self.metric)
        usable = not error and isinstance(value, (int, float)) and not isinstance(value, bool)
        if usable and not math.isnan(value):
            self._study.tell(record["number"], float(value))
            record.update(state="complete", value=float(value))
        else:
            self._study.tell(record["number"], state=TrialState.FAIL)
            record["state"] = "fail"

    def get_state(self) -> dict:
        """``{"seed", "trials": {trial_id: {"number", "params", "state", "value"}}}``, strict JSON."""
        trials = {tid: {**rec, "value": encode_number(rec["value"])} for tid, rec in self._trials.items()}
        return {"seed": self.seed, "trials": trials}

    def set_state(self, state: dict) -> None:
        """Rebuild the study by replaying every asked trial (running ones stay tellable)."""
        self.seed = state["seed"]
        self._study = self._new_study(len(state["trials"]))
        records = sorted(state["trials"].items(), key=lambda item: item[1]["number"])
        values = [decode_number(rec["value"]) for _, rec in records]
        self._study.add_trials(
            [
                create_trial(
                    state=_STATES[rec["state"]],
                    params=rec["params"],
                    distributions=self._distributions,
                    value=value if rec["state"] == "complete" else None,
                )
                for (_, rec), value in zip(records, values)
            ]
        )
        # A fresh study numbers the replayed trials 0, 1, ... in order.
        self._trials = {
            trial_id: {**rec, "number": number, "value": value}
            for number, ((trial_id, rec), value) in enumerate(zip(records, values))
        }
