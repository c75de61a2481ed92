"""The ``pbt`` scheduler: Population Based Training (Ray's ``PopulationBasedTraining``, asynchronous), and
``pbt_replay``, which replays one trial's policy.

Owns :class:`PopulationBasedTraining`, :func:`explore`, :class:`PodFunction` and
:class:`PopulationBasedTrainingReplay`. Algorithm: Jaderberg et al., "Population Based Training of Neural
Networks" (2017); parameters, quantiles, exploit and explore rules as Ray Tune 2.x ``schedulers/pbt.py``,
asynchronous or synchronous (``synch``). Created through
``kubetune_operator.algorithms.create_scheduler``; the collector calls ``on_trial_result`` for every
result, and the controller takes each exploit (:meth:`PopulationBasedTraining.take_exploit`) to
restart the trial from the donor's checkpoint with the explored config (docs/ray-tune.md, PBT).

Every ``perturbation_interval`` of ``time_attr`` (after ``burn_in_period``) a trial's result is
ranked among the live trials' last perturbation scores: a trial in the top ``quantile_fraction``
is told to checkpoint (``checkpoint``, Ray saves it then), one in the bottom quantile copies a
random top trial: it is paused, and its next attempt restores that trial's checkpoint with the
donor's config explored. Random choices use an RNG seeded by ``(seed, trial, its perturbation
number)``, never a shared stream, so a restarted operator that replays its journal decides the same.

User code never runs here: a function in ``hyperparam_mutations`` or a ``custom_explore_fn`` is a pickle in
storage (:class:`PodFunction`). The operator decides which keys are resampled and which perturbed; the
exploit then carries an ``explore`` instruction that the exploited trial's pod carries out before it restores
the donor's checkpoint, and the config the pod reports comes back through the controller's journaled
``explored`` entry (:meth:`PopulationBasedTraining.explored`).
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
from kubetune.shipping import FUNCTION_KEY
from kubetune_operator.params import Flag, NonNegative, Number, Positive, checked
from kubetune_operator.schedulers.base import CHECKPOINT, CONTINUE, PAUSE, Exploit, TrialScheduler
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["PodFunction", "PopulationBasedTraining", "PopulationBasedTrainingReplay", "explore", "pod_function"]


class PodFunction:
    """A user function of ``hyperparam_mutations`` or ``custom_explore_fn``: the SDK pickled it to storage
    (``{"kubetune/pickled_function": uri}``); only the exploited trial's pod calls it.

    Attributes:
        uri: where the pickle is.
    """

    def __init__(self, uri: str):
        self.uri = uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PodFunction) and other.uri == self.uri

    def __repr__(self) -> str:
        return f"PodFunction({self.uri!r})"


def pod_function(value: Any) -> PodFunction | None:
    """The :class:`PodFunction` ``value`` stands for (``{FUNCTION_KEY: uri}``), or None."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(FUNCTION_KEY), str):
        return PodFunction(value[FUNCTION_KEY])
    return None


def explore(
    config: dict,
    mutations: dict,
    resample_probability: float,
    perturbation_factors: list[float],
    rng: random.Random,
    in_pod: list | None = None,
    path: tuple = (),
) -> tuple[dict, dict]:
    """Ray's explore step: return ``(new config, operations)`` from ``config`` and ``mutations``.

    Per key of ``mutations``: a nested dict recurses; a list resamples (probability
    ``resample_probability``, or when the current value is not in it) or moves one step left or
    right, clamped at the ends; a domain or a :class:`PodFunction` resamples (same probability) or
    multiplies the value by a factor of ``perturbation_factors``, keeping ``int`` values ``int``. A key the
    config lacks is sampled. A :class:`PodFunction` to resample keeps the key's value here and is
    appended to ``in_pod`` as ``{"path": [key, ...], "function": uri, "int": bool}``: the exploited
    trial's pod calls it (:mod:`kubetune.runtime.pbt_explore`).

    Args:
        config: the donor's config (not modified).
        mutations: ``hyperparam_mutations`` with :class:`Domain` objects (parsed).
        resample_probability: 0..1.
        perturbation_factors: factors, e.g. ``[1.2, 0.8]``.
        rng: the random source.
        in_pod: collects the resamples left to the pod; None: ``mutations`` has no :class:`PodFunction`.
        path: the keys of ``config`` within the trial's config (nested mutations).

    Returns:
        The new config and ``{key: "resample" | "shift left" | "shift right (noop)" | "* 1.2" ...}``.
    """
    new, operations = copy.deepcopy(config), {}
    for key, distribution in mutations.items():
        if isinstance(distribution, dict):
            new[key], operations[key] = explore(
                config.get(key) or {},
                distribution,
                resample_probability,
                perturbation_factors,
                rng,
                in_pod,
                (*path, key),
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
                operations[key] = "resample"
                if isinstance(distribution, PodFunction):
                    in_pod.append(
                        {"path": [*path, key], "function": distribution.uri, "int": type(config.get(key)) is int}
                    )
                else:
                    new[key] = distribution.sample(random_state=rng)
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
        function = pod_function(value)
        if function is not None:
            parsed[key] = function
            continue
        domain = parse_space(value, where)
        if isinstance(domain, Domain) and domain.name != "sample_from":
            parsed[key] = domain
        elif isinstance(value, list) and value:
            parsed[key] = list(value)
        elif isinstance(value, dict) and value:
            parsed[key] = _parse_mutations(value, where)
        else:
            raise ValueError(
                f'{where}: give a list of values, a domain such as {{"uniform": [0, 1]}}, a function (the SDK '
                "ships it to the trial pods) or a nested object"
            )
    return parsed


class PopulationBasedTraining(TrialScheduler):
    """Ray's ``PopulationBasedTraining`` (asynchronous, or synchronous with ``synch``) as a restart-safe
    operator scheduler.

    Args:
        metric: result key to optimize.
        mode: ``"min"`` or ``"max"``.
        time_attr: result key of progress, e.g. ``"training_iteration"``.
        perturbation_interval: perturb at most every this much ``time_attr``, > 0.
        burn_in_period: no perturbation before this ``time_attr``.
        hyperparam_mutations: key → list of values, a domain (``{"uniform": [a, b]}``), a user function
            (``{"kubetune/pickled_function": uri}``, which the exploited trial's pod calls) or a nested
            object of those.
        quantile_fraction: top and bottom fraction, 0..0.5.
        resample_probability: 0..1.
        perturbation_factors: two or more positive factors (Ray's ``(1.2, 0.8)``).
        custom_explore_fn: a user function (``{"kubetune/pickled_function": uri}``) the exploited trial's
            pod applies to the explored config, or None.
        log_config: whether exploited trials write ``pbt_policy_<trial>.txt`` and ``pbt_global.txt``.
        require_attrs: as Ray's: with True, a result without ``time_attr`` or the metric fails the
            experiment (the controller reads :attr:`required_attrs`); with False one without ``time_attr``
            is skipped (one without the metric still fails it: Ray's strict metric check).
        synch: Ray's synchronous PBT: every trial pauses at each perturbation interval until every trial
            still live (and, unlike Ray's, every trial the searcher will create) has reached it, then all
            are ranked and exploit together.
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
        custom_explore_fn: dict | None = None,
        log_config: Flag = True,
        require_attrs: Flag = True,
        synch: Flag = False,
        seed: StrictInt = 0,
    ):
        check_mode(metric, mode, required=True)
        super().__init__(metric, mode)
        self.custom_explore_fn = pod_function(custom_explore_fn) if custom_explore_fn is not None else None
        if custom_explore_fn is not None and self.custom_explore_fn is None:
            raise ValueError('custom_explore_fn: give {"kubetune/pickled_function": uri} (the SDK ships the function)')
        self.time_attr, self.interval, self.burn_in = time_attr, perturbation_interval, burn_in_period
        if hyperparam_mutations or self.custom_explore_fn is None:  # Ray: at least one of the two
            self.mutations = _parse_mutations(hyperparam_mutations)
        else:
            self.mutations = {}
        self.quantile_fraction, self.resample_probability = quantile_fraction, resample_probability
        self.factors, self.require_attrs, self.seed = list(perturbation_factors), require_attrs, seed
        self.log_config, self.synch = log_config, synch
        # trial -> [last_perturbation_time, last_train_time, last_score, last_checkpoint iteration, perturbations]
        self._state: dict[str, list] = {}
        self._finished: set[str] = set()
        self._exploits: dict[str, Exploit] = {}
        self._configs: dict[str, dict] = {}  # each trial's current config: its first, then each exploit's
        self._order: dict[str, int] = {}  # trial -> when it was added: ties rank in that order, as Ray's stable sort
        self._ranked: list[tuple[float, int, str]] = []  # (score, order, trial) of live trials with a score
        self.num_perturbations = 0
        # synch: the time every live trial must reach before the next perturbation (Ray's _next_perturbation_sync),
        # each trial's iteration at its last perturbation-time result, and whether the searcher has finished
        self._next_sync, self._iterations, self._search_finished = float(perturbation_interval), {}, False

    @property
    def required_attrs(self) -> tuple[str, ...]:
        """Result keys every result must have (Ray's ``require_attrs``): ``time_attr`` and the metric, or none."""
        return (self.time_attr, self.metric) if self.require_attrs else ()

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

    def sampled(self, trial_id: str, config: dict) -> None:
        """``trial_id``'s config with the values its pod drew for ``sample_from`` functions: what an exploit of it
        as a donor copies, as Ray's trial config holds the values its driver drew."""
        self._configs[trial_id] = copy.deepcopy(config)

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
        state[1], state[2] = time, self._metric_op * value
        self._record(trial_id, time, state[2])
        if trial_id not in self._finished:
            bisect.insort(self._ranked, (self._key(state[2]), self._order[trial_id], trial_id))
        iteration = result.get("training_iteration")
        if self.synch:  # Ray: every trial pauses here; the last one to arrive perturbs them all
            self._iterations[trial_id] = iteration
            self._sync(time, trial_id)
            return PAUSE
        state[0] = time
        lower, upper = self._quantiles()
        return self._perturb(trial_id, lower, upper, iteration)

    def _perturb(self, trial_id: str, lower: list[str], upper: list[str], iteration: Any) -> str:
        """Ray's ``_checkpoint_or_exploit`` for ``trial_id`` at its result of ``iteration``: a top trial
        checkpoints (``checkpoint``), a bottom one exploits a random top one that has a checkpoint (``pause``)."""
        state, decision = self._state[trial_id], CONTINUE
        if trial_id in upper:
            state[3] = iteration
            decision = CHECKPOINT
        else:
            state[3] = None
        if trial_id not in lower:
            return decision
        rng = random.Random(f"{self.seed}:{trial_id}:{state[4]}")
        donor = rng.choice(upper)
        donor_state = self._state[donor]
        if donor_state[3] is None:
            return decision  # Ray: no checkpoint of the donor yet, no exploit
        config = self._configs.get(trial_id, {})
        donor_config = self._configs.get(donor, {})
        in_pod: list[dict] = []
        new_config, operations = self._new_config(trial_id, donor, donor_config, rng, in_pod)
        self._exploits[trial_id] = {
            "donor": donor,
            "iteration": donor_state[3],
            "config": new_config,
            "oldConfig": config,
            "donorConfig": donor_config,
            "operations": operations,
            "trialIteration": iteration or 0,
            "logConfig": self.log_config,
        }
        if in_pod or self.custom_explore_fn is not None:  # the trial's pod calls the user's functions
            custom = self.custom_explore_fn.uri if self.custom_explore_fn is not None else None
            self._exploits[trial_id]["explore"] = {"resample": in_pod, "customExploreFn": custom}
        state[0], state[1], state[4] = donor_state[0], donor_state[1], state[4] + 1
        if new_config is not None:
            self._configs[trial_id] = new_config
        self.num_perturbations += 1
        return PAUSE

    def _sync(self, time: float | None, arrived: str | None = None) -> None:
        """Synchronous PBT: once every live trial but ``arrived`` has reached the next sync time and the
        searcher has finished, perturb them all (top, then middle, then bottom, as Ray) at ``time`` (None:
        the latest time reached) and move the next sync time on."""
        live = [t for t in self._state if t not in self._finished]
        if not live or not self._search_finished:
            return
        if any(self._state[t][1] < self._next_sync for t in live if t != arrived):
            return
        if time is None:
            time = max(self._state[t][1] for t in live)
        lower, upper = self._quantiles()
        middle = [t for t in live if t not in lower and t not in upper]
        for trial_id in upper + middle + lower:
            self._state[trial_id][0] = time
            self._perturb(trial_id, lower, upper, self._iterations.get(trial_id))
        self._next_sync = max(self._next_sync + self.interval, max(self._state[t][1] for t in live))

    def choose_trial_to_run(self, paused_ids, search_finished: bool = False) -> str | None:
        """Ray's choice: the paused trial with the least ``time_attr`` (under ``synch``, among those behind the
        next sync time, once all were synchronized); a trial just exploited is resumed by its exploit."""
        if not self.synch:
            return super().choose_trial_to_run(paused_ids, search_finished)
        if search_finished and not self._search_finished:
            self._search_finished = True
            self._sync(None)
        candidates = [
            t for t in paused_ids if t not in self._exploits and self._state.get(t, [0.0, 0.0])[1] < self._next_sync
        ]
        return min(candidates, key=lambda t: self._state.get(t, [0.0, 0.0])[1], default=None)

    def _record(self, trial_id: str, time: float, score: float) -> None:
        """A perturbation-time result of ``trial_id`` (``score``: the metric, higher is better); PB2 keeps them."""

    def _new_config(
        self, trial_id: str, donor: str, donor_config: dict, rng: random.Random, in_pod: list
    ) -> tuple[dict | None, dict]:
        """The config ``trial_id`` continues with after exploiting ``donor``, and the explore operations
        (resamples by a user function appended to ``in_pod``); a None config is chosen later (PB2,
        :meth:`kubetune_operator.schedulers.pb2.PB2.explored`)."""
        return explore(donor_config, self.mutations, self.resample_probability, self.factors, rng, in_pod)

    def explored(self, trial_id: str, outcome: dict) -> dict:
        """The config ``trial_id``'s pod chose for its last exploit (``outcome["config"]``, its user functions
        called): the trial's config from now on, which later exploits of it as a donor explore."""
        self._configs[trial_id] = copy.deepcopy(outcome["config"])
        return {"config": copy.deepcopy(outcome["config"])}

    def take_exploit(self, trial_id: str) -> Exploit | None:
        """The exploit decided for ``trial_id`` by its last result, once (then forgotten): ``{"donor",
        "iteration" (of the donor's checkpoint), "config" (explored; None while PB2 has yet to choose it),
        "oldConfig", "donorConfig", "operations", "trialIteration" (of the exploited trial's result),
        "logConfig", and "explore" when the trial's pod must call user functions: ``{"resample": [{"path",
        "function", "int"}], "customExploreFn": uri | None}``}``; None when that result did not exploit."""
        return self._exploits.pop(trial_id, None)

    def take_exploits(self) -> dict[str, Exploit]:
        """Every exploit decided and not taken yet (synchronous PBT decides those of waiting trials), by trial."""
        exploits, self._exploits = self._exploits, {}
        return exploits

    def on_trial_complete(self, trial_id: str, result: dict | None = None) -> None:
        self.on_trial_remove(trial_id)

    def on_trial_remove(self, trial_id: str) -> None:
        if trial_id in self._state:
            self._unrank(trial_id)
        self._finished.add(trial_id)
        if self.synch:  # the trials waiting for this one go on without it
            self._sync(None)

    def get_state(self) -> dict:
        """``{"trials": {trial: [...]}, "configs", "finished", "num_perturbations", "sync": [next sync time,
        {trial: iteration}, searcher finished]}`` (scores encoded)."""
        return {
            "trials": {
                t: [s[0], s[1], None if s[2] is None else encode_number(s[2]), s[3], s[4]]
                for t, s in self._state.items()
            },
            "configs": copy.deepcopy(self._configs),
            "finished": sorted(self._finished),
            "num_perturbations": self.num_perturbations,
            "sync": [self._next_sync, dict(self._iterations), self._search_finished],
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
        if "sync" in state:
            self._next_sync, iterations, self._search_finished = state["sync"]
            self._iterations = dict(iterations)


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
        self._exploits: dict[str, Exploit] = {}

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

    def take_exploit(self, trial_id: str) -> Exploit | None:
        """As :meth:`PopulationBasedTraining.take_exploit`; the donor is the trial itself."""
        return self._exploits.pop(trial_id, None)

    def get_state(self) -> dict:
        """``{"next": {trial: policy index}, "configs": {trial: config}}``."""
        return {"next": dict(self._next), "configs": copy.deepcopy(self._configs)}

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output."""
        self._next, self._configs = dict(state["next"]), copy.deepcopy(state["configs"])
