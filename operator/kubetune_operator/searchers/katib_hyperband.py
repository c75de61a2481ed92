"""The ``katib-hyperband`` searcher: Katib's ``hyperband`` algorithm, a searcher that runs every trial from scratch.

Owns :class:`KatibHyperBand`. Katib's hyperband (``pkg/suggestion/v1beta1/hyperband/service.py``; Li et al.,
"Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization", JMLR 18(185), 2018) is not Ray's
``HyperBandScheduler``, which pauses trials and resumes them from checkpoints: it gives each trial a budget in one
parameter of the config (``resource_name``, e.g. the number of epochs), and each trial runs from its start with it.
A bracket's first rung is new configs drawn from the space; once every trial of a rung has ended, the next rung
copies the best ``ceil(n_i / eta)`` configs with the next, larger, resource value; after the last rung of the last
bracket the search is finished. The plan's numbers come from :mod:`kubetune.search.katib_hyperband`; new configs
are the basic searcher's draws (:class:`kubetune.search.VariantSpace`, variant ``k`` for the ``k``-th new config).

Each suggestion is a function of the seed, the order of the calls and the results the ended trials gave, so
replaying the journal after an operator restart (or loading a snapshot's :meth:`KatibHyperBand.get_state`)
rebuilds the same state and no config is drawn twice. Created through
``kubetune_operator.algorithms.create_searcher``; the Katib converter (``kubetune.sdk.katib_convert``) maps
Katib's ``algorithmName: hyperband`` here. Pure Python: no kopf, no Kubernetes imports.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Any

from pydantic import Field, StrictInt, StrictStr

from kubetune.resultkeys import is_number
from kubetune.search import VariantSpace
from kubetune.search.katib_hyperband import DEFAULT_ETA, Rung, plan
from kubetune.search.sample import Function, is_grid
from kubetune.search.variants import find_domains
from kubetune_operator.params import Count, Number, checked
from kubetune_operator.searchers.base import FINISHED, Searcher, decode_number, encode_number

__all__ = ["KatibHyperBand"]

#: Katib's ``eta``: a whole number >= 2 (Katib divides by ``log(eta)``).
Eta = Annotated[StrictInt, Field(ge=2)]


class KatibHyperBand(Searcher):
    """Katib's hyperband over ``spec.config``: brackets of trials, each run from scratch with a budget.

    A trial's value is ``result[metric]`` of the result it ended with (its last one, as a converted Katib Experiment
    ranks trials, docs/katib.md); the best ``ceil(n_i / eta)`` by ``mode`` are copied, ties in suggestion order. A
    trial that failed, or ended without a finite value, is never copied (Katib's service would refuse to go on).

    Args:
        space: ``spec.config`` (JSON) or an SDK space; no ``grid_search`` or ``sample_from`` (a copy must be the
            config that ran).
        metric, mode: required: what ranks a rung.
        num_samples: most trials suggested (``numSamples``, Katib's ``maxTrialCount``); the plan may end first.
        seed: seeds the new configs' draws; None picks one (kept in the state).
        resource_name: the top-level key of ``spec.config`` that takes the budget (Katib's ``resource_name``).
        r_l: the largest budget (Katib's ``r_l``, the paper's ``R``), >= 1.
        eta: the reduction factor (Katib's ``eta``), a whole number >= 2; default 3.

    Attributes:
        brackets: the plan: one list of :class:`~kubetune.search.katib_hyperband.Rung` per bracket.

    Raises:
        ValueError: a bad mode or space (its path named), a ``grid_search`` or ``sample_from`` in it, missing
            metric, mode, ``resource_name`` or ``r_l``, a ``resource_name`` that is not a key of the space, ``r_l``
            below 1, ``eta`` below 2.
    """

    quiet_wait = True  # suggest's None changes nothing: it waits for the rung, which moves on in a later call

    @checked
    def __init__(
        self,
        space: Any,
        metric: str | None = None,
        mode: str | None = None,
        num_samples: Count = 1,
        seed: StrictInt | None = None,
        resource_name: StrictStr | None = None,
        r_l: Number | None = None,
        eta: Eta = DEFAULT_ETA,
    ):
        super().__init__(metric, mode)
        self._space = space
        self.num_samples = num_samples
        self.generator = VariantSpace(space, 1, seed)  # parses and checks the space; resized below
        for path, node in find_domains(self.generator.space):
            what = "grid_search" if is_grid(node) else "sample_from" if isinstance(node, Function) else None
            if what:
                where = ".".join(str(p) for p in ("config", *path))
                raise ValueError(f"{where}: katib-hyperband copies the configs that ran; it takes no {what}")
        if metric is None or mode is None:
            raise ValueError("katib-hyperband search needs metric and mode: they rank each rung")
        if resource_name is None or r_l is None:
            raise ValueError("katib-hyperband needs params r_l and resource_name (Katib's: 'must be set')")
        if not isinstance(self.generator.space, dict) or resource_name not in self.generator.space:
            raise ValueError(f"resource_name {resource_name!r} must be a top-level key of spec.config")
        self.resource_name, self.r_l, self.eta = resource_name, r_l, eta
        self.brackets: list[list[Rung]] = plan(r_l, eta)
        # variant k is a function of (seed, k) alone; one variant per new config of the plan
        self._draws_in_plan = sum(bracket[0].size for bracket in self.brackets)
        self.generator = VariantSpace(space, self._draws_in_plan, self.generator.seed)
        self.bracket = 0  # index into brackets (Katib's s = s_max - bracket)
        self.rung = -1  # index into the bracket's rungs; -1: nothing started
        self.draws = 0  # new configs drawn so far: the next is generator.variant(draws)
        self.suggested = 0  # trials suggested so far (num_samples caps it)
        self.pending: list[dict] = []  # the current rung's copies not suggested yet, in order
        self.to_draw = 0  # the current rung's new configs not drawn yet (rung 0: drawn as they are suggested)
        # the current rung's trials in suggestion order: [trial_id, config, ended, value (None: not ranked)]
        self.members: list[list] = []
        self._member: dict[str, list] = {}  # trial_id -> its entry of members
        self.finished = False

    # ----- the plan ---------------------------------------------------------------------------------------------
    def _draw(self) -> dict:
        config = self.generator.variant(self.draws)[0]
        self.draws += 1
        self.to_draw -= 1
        config[self.resource_name] = self.brackets[self.bracket][0].resource
        return config

    def _start_next_rung(self) -> None:
        """Plan the next rung's configs (the current rung has ended): the next rung of this bracket, copies of
        the current rung's best; else rung 0 of the next bracket, new draws; else the search is finished."""
        rungs = self.brackets[self.bracket] if self.bracket < len(self.brackets) else []
        if self.rung >= 0 and self.rung + 1 < len(rungs):
            self.rung += 1
            top = self._ranked()[: rungs[self.rung].size]
            resource = rungs[self.rung].resource
            self.pending = [{**copy.deepcopy(config), self.resource_name: resource} for config in top]
        else:
            if self.rung >= 0:
                self.bracket += 1
            if self.bracket >= len(self.brackets):
                self.finished, self.pending = True, []
                return
            self.rung, self.to_draw = 0, self.brackets[self.bracket][0].size
        self.members, self._member = [], {}

    def _ranked(self) -> list[dict]:
        """The current rung's configs with a value, best first (``mode``), ties in suggestion order."""
        valued = [(value, i, config) for i, (_, config, _, value) in enumerate(self.members) if value is not None]
        sign = -1.0 if self.mode == "max" else 1.0
        return [config for _, _, config in sorted(valued, key=lambda v: (sign * v[0], v[1]))]

    # ----- the Searcher interface ----------------------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict | None | str:
        """The config of the new trial ``trial_id`` (the same one when asked again), None while the current rung's
        trials run (the next rung is ranked on their results), or :data:`FINISHED` after the plan's last rung or
        ``num_samples`` trials."""
        if trial_id in self._member:
            return copy.deepcopy(self._member[trial_id][1])
        if self.finished or self.suggested >= self.num_samples:
            return FINISHED
        while not self.pending and not self.to_draw:
            if any(not member[2] for member in self.members):
                return None  # Katib's "not completed yet": the rung's ranking waits for all its trials
            self._start_next_rung()
            if self.finished:
                return FINISHED
        config = self.pending.pop(0) if self.pending else self._draw()
        self.members.append([trial_id, config, False, None])
        self._member[trial_id] = self.members[-1]
        self.suggested += 1
        return copy.deepcopy(config)

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False, early_stopped: bool = False
    ) -> None:
        """``trial_id`` ended: its value is ``result[metric]`` unless it failed or the value is missing or not
        finite (then it is not ranked). Unknown and already ended trials are ignored."""
        member = self._member.get(trial_id)
        if member is not None and not member[2]:
            value = (result or {}).get(self.metric)
            ok = not error and is_number(value) and math.isfinite(value)
            member[2], member[3] = True, float(value) if ok else None

    def get_state(self) -> dict:
        """Strict JSON: ``seed``, the plan's settings, the position (``bracket``, ``rung``, ``draws``,
        ``suggested``, ``finished``), the current rung's ``pending`` copies, new configs ``to_draw`` and
        ``members`` (``[trial_id, config, ended, value]`` each, in suggestion order)."""
        return {
            "seed": self.generator.seed,
            "settings": {"resource_name": self.resource_name, "r_l": self.r_l, "eta": self.eta},
            "bracket": self.bracket,
            "rung": self.rung,
            "draws": self.draws,
            "suggested": self.suggested,
            "finished": self.finished,
            "pending": copy.deepcopy(self.pending),
            "to_draw": self.to_draw,
            "members": [[t, copy.deepcopy(c), ended, encode_number(v)] for t, c, ended, v in self.members],
        }

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state`'s output (the stored seed wins over the constructor's).

        Raises:
            ValueError: the state's ``resource_name``, ``r_l`` or ``eta`` differ from this searcher's (a spec edit:
                the brackets belong to the settings they started with), or its position is outside the plan.
        """
        settings = {"resource_name": self.resource_name, "r_l": self.r_l, "eta": self.eta}
        if state["settings"] != settings:
            raise ValueError(
                f"katib-hyperband's resource_name, r_l and eta cannot change while it runs: {state['settings']} "
                f"started, {settings} given"
            )
        if not 0 <= state["bracket"] <= len(self.brackets) or state["rung"] < -1:
            raise ValueError(f"bracket {state['bracket']}, rung {state['rung']}: outside the plan")
        if state["seed"] != self.generator.seed:
            self.generator = VariantSpace(self._space, self._draws_in_plan, state["seed"])
        self.bracket, self.rung, self.draws = state["bracket"], state["rung"], state["draws"]
        self.suggested, self.finished = state["suggested"], state["finished"]
        self.pending, self.to_draw = copy.deepcopy(state["pending"]), state["to_draw"]
        self.members = [[t, copy.deepcopy(c), ended, decode_number(v)] for t, c, ended, v in state["members"]]
        self._member = {member[0]: member for member in self.members}
