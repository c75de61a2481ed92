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
  for the metric.
* ``state`` and ``value``: ``FAIL`` (no value) for a trial that failed; ``RUNNING`` (no value) for one
  without a finite value of the metric yet; ``PRUNED`` with its last finite value for one that ended
  before the experiment's longest trial (its last ``training_iteration`` is below the highest any
  trial reached: from storage alone that is how an early stop shows, so the trials of a running
  experiment that are behind show so too); ``COMPLETE`` with its last finite value otherwise.
* ``user_attrs`` (Optuna Dashboard's trial table shows them as columns): ``kubetune_trial`` (the trial's
  name), ``training_iteration`` (its last result's, once it reported one), the metric's name with the last
  finite value of the metric (once there is one: a running trial's progress, which has no Optuna value yet)
  and, for a failed trial, ``error`` (the last line of its message).

:func:`fill_study` fills a study once; :mod:`kubetune.sdk.live_study` keeps one in step with storage from
:func:`create_study`, :func:`frozen_trial` and :func:`user_attrs`, with states of its own while the
experiment runs.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import TYPE_CHECKING, Any, Iterable

from kubetune.resultkeys import is_number
from kubetune.search.optuna_space import convert_search_space
from kubetune.search.sample import GRID_SEARCH, Categorical, is_grid, parse_space
from kubetune.search.variants import find_domains

if TYPE_CHECKING:
    import optuna

    from kubetune.sdk.analysis import ExperimentAnalysis, TrialRecord

__all__ = [
    "TRIAL_NAME_ATTR",
    "create_study",
    "distributions",
    "fill_study",
    "frozen_trial",
    "longest_iteration",
    "trial_state",
    "user_attrs",
]

#: The user attribute of each Optuna trial that holds the kubetune trial's name.
TRIAL_NAME_ATTR = "kubetune_trial"
TRAINING_ITERATION = "training_iteration"


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


def trial_state(trial: TrialRecord, history: list[tuple[int, float]], longest: int) -> str:
    """The Optuna state of ``trial`` (the rule of the module docstring), by name.

    Args:
        trial: the trial as read from storage.
        history: its ``(training_iteration, value)`` pairs of finite values of the metric.
        longest: the highest last ``training_iteration`` of any trial of the experiment.

    Returns:
        ``"FAIL"``, ``"RUNNING"``, ``"PRUNED"`` or ``"COMPLETE"``.
    """
    if trial.error is not None:
        return "FAIL"
    if not history:
        return "RUNNING"
    last = trial.last_result.get(TRAINING_ITERATION)
    return "PRUNED" if is_number(last) and last < longest else "COMPLETE"


def user_attrs(trial: TrialRecord, history: list[tuple[int, float]], metric: str) -> dict[str, Any]:
    """The Optuna user attributes of ``trial`` (module docstring).

    Args:
        trial: the trial as read from storage.
        history: its ``(training_iteration, value)`` pairs of finite values of ``metric``.
        metric: the study's objective.

    Returns:
        ``{"kubetune_trial": name, "training_iteration": int, metric: float, "error": str}``, those known.
    """
    attrs: dict[str, Any] = {TRIAL_NAME_ATTR: trial.trial_id}
    iteration = trial.last_result.get(TRAINING_ITERATION)
    if is_number(iteration):
        attrs[TRAINING_ITERATION] = iteration
    if history:
        attrs[metric] = history[-1][1]
    if trial.error is not None:
        attrs["error"] = (trial.error.strip().splitlines() or ["failed"])[-1]
    return attrs


def frozen_trial(
    trial: TrialRecord, history: list[tuple[int, float]], state: str, dists: dict[str, Any], metric: str
) -> optuna.trial.FrozenTrial:
    """``trial`` as an Optuna trial to add to a study.

    Args:
        trial: the trial as read from storage.
        history: its ``(training_iteration, value)`` pairs of finite values of ``metric``.
        state: its Optuna state by name (``"RUNNING"``, ``"COMPLETE"``...); ``PRUNED`` and ``COMPLETE`` take the
            last of ``history`` as the value.
        dists: :func:`distributions` of the experiment (holding every searched value of ``trial``).
        metric: the study's objective.

    Returns:
        The trial with its parameters, intermediate values and :func:`user_attrs`.
    """
    from optuna.trial import TrialState, create_trial

    own = {name: dists[name] for name in trial.evaluated_params}
    return create_trial(
        state=TrialState[state],
        value=history[-1][1] if state in ("PRUNED", "COMPLETE") else None,
        params={name: _param(own[name], value) for name, value in trial.evaluated_params.items()},
        distributions=own,
        user_attrs=user_attrs(trial, history, metric),
        intermediate_values=dict(history),
    )


def create_study(
    analysis: ExperimentAnalysis,
    metric: str | None = None,
    mode: str | None = None,
    *,
    storage: Any = None,
    study_name: str | None = None,
) -> tuple[optuna.Study, str]:
    """Create the empty Optuna study of ``analysis`` (its objective, no trials).

    Args:
        analysis, metric, mode, storage, study_name: as :func:`fill_study`'s.

    Returns:
        ``(study, metric)``: the study, its direction ``minimize`` or ``maximize`` by ``mode``, its metric name
        the objective; and that objective (``metric`` or the analysis's default).

    Raises:
        ValueError, optuna.exceptions.DuplicatedStudyError, ImportError: as :func:`fill_study`.
    """
    try:
        import optuna
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the experiment's views need Optuna: pip install 'kubetune[views]'") from exc
    from optuna.storages import InMemoryStorage

    metric = analysis._validate_metric(metric)
    mode = analysis._validate_mode(mode)
    if study_name is None:
        study_name = "/".join(analysis.experiment_path.rstrip("/").split("/")[-3:-1])
    study = optuna.create_study(
        storage=storage if storage is not None else InMemoryStorage(),
        study_name=study_name,
        direction="maximize" if mode == "max" else "minimize",
    )
    with warnings.catch_warnings():  # Optuna marks metric names experimental; the dashboard shows them
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric])
    return study, metric


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
            analysis's ``default_metric``.
        mode: ``"min"`` or ``"max"``; default the analysis's ``default_mode``.
        storage: an Optuna storage or its URL (``sqlite:///...``); default a new ``InMemoryStorage``.
        study_name: default ``<namespace>/<experiment>`` from the analysis's path.

    Returns:
        The study, its direction ``minimize`` or ``maximize`` by ``mode``, its metric name ``metric``.

    Raises:
        ValueError: no metric or mode here nor in the analysis (for an experiment with several
            objectives: pass one of them), a bad mode.
        optuna.exceptions.DuplicatedStudyError: a study of that name is already in ``storage``.
        ImportError: Optuna is not installed (``pip install 'kubetune[views]'``).
    """
    study, metric = create_study(analysis, metric, mode, storage=storage, study_name=study_name)
    histories = [analysis.metric_history(trial, metric) for trial in analysis.trials]
    dists = distributions(analysis)
    longest = longest_iteration(analysis)
    study.add_trials(
        [
            frozen_trial(trial, history, trial_state(trial, history, longest), dists, metric)
            for trial, history in zip(analysis.trials, histories)
        ]
    )
    return study
