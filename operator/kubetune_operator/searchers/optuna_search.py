"""The ``optuna`` searcher: model-based search (TPE by default) through Optuna's ask/tell API.

Owns :class:`OptunaSearch`, the counterpart of Ray's ``OptunaSearch``, and :data:`SAMPLERS`, Optuna's
samplers by name with the arguments a spec may give them: the parameter space becomes Optuna
distributions, ``suggest`` asks a trial, ``on_trial_complete`` tells its value (or its values, one per
objective, when ``metric`` is a list). The study lives in memory; the state holds every asked trial's
parameters and outcome and when it was told, and ``set_state`` rebuilds the study from them, so an
operator restart keeps what was learned and can still tell the trials that were running. Each ask draws
from a sampler seeded by ``(seed, trial number)``, so a suggestion depends only on the seed and the
study's history: replaying the same calls after a restart (the operator's journal) gives the same
configs as an uninterrupted run. Samplers that keep state in the study besides the trials (CMA-ES's
optimizer, NSGA-II/III's generations, QMC's sequence position) are rebuilt by asking and telling again
in the recorded order. ``optuna`` is imported here only, and this module only when the Experiment
chooses ``optuna`` (see :mod:`kubetune_operator.algorithms`).
"""

from __future__ import annotations

import hashlib
import math
import random
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from pydantic import StrictInt

from kubetune.resultkeys import is_multi_objective, is_number, objectives
from kubetune.search import Categorical, Domain, Float, Integer, is_grid, parse_space
from kubetune.search.variants import find_domains, substitute
from kubetune_operator.params import Count, Flag, checked
from kubetune_operator.searchers.base import FINISHED, Searcher, decode_number, encode_number

__all__ = ["OptunaSearch", "SAMPLERS"]

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a study per restart and per spec edit is not news
_STATES = {
    "running": TrialState.RUNNING,
    "complete": TrialState.COMPLETE,
    "pruned": TrialState.PRUNED,
    "fail": TrialState.FAIL,
}


@dataclass(frozen=True)
class _Sampler:
    """One of Optuna's samplers as a spec names it.

    Attributes:
        cls: the Optuna class.
        args: the keyword arguments a spec may give (``sampler_args``) and their JSON types; the others take
            Python objects (callables, samplers) that cannot travel in a spec.
        fixed: arguments kubetune always passes (its logs would otherwise warn at every trial).
        seed_per_trial: seeded by ``(seed, trial number)``; False for QMC, whose sequence is one per seed
            (its first, independent draws are still seeded per trial).
        study_state: keeps state in the study besides the trials' parameters and values, so
            ``set_state`` rebuilds it by asking and telling again.
        multi_objective: supports ``metric`` given as a list.
    """

    cls: type
    args: dict
    fixed: dict
    seed_per_trial: bool = True
    study_state: bool = False
    multi_objective: bool = True


_GA_ARGS = {"population_size": int, "mutation_prob": float, "crossover_prob": float, "swapping_prob": float}
#: Optuna's samplers by ``sampler`` name (``spec.searchAlgorithm.params.sampler``).
SAMPLERS: dict[str, _Sampler] = {
    # Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011; multivariate: Falkner
    # et al., "BOHB", ICML 2018; multi-objective: Ozaki et al., "Multiobjective TPE", GECCO 2020.
    "tpe": _Sampler(
        optuna.samplers.TPESampler,
        {
            "n_startup_trials": int,
            "n_ei_candidates": int,
            "prior_weight": float,
            "consider_magic_clip": bool,
            "consider_endpoints": bool,
            "multivariate": bool,
            "group": bool,
            "constant_liar": bool,
        },
        {"warn_independent_sampling": False},
    ),
    "random": _Sampler(optuna.samplers.RandomSampler, {}, {}),
    # Hansen, "The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772; separable: Ros and Hansen, PPSN
    # 2008; with_margin: Hamano et al., GECCO 2022; lr_adapt: Nomura et al., GECCO 2023.
    "cmaes": _Sampler(
        optuna.samplers.CmaEsSampler,
        {"n_startup_trials": int, "popsize": int, "use_separable_cma": bool, "with_margin": bool, "lr_adapt": bool},
        {"warn_independent_sampling": False},
        study_state=True,
        multi_objective=False,
    ),
    # Sobol, USSR Comput. Math. Math. Phys. 7(4), 1967; Halton, Numer. Math. 2, 1960 (scipy.stats.qmc).
    "qmc": _Sampler(
        optuna.samplers.QMCSampler,
        {"qmc_type": str, "scramble": bool},
        {"warn_independent_sampling": False, "warn_asynchronous_seeding": False},
        seed_per_trial=False,
        study_state=True,
    ),
    # Deb et al., "A fast and elitist multiobjective genetic algorithm: NSGA-II", IEEE TEVC 6(2), 2002.
    "nsga2": _Sampler(optuna.samplers.NSGAIISampler, dict(_GA_ARGS), {}, study_state=True),
    # Deb and Jain, "An Evolutionary Many-Objective Optimization Algorithm Using Reference-Point-Based
    # Nondominated Sorting Approach", IEEE TEVC 18(4), 2014.
    "nsga3": _Sampler(optuna.samplers.NSGAIIISampler, {**_GA_ARGS, "dividing_parameter": int}, {}, study_state=True),
}
#: Samplers Optuna has that the operator refuses, and why.
_REFUSED = {
    "gp": "Optuna's GPSampler needs PyTorch, which the operator does not install; "
    "use 'tpe' (with multivariate: true) or 'cmaes'",
}


def _checked_args(sampler: str, args: dict) -> dict:
    """``sampler_args`` checked against :data:`SAMPLERS` (whole floats given for ints become ints).

    Raises:
        ValueError: ``seed`` given, an argument kubetune does not pass, or a value of the wrong type.
    """
    allowed, out = SAMPLERS[sampler].args, {}
    for key, value in args.items():
        if key == "seed":
            raise ValueError("sampler_args: give the seed as spec.searchAlgorithm.seed")
        if key not in allowed:
            raise ValueError(
                f"sampler_args: {key} is not an argument of the {sampler} sampler kubetune can pass; "
                f"valid: {', '.join(sorted(allowed)) or 'none'}"
            )
        kind = allowed[key]
        ok = (
            isinstance(value, bool)
            if kind is bool
            else is_number(value) and (kind is float or float(value).is_integer())
            if kind in (int, float)
            else isinstance(value, kind)
        )
        if not ok:
            raise ValueError(f"sampler_args: {key} must be {kind.__name__}, got {value!r}")
        out[key] = int(value) if kind is int else value
    return out


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
        metric, mode: required; the value told to Optuna is ``result[metric]``. Lists of the same length
            (2 to :data:`kubetune.resultkeys.MAX_OBJECTIVES`) make a multi-objective study, told
            ``[result[m] for m in metric]``, as Ray's ``OptunaSearch(metric=[...], mode=[...])``.
        num_samples: number of trials to suggest before :data:`FINISHED`.
        seed: seeds the sampler; None picks one (kept in the state).
        sampler: a name of :data:`SAMPLERS`: ``"tpe"`` (default), ``"random"``, ``"cmaes"`` (one
            objective only; choices are drawn at random), ``"qmc"``, ``"nsga2"`` or ``"nsga3"``.
        sampler_args: keyword arguments of the sampler that take JSON values (per sampler in
            :data:`SAMPLERS`, e.g. ``{"n_startup_trials": 5, "multivariate": true}`` for ``tpe``,
            ``{"qmc_type": "halton"}`` for ``qmc``, ``{"population_size": 20}`` for ``nsga2``).
        points_to_evaluate: configs (full or partial: sampled keys by flattened path
            or nested) evaluated first, as Ray's ``points_to_evaluate``.
        evaluated_rewards: the results of ``points_to_evaluate``, one per point (a list of values per
            point for several objectives): the points are then added to the study as completed trials
            and not run, as Ray does; each point must then give every sampled parameter.
        prune_early_stopped: tell a trial that a scheduler (or stopper) stopped early as *pruned* at
            the ``training_iteration`` it reached, with its last value there, instead of complete (Ray's
            OptunaSearch tells it complete). TPE then ranks such trials below every completed one, deeper
            ones first, as with Optuna's own pruners: the model learns from the budget each trial got,
            the idea of BOHB (Falkner et al., ICML 2018) with ASHA or HyperBand. One objective only.

    Raises:
        ValueError: missing or malformed metric/mode, an unsupported domain (message names its
            path), an unknown or refused sampler (``gp``), a sampler argument kubetune does not pass or
            of the wrong type, ``cmaes`` with several objectives, a bad point, ``evaluated_rewards``
            whose length or values do not fit the points, or ``prune_early_stopped`` not a bool or with
            several objectives.
    """

    @checked
    def __init__(
        self,
        space: Any,
        metric: str | list[str] | None = None,
        mode: str | list[str] | None = None,
        num_samples: Count = 1,
        seed: StrictInt | None = None,
        sampler: str = "tpe",
        sampler_args: dict | None = None,
        points_to_evaluate: list[dict] | None = None,
        evaluated_rewards: list | None = None,
        prune_early_stopped: Flag = False,
    ):
        self.multi_objective = is_multi_objective(metric)
        if self.multi_objective:
            metrics, modes = objectives(metric, mode)
            super().__init__()
            self.metric, self.mode = list(metrics), list(modes)
        else:
            super().__init__(metric, mode)
        if metric is None or mode is None:
            raise ValueError("optuna search needs metric and mode")
        if sampler in _REFUSED:
            raise ValueError(f"optuna sampler {sampler!r} is not available: {_REFUSED[sampler]}")
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown optuna sampler {sampler!r}; valid: {', '.join(sorted(SAMPLERS))}")
        if self.multi_objective and not SAMPLERS[sampler].multi_objective:
            raise ValueError(f"optuna sampler {sampler!r} optimizes one objective; metric gives {len(self.metric)}")
        if prune_early_stopped and self.multi_objective:
            raise ValueError(
                "prune_early_stopped needs one objective (Optuna keeps no intermediate values for several)"
            )
        self.prune_early_stopped = prune_early_stopped
        self.space = parse_space(space)
        self.num_samples = num_samples
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        self._sampler_name, self._sampler_args = sampler, _checked_args(sampler, dict(sampler_args or {}))
        self._domains = sampled_domains(self.space, "optuna")
        self._distributions = {name: _distribution(d, path) for name, (path, d) in self._domains.items()}
        points = [point_params(p, self._domains) for p in points_to_evaluate or []]
        self._evaluated = self._evaluated_points(points, evaluated_rewards)
        self._points = [] if self._evaluated else points
        # trial_id -> {"number", "params", "state", "value", "told"}; "told": the event (asks and tells counted
        # together) at which the trial was told, None while it runs
        self._trials: dict[str, dict] = {}
        self._events = 0
        try:
            self._study = self._new_study(0)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sampler_args: {exc}") from None

    def _evaluated_points(self, points: list[dict], rewards: list | None) -> list[tuple[dict, Any]]:
        """``(params, value or values)`` of the points ``evaluated_rewards`` gives results for (Ray's
        ``add_evaluated_point``)."""
        if rewards is None:
            return []
        if not isinstance(rewards, list) or len(rewards) != len(points):
            raise ValueError(
                f"evaluated_rewards: one result per point of points_to_evaluate ({len(points)}), got {rewards!r}"
            )
        out = []
        for i, (params, reward) in enumerate(zip(points, rewards)):
            missing = sorted(set(self._distributions) - set(params))
            if missing:
                raise ValueError(f"evaluated_rewards: points_to_evaluate[{i}] lacks {', '.join(missing)}")
            values = reward if self.multi_objective else [reward]
            if (
                not isinstance(values, list)
                or len(values) != (len(self.metric) if self.multi_objective else 1)
                or not all(is_number(v) and math.isfinite(v) for v in values)
            ):
                shape = f"a list of {len(self.metric)} finite numbers" if self.multi_objective else "a finite number"
                raise ValueError(f"evaluated_rewards[{i}] must be {shape}, got {reward!r}")
            out.append((params, [float(v) for v in values] if self.multi_objective else float(values[0])))
        return out

    def _sampler(self, number: int) -> optuna.samplers.BaseSampler:
        """The sampler for trial ``number``: seeded by ``(seed, number)`` alone (QMC: its sequence by ``seed``,
        its independent draws by ``(seed, number)``), so a suggestion never depends on how many samplers drew
        before it in this process."""
        kind = SAMPLERS[self._sampler_name]
        seed = trial_seed(self.seed, number)
        args = {**kind.fixed, **self._sampler_args}
        if kind.seed_per_trial:
            args["seed"] = seed
        else:  # one sequence per seed; what it draws independently (its first trial) is seeded per trial
            args.update(seed=self.seed % 2**32, independent_sampler=optuna.samplers.RandomSampler(seed=seed))
        with warnings.catch_warnings():  # experimental and deprecated arguments would warn at every trial
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            return kind.cls(**args)

    def _new_study(self, suggested: int) -> optuna.Study:
        modes = self.mode if self.multi_objective else [self.mode]
        study = optuna.create_study(
            directions=["maximize" if m == "max" else "minimize" for m in modes], sampler=self._sampler(suggested)
        )
        if self._evaluated:
            study.add_trials(
                [
                    create_trial(
                        params=params,
                        distributions=self._distributions,
                        **({"values": value} if self.multi_objective else {"value": value}),
                    )
                    for params, value in self._evaluated
                ]
            )
        return study

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
        trial = self._ask(count)
        self._trials[trial_id] = {
            "number": trial.number,
            "params": trial.params,
            "state": "running",
            "value": None,
            "told": None,
        }
        return self._config(trial.params)

    def _ask(self, count: int, replaying: dict | None = None) -> optuna.Trial:
        """Ask for the ``count``-th trial of this searcher.

        Args:
            replaying: when replaying an ask whose parameters are enqueued, the parameters the original ask
                was given (a point of ``points_to_evaluate``). Optuna samples relatively (where a sampler
                keeps what it learned) at the first parameter it is neither given nor can only take one
                value, with the parameters before it already set: the replay does the same at the same
                moment (``Trial._suggest`` is what ``Study.ask`` calls per parameter).
        """
        self._study.sampler = self._sampler(count)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if replaying is None:
                trial = self._study.ask(self._distributions)
            else:
                trial = self._study.ask()
                sampled = False
                for name, distribution in self._distributions.items():
                    if not sampled and name not in replaying and not distribution.single():
                        trial.relative_params  # noqa: B018 (the property samples)
                        sampled = True
                    trial._suggest(name, distribution)
        self._events += 1
        return trial

    def _outcome(self, result: dict | None, error: bool) -> float | list[float] | None:
        """The value (values, one per objective) to tell for ``result``; None when the trial failed: an
        error, a metric missing, not a number or NaN (Optuna fails a trial told NaN)."""
        metrics = self.metric if self.multi_objective else [self.metric]
        values = [(result or {}).get(m) for m in metrics]
        if error or not all(is_number(v) and not math.isnan(v) for v in values):
            return None
        return [float(v) for v in values] if self.multi_objective else float(values[0])

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False, early_stopped: bool = False
    ) -> None:
        """Tell Optuna the trial's ``result[metric]`` (each objective's, for several); errors, missing or NaN
        values count as failed. With ``prune_early_stopped``, a trial a scheduler stopped early is told as
        pruned at its ``training_iteration`` instead (see the class)."""
        record = self._trials.get(trial_id)
        if record is None or record["state"] != "running":
            return
        value, step = self._outcome(result, error), (result or {}).get("training_iteration")
        pruned = early_stopped and self.prune_early_stopped and value is not None
        self._tell(record, value, (int(step) if is_number(step) and math.isfinite(step) else 0) if pruned else None)
        record["told"] = self._events
        self._events += 1

    def _tell(self, record: dict, value: float | list[float] | None, step: int | None = None) -> None:
        """Tell the study how ``record``'s trial ended: failed (``value`` None), complete with ``value``, or
        pruned at ``step`` with ``value`` as its intermediate value there."""
        if value is None:
            self._study.tell(record["number"], state=TrialState.FAIL)
            record["state"] = "fail"
        elif step is not None:
            frozen = self._study.get_trials(deepcopy=False)[record["number"]]
            optuna.trial.Trial(self._study, frozen._trial_id).report(value, step)
            self._study.tell(record["number"], state=TrialState.PRUNED)
            record.update(state="pruned", value=value, step=step)
        else:
            self._study.tell(record["number"], value)
            record.update(state="complete", value=value)

    def get_state(self) -> dict:
        """``{"seed", "trials": {trial_id: {"number", "params", "state", "value", "told"}}}``, strict JSON
        (``value`` a list for several objectives; a pruned trial's record has its ``step`` too)."""
        trials = {tid: {**rec, "value": _encode(rec["value"])} for tid, rec in self._trials.items()}
        return {"seed": self.seed, "trials": trials}

    def set_state(self, state: dict) -> None:
        """Rebuild the study from ``state`` (running trials stay tellable): the trials are added as they
        ended, or, for samplers that keep state in the study (``SAMPLERS[...].study_state``), asked with
        their recorded parameters and told again in the recorded order.

        Raises:
            ValueError: a trial's parameters do not fit the space (a spec edit changed it).
        """
        self.seed = state["seed"]
        records = sorted(state["trials"].items(), key=lambda item: item[1]["number"])
        values = [_decode(rec["value"]) for _, rec in records]
        first = len(self._evaluated)  # a fresh study numbers the evaluated points first, then the trials in order
        self._trials = {
            trial_id: {**rec, "number": first + i, "value": value, "told": rec.get("told")}
            for i, ((trial_id, rec), value) in enumerate(zip(records, values))
        }
        self._study = self._new_study(len(records))
        if SAMPLERS[self._sampler_name].study_state:
            self._replay()
            return
        self._study.add_trials(
            [
                create_trial(
                    state=_STATES[rec["state"]],
                    params=rec["params"],
                    distributions=self._distributions,
                    **(
                        ({"values": rec["value"]} if self.multi_objective else {"value": rec["value"]})
                        if rec["state"] == "complete"
                        else {"value": rec["value"], "intermediate_values": {rec["step"]: rec["value"]}}
                        if rec["state"] == "pruned"
                        else {}
                    ),
                )
                for rec in self._trials.values()
            ]
        )
        self._events = len(self._trials) + sum(rec["state"] != "running" for rec in self._trials.values())

    def _replay(self) -> None:
        """Ask every trial again with its recorded parameters and tell the ended ones at their recorded
        events, so the sampler's own state in the study (CMA-ES's optimizer, a GA's generations, QMC's
        position) becomes what it was. A trial without a recorded event is told after the last ask."""
        asks = list(self._trials.values())
        position = {id(rec): i for i, rec in enumerate(asks)}
        tells = deque(
            sorted(
                (rec for rec in asks if rec["state"] != "running"),
                key=lambda r: (r["told"] is None, r["told"] or 0, position[id(r)]),
            )
        )
        self._events = asked = 0
        while asked < len(asks) or tells:
            nxt = tells[0] if tells else None
            if nxt is not None and position[id(nxt)] < asked:
                if asked == len(asks) or (nxt["told"] is not None and nxt["told"] <= self._events):
                    tells.popleft()
                    self._tell(nxt, None if nxt["state"] == "fail" else nxt["value"], nxt.get("step"))
                    nxt["told"] = self._events
                    self._events += 1
                    continue
            rec = asks[asked]
            check_params(rec["params"], self._distributions)
            self._study.enqueue_trial(rec["params"])
            rec["number"] = self._ask(asked, self._points[asked] if asked < len(self._points) else {}).number
            asked += 1


def sampled_domains(space: Any, searcher: str) -> dict[str, tuple[tuple, Domain]]:
    """Flattened name → ``(path, domain)`` of each sampled parameter of ``space`` (a parsed space).

    Raises:
        ValueError: a ``grid_search`` (its path named), which ``searcher`` does not support.
    """
    domains: dict[str, tuple[tuple, Domain]] = {}
    for path, node in find_domains(space):
        if is_grid(node):
            raise ValueError(f"{_dotted(path)}: {searcher} search does not support grid_search")
        domains[_flat_name(path)] = (path, node)
    return domains


def point_params(point: dict, domains: dict[str, tuple[tuple, Domain]]) -> dict:
    """Optuna's parameters of a ``points_to_evaluate`` config (full or partial, nested or by flattened path).

    Raises:
        ValueError: a key that is not a sampled parameter, or a value outside its domain.
    """

    def flatten(node: dict, prefix: tuple) -> dict:
        flat: dict = {}
        for key, value in node.items():
            name = _flat_name(prefix + (key,))
            if isinstance(value, dict) and name not in domains:
                flat.update(flatten(value, prefix + (key,)))
            else:
                flat[name] = value
        return flat

    flat = flatten(point, ())
    unknown = sorted(set(flat) - set(domains))
    if unknown:
        raise ValueError(f"points_to_evaluate: {', '.join(unknown)} not sampled parameters of the space")
    return {name: _to_internal(domains[name][1], value, name) for name, value in flat.items()}


def check_params(params: dict, distributions: dict[str, BaseDistribution]) -> None:
    """Check a trial's journaled parameters against the space's distributions.

    Raises:
        ValueError: they do not fit (a spec edit changed the space).
    """
    if set(params) != set(distributions) or not all(
        d._contains(d.to_internal_repr(params[name])) for name, d in distributions.items()
    ):
        raise ValueError(f"a trial's parameters {params!r} do not fit the space")


def trial_seed(seed: int, number: int) -> int:
    """The 32-bit seed of suggestion ``number`` under the searcher's ``seed``: a hash, so it never depends on
    what was drawn before it."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:4], "big")


def _encode(value: float | list[float] | None) -> Any:
    return [encode_number(v) for v in value] if isinstance(value, list) else encode_number(value)


def _decode(value: Any) -> float | list[float] | None:
    return [decode_number(v) for v in value] if isinstance(value, list) else decode_number(value)
