"""The ``pbt`` scheduler: Population Based Training (Ray's ``PopulationBasedTraining``, asynchronous), and
``pbt_replay``, which replays one trial's policy.

Owns :class:`PopulationBasedTraining`, :func:`explore` and :class:`PopulationBasedTrainingReplay`.
Algorithm: Jaderberg et al., "Population Based Training of Neural Networks" (2017); parameters,
quantiles, exploit and explore rules as Ray Tune 2.x ``schedulers/pbt.py`` with ``synch=False``. Created through
``kubetune_operator.algorithms.create_scheduler``; the collector calls ``on_trial_result`` for every
result, and the controller takes each exploit (:meth:`PopulationBasedTraining.take_exploit`) to
restart the trial from the donor's checkpoint with the explored config (docs/ray-tune.md, PBT).

Every ``perturbation_interval`` of ``time_attr`` (after ``burn_in_period``) a trial's result is
ranked among the live trials' last perturbation scores: a trial in the top ``quantile_fraction``
is told to checkpoint (``checkpoint``, Ray saves it then), one in the bottom quantile copies a
random top trial: it is paused, and its next attempt restores that trial's checkpoint with the
donor's config explored. Random choices use an RNG seeded by ``(seed, trial, its perturbation
number)``, never a shared stream, so a restarted operator that replays its journal decides the same.
"""

from __future__ import annotations

import bisect
import copy
import math
import random
from typing import Annotated, Any

from pydantic import Field, StrictInt

from kubetune.resultkeys import check_mode, is_number
from kubetune.search import Domain, parse_space
from kubetune_operator.params import Flag, NonNegative, Number, Positive, checked
from kubetune_operator.schedulers.base import CHECKPOINT, CONTINUE, PAUSE, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["PopulationBasedTraining", "PopulationBasedTrainingReplay", "explore"]


def explore(
    config: dict, mutations: dict, resample_probability: float, perturbation_factors: list[float], rng: random.Random
) -> tuple[dict, dict]:
    """Ray's explore step: return ``(new config, operations)`` from ``config`` and ``mutations``.

    Per key of ``mutations``: a nested dict recurses; a list resamples (probability
    ``resample_probability``, or when the current value is not in it) or moves one step left or
    right, clamped at the ends; a domain resamples (same probability) or multiplies the value by a
    factor of ``perturbation_factors``, keeping ``int`` values ``int``. A key the config lacks is
    sampled.

    Args:
        config: the donor's config (not modified).
        mutations: ``hyperparam_mutations`` with :class:`Domain` objects (parsed).
        resample_probability: 0..1.
        perturbation_factors: factors, e.g. ``[1.2, 0.8]``.
        rng: the random source.

    Returns:
        The new config and ``{key: "resample" | "shift left" | "shift right (noop)" | "* 1.2" ...}``.
    """
    new, operations = copy.deepcopy(config), {}
    for key, distribution in mutations.items():
        if isinstance(distribution, dict):
            new[key], operations[key] = explore(
                config.get(key) or {}, distribution, resample_probability, perturbation_factors, rng
            )
        elif isinstance(distribution, list):
            if key not in config or rng.random() < resample_probability or config[key] not in distribution:
                new[key], operations[key] = rng.choice(distribution), "resample"
            else:
                shift = rng.choice([-1, 1])
                old = distribution.index(config[key])
                index = min(max(old + shift, 0), len(distribution) - 1)
                new[key] = distribution[index]
                operations[key] = f"shift {'left' if shift == -1 else 'right'}{' (noop)' if index == old else ''}"
        else:
            if key not in config or not is_number(config[key]) or rng.random() < resample_probability:
                new[key], operations[key] = distribution.sample(random_state=rng), "resample"
            else:
                factor = rng.choice(perturbation_factors)
                value = config[key] * factor
                new[key] = int(value) if isinstance(config[key], int) else value
                operations[key] = f"* {factor}"
    return new, operations


def _parse_mutations(mutations: Any, path: str = "hyperparam_mutations") -> dict:
    if not isinstance(mutations, dict) or not mutations:
        raise ValueError(f"{path} must be a non-empty object of key -> list, domain or nested object")
    parsed = {}
    for key, value in mutations.items():
        where = f"{path}.{key}"
        domain = parse_space(value, where)
        if isinstance(domain, Domain) and domain.name != "sample_from":
            parsed[key] = domain
        elif isinstance(value, list) and value:
            parsed[key] = list(value)
        elif isinstance(value, dict) and value:
            parsed[key] = _parse_mutations(value, where)
        else:
            raise ValueError(
                f'{where}: give a list of values, a domain such as {{"uniform": [0, 1]}} or a nested object'
            )
    return parsed


class PopulationBasedTraining(TrialScheduler):
    """Ray's asynchronous ``PopulationBasedTraining`` as a restart-safe operator scheduler.

    Args:
        metric: result key to optimize.
        mode: ``"min"`` or ``"max"``.
        time_attr: result key of progress, e.g. ``"training_iteration"``.
        perturbation_interval: perturb at most every this much ``time_attr``, > 0.
        burn_in_period: no perturbation before this ``time_attr``.
        hyperparam_mutations: key → list of values, a domain (``{"uniform": [a, b]}``) or a nested
            object of those.
        quantile_fraction: top and bottom fraction, 0..0.5.
        resample_probability: 0..1.
        perturbation_factors: two or more positive factors (Ray's ``(1.2, 0.8)``).
        require_attrs: as Ray's; a result without ``time_attr`` or the metric is skipped either way
            (Ray raises when True; the operator never fails on a result).
        synch: must be False (synchronous PBT waits for the whole population, which kubetune's
            one-pod-per-trial scheduling does not do yet).
        seed: seeds the random choices (donor, explore), with the trial and its perturbation number.

    Raises:
        ValueError: a bad parameter (the message names it).
    """

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "time_total_s",
        perturbation_interval: Positive = 60.0,
        burn_in_period: NonNegative = 0.0,
        hyperparam_mutations: dict | None = None,
        quantile_fraction: Annotated[Number, Field(ge=0, le=0.5)] = 0.25,
        resample_probability: Annotated[Number, Field(ge=0, le=1)] = 0.25,
        perturbation_factors: Annotated[tuple[Positive, ...], Field(min_length=2)] = (1.2, 0.8),
        require_attrs: Flag = True,
        synch: Flag = False,
        seed: StrictInt = 0,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        factors = list(perturbation_factors)
        if synch:
            raise ValueError("synch=True is not supported: kubetune runs PBT asynchronously (synch=False)")
        self.time_attr, self.interval, self.burn_in = time_attr, perturbation_interval, burn_in_period
        self.mutations = _parse_mutations(hyperparam_mutations)
        self.quantile_fraction, self.resample_probability = quantile_fraction, resample_probability
        self.factors, self.require_attrs, self.seed = factors, require_attrs, seed
        # trial -> [last_perturbation_time, last_train_time, last_score, last_checkpoint iteration, perturbations]
        self._state: dict[str, list] = {}
        self._finished: set[str] = set()
        self._exploits: dict[str, dict] = {}
        self._configs: dict[str, dict] = {}  # each trial's current config: its first, then each exploit's
        self._order: dict[str, int] = {}  # trial -> when it was added: ties rank in that order, as Ray's stable sort
        self._ranked: list[tuple[float, int, str]] = []  # (score, order, trial) of live trials with a score
        self.num_perturbations = 0

    def on_trial_add(self, trial_id: str) -> None:
        if trial_id not in self._state:
            self._state[trial_id] = [0.0, 0.0, None, None, 0]
            self._order[trial_id] = len(self._order)

    def _unrank(self, trial_id: str) -> None:
        score = self._state[trial_id][2]
        if score is not None and trial_id not in self._finished:
            entry = (self._key(score), self._order[trial_id], trial_id)
            del self._ranked[bisect.bisect_left(self._ranked, entry)]

    @staticmethod
    def _key(score: float) -> float:
        return -math.inf if math.isnan(score) else score  # NaN ranks worst

    def set_trial_config(self, trial_id: str, config: dict) -> None:
        """The config ``trial_id`` was created with (results reach the operator without it)."""
        self._configs.setdefault(trial_id, copy.deepcopy(config))

    def _quantiles(self) -> tuple[list[str], list[str]]:
        """Ray's ``_quantiles``: (bottom, top) of the live trials with a score, worst first. The ranking is
        kept sorted as scores change (O(log n) per result instead of a sort per perturbation)."""
        count = len(self._ranked)
        if count <= 1:
            return [], []
        size = int(math.ceil(count * self.quantile_fraction))
        if size > count / 2:
            size = int(math.floor(count / 2))
        return [t for _, _, t in self._ranked[:size]], [t for _, _, t in self._ranked[count - size :]]

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        self.on_trial_add(trial_id)
        time, value = result.get(self.time_attr), result.get(self.metric)
        if not is_number(time) or not is_number(value):
            return CONTINUE
        state = self._state[trial_id]
        if time < self.burn_in or time - state[0] < self.interval:
            return CONTINUE
        self._unrank(trial_id)
        state[1], state[2], state[0] = time, self._metric_op * value, time
        self._record(trial_id, time, state[2])
        if trial_id not in self._finished:
            bisect.insort(self._ranked, (self._key(state[2]), self._order[trial_id], trial_id))
        lower, upper = self._quantiles()
        decision = CONTINUE
        if trial_id in upper:
            state[3] = result.get("training_iteration")
            decision = CHECKPOINT
        else:
            state[3] = None
        if trial_id in lower:
            rng = random.Random(f"{self.seed}:{trial_id}:{state[4]}")
            donor = rng.choice(upper)
            donor_state = self._state[donor]
            if donor_state[3] is None:
                return decision  # Ray: no checkpoint of the donor yet, no exploit
            config = self._configs.get(trial_id, {})
            donor_config = self._configs.get(donor, {})
            new_config, operations = self._new_config(trial_id, donor, donor_config, rng)
            self._exploits[trial_id] = {
                "donor": donor,
                "iteration": donor_state[3],
                "config": new_config,
                "oldConfig": config,
                "donorConfig": donor_config,
                "operations": operations,
                "trialIteration": result.get("training_iteration", 0),
            }
            state[0], state[1], state[4] = donor_state[0], donor_state[1], state[4] + 1
            if new_config is not None:
                self._configs[trial_id] = new_config
            self.num_perturbations += 1
            return PAUSE
        return decision

    def _record(self, trial_id: str, time: float, score: float) -> None:
        """A perturbation-time result of ``trial_id`` (``score``: the metric, higher is better); PB2 keeps them."""

    def _new_config(
        self, trial_id: str, donor: str, donor_config: dict, rng: random.Random
    ) -> tuple[dict | None, dict]:
        """The config ``trial_id`` continues with after exploiting ``donor``, and the explore operations;
        a None config is chosen later (PB2, :meth:`kubetune_operator.schedulers.pb2.PB2.explored`)."""
        return explore(donor_config, self.mutations, self.resample_probability, self.factors, rng)

    def take_exploit(self, trial_id: str) -> dict | None:
        """The exploit decided for ``trial_id`` by its last result, once (then forgotten): ``{"donor",
        "iteration" (of the donor's checkpoint), "config" (explored; None while PB2 has yet to choose it),
        "oldConfig", "donorConfig", "operations", "trialIteration" (of the exploited trial's result)}``; None
        when that result did not exploit."""
        return self._exploits.pop(trial_id, None)

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        self.on_trial_remove(trial_id)

    def on_trial_remove(self, trial_id: str) -> None:
        if trial_id in self._state:
            self._unrank(trial_id)
        self._finished.add(trial_id)

    def get_state(self) -> dict:
        """``{"trials": {trial: [...]}, "configs", "finished", "num_perturbations"}`` (scores encoded)."""
        return {
            "trials": {
                t: [s[0], s[1], None if s[2] is None else encode_number(s[2]), s[3], s[4]]
                for t, s in self._state.items()
            },
            "configs": copy.deepcopy(self._configs),
            "finished": sorted(self._finished),
            "num_perturbations": self.num_perturbations,
        }

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output."""
        self._state = {
            t: [s[0], s[1], None if s[2] is None else decode_number(s[2]), s[3], s[4]]
            for t, s in state["trials"].items()
        }
        self._order = {t: i for i, t in enumerate(self._state)}  # the state keeps the order trials were added
        self._configs = copy.deepcopy(state["configs"])
        self._finished = set(state["finished"])
        self._ranked = sorted(
            (self._key(s[2]), self._order[t], t)
            for t, s in self._state.items()
            if s[2] is not None and t not in self._finished
        )
        self.num_perturbations = state["num_perturbations"]


class PopulationBasedTrainingReplay(TrialScheduler):
    """Replays a PBT trial's policy on a new trial (Ray's ``PopulationBasedTrainingReplay``).

    At each step of the policy the trial is paused and goes on from its own checkpoint with that
    step's config, through the same exploit mechanism as :class:`PopulationBasedTraining` (the donor
    is the trial itself). The SDK's ``PopulationBasedTrainingReplay(policy_file)`` reads a
    ``pbt_policy_<trial>.txt`` and gives the experiment the policy's first config.

    Args:
        metric, mode: unused (accepted because every scheduler gets the experiment's).
        policy: ``[[step, config], ...]``, steps increasing: from ``time_attr`` ``step`` on, ``config``.
        time_attr: result key of progress (Ray's replay uses ``training_iteration``).

    Raises:
        ValueError: a malformed policy.
    """

    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        policy: list | None = None,
        time_attr: str = "training_iteration",
    ):
        super().__init__(metric, mode)
        if (
            not isinstance(policy, list)
            or not policy
            or not all(
                isinstance(p, list) and len(p) == 2 and is_number(p[0]) and isinstance(p[1], dict) for p in policy
            )
        ):
            raise ValueError("policy must be a non-empty list of [step, config] pairs")
        if any(b[0] < a[0] for a, b in zip(policy, policy[1:])):
            raise ValueError("policy steps must not decrease")
        self.policy, self.time_attr = policy, time_attr
        self._next: dict[str, int] = {}
        self._configs: dict[str, dict] = {}
        self._exploits: dict[str, dict] = {}

    def on_trial_add(self, trial_id: str) -> None:
        self._next.setdefault(trial_id, 0)

    def set_trial_config(self, trial_id: str, config: dict) -> None:
        """The config ``trial_id`` was created with."""
        self._configs.setdefault(trial_id, copy.deepcopy(config))

    def on_trial_result(self, trial_id: str, result: dict) -> str:
        self.on_trial_add(trial_id)
        step, index = result.get(self.time_attr), self._next[trial_id]
        if self.metric and not is_number(result.get(self.metric)):
            return CONTINUE  # as every scheduler here: a result without the experiment's metric is skipped
        if not is_number(step) or index >= len(self.policy) or step < self.policy[index][0]:
            return CONTINUE
        while index + 1 < len(self.policy) and self.policy[index + 1][0] <= step:
            index += 1  # steps passed at once: the latest config among them
        self._next[trial_id] = index + 1
        old, new = self._configs.get(trial_id, {}), copy.deepcopy(self.policy[index][1])
        iteration = result.get("training_iteration", 0)
        self._exploits[trial_id] = {
            "donor": trial_id,
            "iteration": iteration,
            "config": new,
            "oldConfig": old,
            "donorConfig": old,
            "operations": {},
            "trialIteration": iteration,
        }
        self._configs[trial_id] = new
        return PAUSE

    def take_exploit(self, trial_id: str) -> dict | None:
        """As :meth:`PopulationBasedTraining.take_exploit`; the donor is the trial itself."""
        return self._exploits.pop(trial_id, None)

    def get_state(self) -> dict:
        """``{"next": {trial: policy index}, "configs": {trial: config}}``."""
        return {"next": dict(self._next), "configs": copy.deepcopy(self._configs)}

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output."""
        self._next, self._configs = dict(state["next"]), copy.deepcopy(state["configs"])
