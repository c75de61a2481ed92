"""Pictures of an experiment without a browser: learning curves, parallel coordinates, parameter importance.

Owns drawing an experiment read from storage with matplotlib, for notebooks, CI reports and papers.
Callers: :meth:`kubetune.sdk.analysis.ExperimentAnalysis.plot` (and ``ResultGrid.plot``), which draw one
kind on an ``Axes``, and the ``kubetune plot`` command (:func:`save`), which writes one or every kind to a
PNG, SVG or PDF file. Everything is drawn from the Optuna study :func:`kubetune.sdk.optuna_study.fill_study`
builds, so the pictures and the storage-only dashboard show the same trials in the same states.

* **Learning curves**: the metric against ``training_iteration``, one line (``Line2D``, its ``gid`` the trial's
  name) per trial that reported it; a solid line for a trial that completed, dashed ending in a cross for
  one stopped early, dotted ending in a dot for one that failed, dash-dotted for one still without a value.
* **Parallel coordinates**: one vertical axis per searched parameter (each scaled from its distribution's
  low to high, on a log scale for a log distribution; a categorical's choices evenly spaced) and one for
  the metric; one line (``gid`` the trial's name) per trial with a value, coloured by it (the best in
  yellow, viridis), dashed for a trial stopped early. Failed trials and those without a value are left out.
* **Importance**: each searched parameter's importance for the metric by Optuna's PED-ANOVA evaluator (the
  one Optuna Dashboard uses), one horizontal bar per parameter, the most important on top; it needs two
  completed trials, and says so on the axes otherwise.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from kubetune.sdk.optuna_study import TRIAL_NAME_ATTR, fill_study

if TYPE_CHECKING:
    import optuna

    from kubetune.sdk.analysis import ExperimentAnalysis

__all__ = ["KINDS", "draw", "plot", "save"]

#: The kinds of picture, in the order :func:`save` stacks them.
KINDS = ("learning_curves", "parallel_coordinates", "importance")
#: How each Optuna state is drawn in the learning curves: (legend label, colour, line style, end marker).
STYLES = {
    "COMPLETE": ("completed", "tab:blue", "-", None),
    "PRUNED": ("stopped early", "tab:orange", "--", "x"),
    "FAIL": ("failed", "tab:red", ":", "o"),
    "RUNNING": ("no final value yet", "tab:green", "-.", None),
}
#: Fewest completed trials the importance needs.
IMPORTANCE_MIN_TRIALS = 2


def _matplotlib():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("pictures of an experiment need matplotlib: pip install 'kubetune[views]'") from exc
    return matplotlib


def _study(analysis: ExperimentAnalysis, metric: str | None, mode: str | None) -> optuna.Study:
    """The study of ``analysis`` with one objective.

    Raises:
        ValueError: as :func:`kubetune.sdk.optuna_study.fill_study`, or the study has several objectives (the
            pictures draw one: pass ``metric`` and ``mode``).
    """
    study = fill_study(analysis, metric, mode)
    if len(study.directions) > 1:
        raise ValueError(
            f"this experiment has several objectives ({', '.join(study.metric_names)}): the pictures draw one, "
            "pass its metric and mode"
        )
    return study


def _name(trial: Any) -> str:
    return trial.user_attrs.get(TRIAL_NAME_ATTR, str(trial.number))


def _metric(study: optuna.Study) -> str:
    return (study.metric_names or ["value"])[0]


def learning_curves(study: optuna.Study, ax: Any) -> None:
    """Draw the learning curves of ``study``'s trials on ``ax`` (module docstring)."""
    from matplotlib.lines import Line2D

    metric = _metric(study)
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        if not trial.intermediate_values:
            continue
        state = trial.state.name
        _, color, style, marker = STYLES[state]
        steps = sorted(trial.intermediate_values)
        ax.plot(
            steps,
            [trial.intermediate_values[s] for s in steps],
            color=color,
            linestyle=style,
            linewidth=1,
            alpha=0.8,
            marker=marker,
            markevery=[len(steps) - 1],
            gid=_name(trial),
        )
        counts[state] = counts.get(state, 0) + 1
    handles = [
        Line2D([], [], color=color, linestyle=style, marker=marker, label=f"{label} ({counts[state]})")
        for state, (label, color, style, marker) in STYLES.items()
        if state in counts
    ]
    if handles:
        ax.legend(handles=handles, loc="best", fontsize="small")
    ax.set_xlabel("training_iteration")
    ax.set_ylabel(metric)
    ax.set_title(f"{study.study_name}: learning curves")
    ax.grid(alpha=0.3)


def _position(distribution: Any, value: Any) -> float:
    """``value``'s place on its parameter's axis, 0 (low) to 1 (high)."""
    import optuna.distributions as dist

    if isinstance(distribution, dist.CategoricalDistribution):
        choices = distribution.choices
        return choices.index(value) / (len(choices) - 1) if len(choices) > 1 else 0.5
    low, high = distribution.low, distribution.high
    if distribution.log:
        low, high, value = math.log(low), math.log(high), math.log(value)
    return (value - low) / (high - low) if high > low else 0.5


def _axis_labels(distribution: Any) -> list[tuple[float, str]]:
    """``(position, text)`` of the labels along a parameter's axis: its bounds, or each choice."""
    import optuna.distributions as dist

    if isinstance(distribution, dist.CategoricalDistribution):
        return [(_position(distribution, c), str(c)) for c in distribution.choices]
    return [(0.0, f"{distribution.low:.3g}"), (1.0, f"{distribution.high:.3g}")]


def parallel_coordinates(study: optuna.Study, ax: Any) -> None:
    """Draw the parallel coordinates of ``study``'s trials with a value on ``ax`` (module docstring)."""
    import matplotlib as mpl

    metric = _metric(study)
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.name in ("COMPLETE", "PRUNED")]
    params: dict[str, Any] = {}
    for trial in trials:
        for name, distribution in trial.distributions.items():
            params.setdefault(name, distribution)
    names = list(params)
    ax.set_title(f"{study.study_name}: parallel coordinates")
    ax.set_yticks([])
    if not trials:
        ax.text(0.5, 0.5, "no trial with a value yet", ha="center", va="center", transform=ax.transAxes)
        return
    values = [t.value for t in trials]
    low, high = min(values), max(values)
    norm = mpl.colors.Normalize(low, high) if high > low else mpl.colors.Normalize(low - 1, high + 1)
    cmap = mpl.colormaps["viridis" if study.direction.name == "MAXIMIZE" else "viridis_r"]
    for trial in trials:
        ys = [_position(params[n], trial.params[n]) if n in trial.params else math.nan for n in names]
        ys.append(norm(trial.value))
        ax.plot(
            range(len(ys)),
            ys,
            color=cmap(norm(trial.value)),
            linestyle="--" if trial.state.name == "PRUNED" else "-",
            linewidth=1,
            alpha=0.7,
            gid=_name(trial),
        )
    for x, name in enumerate(names):
        ax.axvline(x, color="black", linewidth=0.8)
        for y, text in _axis_labels(params[name]):
            ax.annotate(text, (x, y), xytext=(3, 0), textcoords="offset points", fontsize="x-small", va="center")
    ax.axvline(len(names), color="black", linewidth=0.8)
    for y, value in ((norm(low), low), (norm(high), high)):
        ax.annotate(f"{value:.4g}", (len(names), y), xytext=(3, 0), textcoords="offset points", fontsize="x-small")
    ax.set_xticks(range(len(names) + 1), [*names, metric], rotation=20, ha="right")
    ax.set_xlim(-0.1, len(names) + 0.1)
    ax.set_ylim(-0.05, 1.05)
    ax.figure.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=metric)


def importance(study: optuna.Study, ax: Any) -> None:
    """Draw each searched parameter's importance for ``study``'s objective on ``ax`` (module docstring)."""
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    metric = _metric(study)
    ax.set_title(f"{study.study_name}: importance for {metric}")
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(completed) < IMPORTANCE_MIN_TRIALS:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            f"importance needs {IMPORTANCE_MIN_TRIALS} completed trials ({len(completed)} so far)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return
    found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    names = list(reversed(found))  # barh draws bottom up: the most important on top
    bars = ax.barh(names, [found[n] for n in names], color="tab:blue")
    ax.bar_label(bars, fmt="%.3f", fontsize="small", padding=2)
    ax.set_xlabel("importance (PED-ANOVA)")


#: Each kind's drawing function.
DRAW = {"learning_curves": learning_curves, "parallel_coordinates": parallel_coordinates, "importance": importance}


def draw(study: optuna.Study, kind: str, ax: Any) -> None:
    """Draw ``kind`` (one of :data:`KINDS`) of ``study`` on the matplotlib ``ax``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in DRAW:
        raise ValueError(f"unknown kind of plot {kind!r}: one of {', '.join(KINDS)}")
    DRAW[kind](study, ax)


def plot(
    analysis: ExperimentAnalysis, kind: str, metric: str | None = None, mode: str | None = None, ax: Any = None
) -> Any:
    """Draw ``kind`` of ``analysis`` on ``ax`` (a new pyplot figure's when None); return the ``Axes``.

    Raises:
        ValueError: an unknown ``kind``; no metric or mode here nor in the analysis (or several objectives), a
            bad mode.
        ImportError: matplotlib or Optuna is not installed.
    """
    if kind not in DRAW:
        raise ValueError(f"unknown kind of plot {kind!r}: one of {', '.join(KINDS)}")
    _matplotlib()
    study = _study(analysis, metric, mode)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    draw(study, kind, ax)
    return ax


def save(
    analysis: ExperimentAnalysis,
    out: str,
    kinds: Sequence[str] = KINDS,
    metric: str | None = None,
    mode: str | None = None,
) -> Any:
    """Write ``kinds`` of ``analysis`` to the image file ``out``, one below the other; return the figure.

    Args:
        analysis: the experiment, read from storage.
        out: the file; its suffix picks the format (``.png``, ``.svg``, ``.pdf``: anything matplotlib writes).
        kinds: which pictures, of :data:`KINDS`.
        metric, mode: default the analysis's.

    Returns:
        The matplotlib ``Figure`` written (not attached to pyplot), 9 by 5 inches per kind, 100 dots per inch.

    Raises:
        ValueError: an unknown kind, a format matplotlib does not write, no metric or mode (or several objectives).
        OSError: ``out`` cannot be written.
    """
    unknown = [k for k in kinds if k not in DRAW]
    if unknown or not kinds:
        raise ValueError(f"unknown kind of plot {unknown or kinds!r}: one or more of {', '.join(KINDS)}")
    _matplotlib()
    from matplotlib.figure import Figure

    study = _study(analysis, metric, mode)
    figure = Figure(figsize=(9, 5 * len(kinds)), dpi=100, layout="constrained")
    for ax, kind in zip(figure.subplots(len(kinds), 1, squeeze=False)[:, 0], kinds):
        draw(study, kind, ax)
    figure.savefig(out)
    return figure
