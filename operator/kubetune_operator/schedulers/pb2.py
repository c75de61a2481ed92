"""The ``pb2`` scheduler: Population Based Bandits (Ray's ``PB2``), PBT whose explore step is a GP bandit.

Owns :class:`PB2`. Algorithm: Parker-Holder et al., "Provably Efficient Online Hyperparameter Optimization
with Population-Based Bandits" (NeurIPS 2020); parameters, data and steps as Ray Tune 2.x ``schedulers/pb2.py``
(asynchronous). Created through ``kubetune_operator.algorithms.create_scheduler``. Who decides what:

- exploit, as :class:`~kubetune_operator.schedulers.pbt.PopulationBasedTraining`: at a perturbation-time result
  a bottom-quantile trial pauses to continue from a top trial's checkpoint; its new config is left open;
- explore, off the event loop: the controller takes :meth:`PB2.next_exploration` (a job for
  :func:`kubetune_operator.schedulers.pb2_gp.select`, run in a worker process by
  :mod:`kubetune_operator.explore_pool`) and journals its outcome as an ``explored`` entry, which calls
  :meth:`PB2.explored`; the trial's next attempt starts then. Jobs are taken one at a time in the order the
  exploits were decided, each on the data as they were at its exploit (later results are not in it), so the
  choices are those Ray makes synchronously, whatever the timing and across operator restarts.

Ray draws the acquisition's random starts from NumPy's global generator; here each exploit has its own seed,
from ``(seed, trial, its perturbation number)``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import math
import random
from typing import Annotated, Any

from pydantic import Field, StrictInt

from kubetune.resultkeys import flatten, is_number
from kubetune_operator.params import Flag, Number, Positive, checked
from kubetune_operator.schedulers.pbt import PopulationBasedTraining
from kubetune_operator.searchers.base import decode_number, encode_number

__all__ = ["PB2"]


def _flat_bounds(bounds: Any, path: str = "") -> dict[str, tuple[float, float]]:
    """``{"a": {"b": [lo, hi]}}`` → ``{"a/b": (lo, hi)}`` (Ray's ``flatten_dict``), checked."""
    if not isinstance(bounds, dict) or not bounds:
        raise ValueError(f"hyperparam_bounds{path and '.' + path} must be a non-empty object of key -> [low, high]")
    flat = {}
    for key, value in bounds.items():
        where = f"{path}/{key}" if path else str(key)
        if isinstance(value, dict):
            flat.update(_flat_bounds(value, where))
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value):
            if not (math.isfinite(value[0]) and math.isfinite(value[1]) and value[0] <= value[1]):
                raise ValueError(f"hyperparam_bounds.{where.replace('/', '.')}: give finite [low, high], low <= high")
            flat[where] = (float(value[0]), float(value[1]))
        else:
            raise ValueError(
                f"hyperparam_bounds.{where.replace('/', '.')}: give [low, high] (two numbers) or a nested object"
            )
    return flat


def _set_path(config: dict, path: str, value: Any) -> None:
    *parents, last = path.split("/")
    for key in parents:
        config = config.setdefault(key, {})
    config[last] = value


class PB2(PopulationBasedTraining):
    """Ray's asynchronous ``PB2`` as a restart-safe operator scheduler.

    Args:
        metric: result key to optimize.
        mode: ``"min"`` or ``"max"``.
        time_attr: result key of progress, e.g. ``"training_iteration"``.
        perturbation_interval: perturb at most every this much ``time_attr``, > 0.
        hyperparam_bounds: key → ``[low, high]`` (numbers), or a nested object of those: the box the GP
            bandit chooses in. A key a trial's config lacks is sampled uniformly from its bounds when the
            trial is created (:meth:`fill_config`, as Ray's ``on_trial_add``).
        quantile_fraction: top and bottom fraction, 0..0.5.
        log_config: as PBT's: whether exploited trials write ``pbt_policy_<trial>.txt`` and ``pbt_global.txt``.
        require_attrs: as PBT's.
        synch: must be False (kubetune runs PB2 asynchronously).
        seed: seeds the donor choices, the filled values and the acquisition's random starts.

    Raises:
        ValueError: a bad parameter (the message names it).
        ImportError: scikit-learn is not installed (the operator's ``pb2`` extra).
    """

    @checked
    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "time_total_s",
        perturbation_interval: Positive = 60.0,
        hyperparam_bounds: dict | None = None,
        quantile_fraction: Annotated[Number, Field(ge=0, le=0.5)] = 0.25,
        log_config: Flag = True,
        require_attrs: Flag = True,
        synch: Flag = False,
        seed: StrictInt = 0,
    ):
        if synch:
            raise ValueError("synch=True is not supported by PB2: kubetune runs PB2 asynchronously")
        if importlib.util.find_spec("sklearn") is None:
            raise ImportError("PB2 needs scikit-learn (install kubetune-operator[pb2])")
        self.bounds = _flat_bounds(hyperparam_bounds)
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            perturbation_interval=perturbation_interval,
            hyperparam_mutations={key: list(value) for key, value in self.bounds.items()},
            quantile_fraction=quantile_fraction,
            resample_probability=0.0,
            log_config=log_config,
            require_attrs=require_attrs,
            seed=seed,
        )
        # The data, in order: ["row", trial, time, [values], reward] per perturbation-time result, and
        # ["explore", trial, donor, seed, outcome] per exploit (outcome None until explored(): then its row and
        # the trial's new config).
        self._log: list[list] = []
        self._first: dict[str, dict] = {}  # each trial's config before any exploit
        self._open = 0  # index in _log of the first exploit not yet explored
        self._current: list[list[float]] | None = None  # values chosen since the data's latest time
        self._explored_at = 0.0  # the data's latest time when _current began (Ray's last_exploration_time)

    def fill_config(self, trial_id: str, config: dict) -> dict:
        """``config`` with every bounded key it lacks sampled uniformly from its bounds (Ray's ``_fill_config``),
        the same for the same trial and seed."""
        flat, filled = flatten(config), copy.deepcopy(config)
        rng = random.Random(f"{self.seed}:{trial_id}:fill")
        for key, (low, high) in self.bounds.items():
            if key not in flat:
                _set_path(filled, key, rng.uniform(low, high))
        return filled

    def set_trial_config(self, trial_id: str, config: dict) -> None:
        """The config ``trial_id`` was created with."""
        super().set_trial_config(trial_id, config)
        self._first.setdefault(trial_id, copy.deepcopy(config))

    def sampled(self, trial_id: str, config: dict) -> None:
        super().sampled(trial_id, config)
        self._first[trial_id] = copy.deepcopy(config)

    def _config_before(self, trial_id: str, end: int) -> dict:
        """``trial_id``'s config as of ``_log[:end]``: its last exploit's there, else its first."""
        for entry in reversed(self._log[:end]):
            if entry[0] == "explore" and entry[1] == trial_id and entry[4] is not None:
                return copy.deepcopy(entry[4]["config"])
        return copy.deepcopy(self._first.get(trial_id) or {})

    def _values_of(self, config: dict) -> list[float] | None:
        flat = flatten(config)
        values = [flat.get(key) for key in self.bounds]
        return [float(v) for v in values] if all(is_number(v) and math.isfinite(v) for v in values) else None

    def _record(self, trial_id: str, time: float, score: float) -> None:
        values = self._values_of(self._configs.get(trial_id) or {})
        if values is not None:  # a config without a number for every bound cannot be fitted (docs/ray-tune.md)
            self._log.append(["row", trial_id, float(time), values, score])

    def _new_config(
        self, trial_id: str, donor: str, donor_config: dict, rng: random.Random, in_pod: list
    ) -> tuple[None, dict]:
        digest = hashlib.sha256(f"{self.seed}:{trial_id}:{self._state[trial_id][4]}".encode()).digest()
        self._log.append(["explore", trial_id, donor, int.from_bytes(digest[:4], "big"), None])
        return None, {}

    def _rows(self, end: int) -> list[list]:
        """The data of ``_log[:end]``: its rows and the rows of its exploits (``[trial, time, values, reward]``)."""
        rows = []
        for entry in self._log[:end]:
            if entry[0] == "row":
                rows.append(entry[1:])
            elif entry[4] is not None and entry[4].get("row"):
                rows.append(entry[4]["row"])
        return rows

    def _next_open(self) -> int | None:
        """The index in ``_log`` of the oldest exploit not explored yet (``_open`` moves up to it), or None."""
        while self._open < len(self._log) and (self._log[self._open][0] == "row" or self._log[self._open][4]):
            self._open += 1
        return self._open if self._open < len(self._log) else None

    def next_exploration(self) -> dict | None:
        """The oldest exploit whose config is not chosen yet, as a job for
        :func:`~kubetune_operator.schedulers.pb2_gp.select` plus ``"trial"``; None when there is none."""
        index = self._next_open()
        if index is None:
            return None
        _, trial, donor, seed, _ = self._log[index]
        rows = self._rows(index)
        latest = max((row[1] for row in rows), default=0.0)
        return {
            "trial": trial,
            "donor": donor,
            "rows": rows,
            "bounds": [list(bound) for bound in self.bounds.values()],
            "current": None if latest > self._explored_at else self._current,
            "seed": seed,
        }

    def explored(self, trial_id: str, outcome: dict) -> dict:
        """Take the outcome of the job :meth:`next_exploration` gave for ``trial_id``.

        Args:
            outcome: :func:`~kubetune_operator.schedulers.pb2_gp.select`'s result, or ``{"error": str}``
                when it failed: then, as when the donor has no data yet, the donor's config is kept.

        Returns:
            ``{"config": the trial's new config, "donorConfig": the donor's config it was made from}`` (the
            donor's as of this exploit, its earlier exploits explored, as Ray's were).

        Raises:
            ValueError: ``trial_id`` is not the trial of the oldest open exploit.
        """
        index = self._next_open()
        if index is None or self._log[index][1] != trial_id:
            raise ValueError(f"no open PB2 exploit of {trial_id!r} is next")
        entry = self._log[index]
        donor_config = self._config_before(entry[2], index)
        config = copy.deepcopy(donor_config)
        values = outcome.get("values")
        if values is None:  # Ray: the donor's config, and no row
            values = self._values_of(config)
            entry[4] = {"row": None, "config": config}
        else:
            flat = flatten(donor_config)
            for key, value in zip(self.bounds, values):
                _set_path(config, key, int(value) if isinstance(flat.get(key), int) else value)
            values = self._values_of(config)
            entry[4] = {"row": [trial_id, outcome["time"], values, outcome["reward"]], "config": config}
        latest = max((row[1] for row in self._rows(index)), default=0.0)
        if values is not None:
            if latest > self._explored_at or self._current is None:
                self._explored_at, self._current = max(latest, self._explored_at), [values]
            else:
                self._current.append(values)
        self._configs[trial_id] = config
        self._open += 1
        return {"config": copy.deepcopy(config), "donorConfig": donor_config}

    def get_state(self) -> dict:
        """PBT's state plus ``"log"`` (rewards encoded), ``"first"``, ``"current"`` and ``"exploredAt"``."""
        state = super().get_state()
        state["log"] = [
            ["row", *e[1:4], encode_number(e[4])]
            if e[0] == "row"
            else [*e[:4], None if e[4] is None else copy.deepcopy(e[4])]
            for e in self._log
        ]
        state["first"] = copy.deepcopy(self._first)
        state["current"], state["exploredAt"] = copy.deepcopy(self._current), self._explored_at
        return state

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output."""
        super().set_state(state)
        self._log = [
            ["row", *e[1:4], decode_number(e[4])] if e[0] == "row" else [*e[:4], copy.deepcopy(e[4])]
            for e in state["log"]
        ]
        self._first = copy.deepcopy(state["first"])
        self._current, self._explored_at, self._open = copy.deepcopy(state["current"]), state["exploredAt"], 0
