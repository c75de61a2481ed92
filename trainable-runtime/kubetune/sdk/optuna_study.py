"""An experiment read from storage as an Optuna study: what the plots and the storage-only dashboard draw from.

Owns the translation of an :class:`kubetune.sdk.analysis.ExperimentAnalysis` into Optuna's model: one
``FrozenTrial`` per kubetune trial, in the analysis's trial order (Optuna's trial ``number`` is the index),
added to an Optuna storage (an ``InMemoryStorage`` unless the caller gives another). Callers:
:mod:`kubetune.sdk.plots` (learning curves, parallel coordinates, importance),
:mod:`kubetune.sdk.dashboard` (Optuna Dashboard over the study) and users who want Optuna's own tools.

What each Optuna trial holds:

* ``params``: the trial's ``evaluated_params`` (the searched values, keyed by path joined with ``/``).
  Their distributions come from the Experiment's search space where the analysis knows it
  (``param_space``): Ray's mapping for ranges (:func:`kubetune.search.optuna_space.convert_search_space`),
  a ``choice`` or ``grid_search`` as a categorical of its values (lists and dicts among them as JSON
  text). A parameter whose values fall outside that distribution (a PBT perturbation), whose domain
  Optuna cannot hold (``randn``, ``sample_from``) or whose space is unknown gets one inferred from the
  values: an integer or float range from their minimum to their maximum, else a categorical of the
  distinct values (lists and dicts as JSON text).
* ``intermediate_values``: ``{training_iteration: value}`` of every result that reports a finite number
  for the metric (the first objective's, with several), on the trial's lineage: a PBT exploit's restore keeps
  the results up to the donor's iteration, so the values after it start at that iteration plus one and the
  curve jumps there (:meth:`kubetune.sdk.analysis.ExperimentAnalysis.metric_history`).
* ``state`` and ``values``: ``FAIL`` (no value) for a trial that failed; ``RUNNING`` (no value) for one
  without a finite value of the metric yet (of every objective, with several); ``PRUNED`` with its last finite
  value (of each objective) for one that ended before the experiment's longest trial (its last
  ``training_iteration`` is below the highest any trial reached: from storage alone that is how an early stop
  shows, so the trials of a running experiment that are behind show so too); ``COMPLETE`` with its last finite
  value (of each) otherwise.
* ``user_attrs`` (Optuna Dashboard's trial table shows them as columns): ``kubetune_trial`` (the trial's
  name), ``display_name`` (what the experiment's ``trial_name_creator`` named it, where the analysis knows it:
  read with the cluster's Trials), ``training_iteration`` (its last result's, once it reported one), each
  objective's name with its last finite value (once there is one: a running trial's progress, which has no Optuna
  value yet) and ``best_<metric>`` with its best finite value by the objective's mode (once there is one), for a
  failed trial ``error`` (the last line of its message) and, for a trial a PBT exploit restored from another's
  checkpoint, ``pbt_exploits`` (:func:`kubetune.sdk.pbt_exploits.describe`: its iteration, the donor and the
  donor's iteration, of each exploit).

An experiment with several objectives (``spec.objectives``, an analysis whose ``objectives`` are set) gives a
study of several directions, one per objective, when no single ``metric`` is asked for: Optuna Dashboard then
draws its Pareto front (of the ``COMPLETE`` trials: Optuna's rule).

:func:`fill_study` fills a study once; :mod:`kubetune.sdk.live_study` keeps one in step with storage from
:func:`create_study`, :func:`frozen_trial` and :func:`user_attrs`, with states of its own while the
experiment runs.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from kubetune.resultkeys import is_number
from kubetune.sdk.pbt_exploits import Exploit, describe, read_exploits
from kubetune.search.optuna_space import convert_search_space
from kubetune.search.sample import GRID_SEARCH, Categorical, is_grid, parse_space
from kubetune.search.variants import find_domains

if TYPE_CHECKING:
    import optuna

    from kubetune.sdk.analysis import ExperimentAnalysis, TrialRecord

__all__ = [
    "DISPLAY_NAME_ATTR",
    "EXPLOITS_ATTR",
    "TRIAL_NAME_ATTR",
    "create_study",
    "distributions",
    "fill_study",
    "final_values",
    "frozen_trial",
    "histories",
    "longest_iteration",
    "trial_state",
    "study_modes",
    "user_attrs",
]

#: The user attribute of each Optuna trial that holds the kubetune trial's name.
TRIAL_NAME_ATTR = "kubetune_trial"
#: The user attribute that holds the trial's display name (``Trial.status.displayName``), when it has one.
DISPLAY_NAME_ATTR = "display_name"
#: The user attribute of an Optuna trial a PBT exploit restored from another's checkpoint: its exploits.
EXPLOITS_ATTR = "pbt_exploits"
TRAINING_ITERATION = "training_iteration"
#: The prefix of the user attribute that holds a trial's best finite value of an objective.
BEST_PREFIX = "best_"
#: A trial's ``(training_iteration, value)`` pairs of finite values of one metric, in increasing iteration.
History = list[tuple[int, float]]


def _choice(value: Any) -> Any:
    """``value`` as an Optuna categorical choice: None, bool, int, float and str as they are, else JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _inferred(values: list[Any]) -> Any:
    """A distribution holding every one of ``values``: a numeric range, else a categorical."""
    import optuna.distributions as dist

    if values and all(is_number(v) and math.isfinite(v) for v in values):
        low, high = min(values), max(values)
        if all(isinstance(v, int) for v in values):
            return dist.IntDistribution(low, high)
        return dist.FloatDistribution(float(low), float(high))
    return dist.CategoricalDistribution(list(dict.fromkeys(_choice(v) for v in values)))


def _holds(distribution: Any, values: Iterable[Any]) -> bool:
    """Whether ``distribution`` holds every one of ``values``."""
    try:
        return all(distribution._contains(distribution.to_internal_repr(_param(distribution, v))) for v in values)
    except (ValueError, TypeError):
        return False


def _param(distribution: Any, value: Any) -> Any:
    """``value`` as Optuna stores it under ``distribution`` (categorical choices made hashable)."""
    import optuna.distributions as dist

    return _choice(value) if isinstance(distribution, dist.CategoricalDistribution) else value


def _space_distributions(param_space: Any) -> dict[str, Any]:
    """The Optuna distribution of each domain of ``param_space`` Optuna can hold, keyed by path joined with ``/``."""
    import optuna.distributions as dist

    out = {}
    for path, node in find_domains(parse_space(param_space)):
        name = "/".join(str(part) for part in path)
        if is_grid(node) or isinstance(node, Categorical):
            choices = node[GRID_SEARCH] if is_grid(node) else node.categories
            out[name] = dist.CategoricalDistribution(list(dict.fromkeys(_choice(v) for v in choices)))
            continue
        try:
            out[name] = convert_search_space({"p": node})["p"]
        except ValueError:
            continue  # randn, sample_from: inferred from the values
    return out


def distributions(analysis: ExperimentAnalysis) -> dict[str, Any]:
    """The Optuna distribution of every searched parameter of ``analysis``'s trials (module docstring).

    Returns:
        ``{"a/b": optuna.distributions.BaseDistribution}``, in the order the parameters first appear.
    """
    values: dict[str, list[Any]] = {}
    for trial in analysis.trials:
        for name, value in trial.evaluated_params.items():
            values.setdefault(name, []).append(value)
    known = _space_distributions(analysis.param_space) if analysis.param_space is not None else {}
    return {
        name: known[name] if name in known and _holds(known[name], seen) else _inferred(seen)
        for name, seen in values.items()
    }


def longest_iteration(analysis: ExperimentAnalysis) -> int:
    """The highest last ``training_iteration`` of any trial of ``analysis``; 0 before any result."""
    iterations = [t.last_result.get(TRAINING_ITERATION) for t in analysis.trials]
    return max((i for i in iterations if is_number(i)), default=0)


def histories(analysis: ExperimentAnalysis, trial: TrialRecord, metrics: Sequence[str]) -> list[History]:
    """``trial``'s ``(training_iteration, value)`` pairs of finite values of each of ``metrics``, in order."""
    return [analysis.metric_history(trial, metric) for metric in metrics]


def trial_state(trial: TrialRecord, histories: Sequence[History], longest: int) -> str:
    """The Optuna state of ``trial`` (the rule of the module docstring), by name.

    Args:
        trial: the trial as read from storage.
        histories: its ``(training_iteration, value)`` pairs of finite values, one list per objective.
        longest: the highest last ``training_iteration`` of any trial of the experiment.

    Returns:
        ``"FAIL"``, ``"RUNNING"``, ``"PRUNED"`` or ``"COMPLETE"``.
    """
    if trial.error is not None:
        return "FAIL"
    if not all(histories):
        return "RUNNING"
    last = trial.last_result.get(TRAINING_ITERATION)
    return "PRUNED" if is_number(last) and last < longest else "COMPLETE"


def study_modes(study: optuna.Study) -> tuple[str, ...]:
    """The mode of each objective of ``study``: ``"max"`` for ``MAXIMIZE``, else ``"min"``."""
    return tuple("max" if d.name == "MAXIMIZE" else "min" for d in study.directions)


def user_attrs(
    trial: TrialRecord,
    histories: Sequence[History],
    metrics: Sequence[str],
    exploits: Sequence[Exploit] = (),
    modes: Sequence[str] = (),
) -> dict[str, Any]:
    """The Optuna user attributes of ``trial`` (module docstring).

    Args:
        trial: the trial as read from storage.
        histories: its ``(training_iteration, value)`` pairs of finite values of each of ``metrics``.
        metrics: the study's objectives.
        exploits: its PBT exploits (:func:`kubetune.sdk.pbt_exploits.read_exploits`).
        modes: each objective's ``"min"`` or ``"max"``; without them no ``best_<metric>``.

    Returns:
        ``{"kubetune_trial": name, "display_name": str, "training_iteration": int, <metric>: float,
        "best_<metric>": float, ..., "error": str, "pbt_exploits": str}``, those known.
    """
    attrs: dict[str, Any] = {TRIAL_NAME_ATTR: trial.trial_id}
    if trial.custom_trial_name:
        attrs[DISPLAY_NAME_ATTR] = trial.custom_trial_name
    iteration = trial.last_result.get(TRAINING_ITERATION)
    if is_number(iteration):
        attrs[TRAINING_ITERATION] = iteration
    for metric, history in zip(metrics, histories):
        if history:
            attrs[metric] = history[-1][1]
    for metric, history, mode in zip(metrics, histories, modes):
        if history:
            attrs[f"{BEST_PREFIX}{metric}"] = (max if mode == "max" else min)(value for _, value in history)
    if trial.error is not None:
        attrs["error"] = (trial.error.strip().splitlines() or ["failed"])[-1]
    if exploits:
        attrs[EXPLOITS_ATTR] = describe(exploits)
    return attrs


def final_values(histories: Sequence[History], state: str) -> list[float] | None:
    """The Optuna values of a trial in ``state``: each objective's last finite value when ``PRUNED`` or
    ``COMPLETE``, else None."""
    return [history[-1][1] for history in histories] if state in ("PRUNED", "COMPLETE") else None


def frozen_trial(
    trial: TrialRecord,
    histories: Sequence[History],
    state: str,
    dists: dict[str, Any],
    metrics: Sequence[str],
    exploits: Sequence[Exploit] = (),
    modes: Sequence[str] = (),
    extra_attrs: Mapping[str, Any] | None = None,
) -> optuna.trial.FrozenTrial:
    """``trial`` as an Optuna trial to add to a study.

    Args:
        trial: the trial as read from storage.
        histories: its ``(training_iteration, value)`` pairs of finite values of each of ``metrics``.
        state: its Optuna state by name (``"RUNNING"``, ``"COMPLETE"``...); ``PRUNED`` and ``COMPLETE`` take the
            last of each history as the values.
        dists: :func:`distributions` of the experiment (holding every searched value of ``trial``).
        metrics: the study's objectives.
        exploits: its PBT exploits.
        modes: each objective's mode (:func:`user_attrs`).
        extra_attrs: user attributes to add to :func:`user_attrs`' (the dashboard's Trial status columns,
            :func:`kubetune.sdk.cluster_notes.trial_attrs`).

    Returns:
        The trial with its parameters, intermediate values (the first objective's) and user attributes.
    """
    from optuna.trial import TrialState, create_trial

    own = {name: dists[name] for name in trial.evaluated_params}
    return create_trial(
        state=TrialState[state],
        values=final_values(histories, state),
        params={name: _param(own[name], value) for name, value in trial.evaluated_params.items()},
        distributions=own,
        user_attrs={**user_attrs(trial, histories, metrics, exploits, modes), **(extra_attrs or {})},
        intermediate_values=dict(histories[0]),
    )


def create_study(
    analysis: ExperimentAnalysis,
    metric: str | None = None,
    mode: str | None = None,
    *,
    storage: Any = None,
    study_name: str | None = None,
) -> tuple[optuna.Study, tuple[str, ...]]:
    """Create the empty Optuna study of ``analysis`` (its objectives, no trials).

    Args:
        analysis, metric, mode, storage, study_name: as :func:`fill_study`'s.

    Returns:
        ``(study, metrics)``: the study, one direction ``minimize`` or ``maximize`` per objective by its mode, its
        metric names the objectives; and those objectives (``(metric,)``, the analysis's default, or its several
        ``objectives``).

    Raises:
        ValueError, optuna.exceptions.DuplicatedStudyError, ImportError: as :func:`fill_study`.
    """
    try:
        import optuna
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the experiment's views need Optuna: pip install 'kubetune[views]'") from exc
    from optuna.storages import InMemoryStorage

    if metric is None and mode is None and analysis.objectives is not None:
        metrics, modes = analysis.objectives
    else:
        metrics, modes = (analysis._validate_metric(metric),), (analysis._validate_mode(mode),)
    if study_name is None:
        study_name = "/".join(analysis.experiment_path.rstrip("/").split("/")[-3:-1])
    study = optuna.create_study(
        storage=storage if storage is not None else InMemoryStorage(),
        study_name=study_name,
        directions=["maximize" if m == "max" else "minimize" for m in modes],
    )
    with warnings.catch_warnings():  # Optuna marks metric names experimental; the dashboard shows them
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(metrics))
    return study, tuple(metrics)


def fill_study(
    analysis: ExperimentAnalysis,
    metric: str | None = None,
    mode: str | None = None,
    *,
    storage: Any = None,
    study_name: str | None = None,
) -> optuna.Study:
    """Create an Optuna study of ``analysis``'s trials (one per trial, in order; module docstring).

    Args:
        analysis: the experiment, read from storage.
        metric: the result key that is the study's objective (``a/b`` for nested ones); default the
            analysis's ``default_metric``, or its several ``objectives``.
        mode: ``"min"`` or ``"max"``; default the analysis's ``default_mode``.
        storage: an Optuna storage or its URL (``sqlite:///...``); default a new ``InMemoryStorage``.
        study_name: default ``<namespace>/<experiment>`` from the analysis's path.

    Returns:
        The study: its directions ``minimize`` or ``maximize`` by mode, its metric names the objectives.

    Raises:
        ValueError: no metric or mode here nor in the analysis (for an experiment with several objectives: a
            metric without a mode, or the reverse), a bad mode.
        optuna.exceptions.DuplicatedStudyError: a study of that name is already in ``storage``.
        ImportError: Optuna is not installed (``pip install 'kubetune[views]'``).
    """
    study, metrics = create_study(analysis, metric, mode, storage=storage, study_name=study_name)
    dists = distributions(analysis)
    longest = longest_iteration(analysis)
    exploits = read_exploits(analysis)
    modes = study_modes(study)
    trials = []
    for trial in analysis.trials:
        found = histories(analysis, trial, metrics)
        state = trial_state(trial, found, longest)
        trials.append(frozen_trial(trial, found, state, dists, metrics, exploits.get(trial.trial_id, ()), modes))
    study.add_trials(trials)
    return study
