"""Ray Tune's status table for a kubetune Experiment: how its progress is shown, and nothing else.

Owns the rendering of an Experiment and its Trials, the objects as the Kubernetes API returns them
(dicts): a headline (experiment, phase, trials per phase, elapsed time, best trial and its metric),
the Experiment's conditions worth a look, and one row per trial (name, status, the searched config
keys with the values the trial runs with now, its ``status.config`` when set: values drawn for
``sample_from`` functions, a PBT exploit's config; iteration, total time, the metric, extra result columns
and why a trial stopped or failed),
at most ``max_rows`` of them, as Ray Tune's ``CLIReporter`` / ``JupyterNotebookReporter`` print it.
It reads nothing from the cluster: callers poll the API and hand the objects to
:meth:`StatusTable.update`. Callers: the Python SDK (``kubetune.run``, ``Tuner.fit``), the
``kubetune watch`` command and the ``make demo`` runner (``examples/digits/demo.py``).

:class:`StatusTable` repaints in place (rich ``Live``) on a terminal or in Jupyter; elsewhere (logs,
pipes) it prints the headline at most every ``interval_s`` seconds and the whole table once at the
end. :func:`status_renderable` and :func:`status_lines` are the same view as a rich renderable and as
plain text lines.

Needs rich (the ``sdk`` extra); the trial pod never imports this module.
"""

from __future__ import annotations

import importlib.util
import re
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kubetune.resultkeys import is_number, lookup, spec_objectives
from kubetune.sdk.experiment_summary import parse_time
from kubetune.search import DOMAIN_NAMES
from kubetune.shipping import is_function

__all__ = [
    "CLIReporter",
    "FINAL_PHASES",
    "JupyterNotebookReporter",
    "ProgressReporter",
    "StatusTable",
    "TRIAL_PHASES",
    "condition_line",
    "format_duration",
    "format_value",
    "headline",
    "noteworthy",
    "phase_counts",
    "searched_keys",
    "status_lines",
    "status_renderable",
]

#: Phases of a Trial, in the order the headline counts them.
TRIAL_PHASES = ("Pending", "Running", "Paused", "Succeeded", "Failed")
#: Phases after which an Experiment changes no more.
FINAL_PHASES = ("Succeeded", "Failed")
#: Row order by phase: Ray's (ERROR, PAUSED, PENDING, RUNNING, TERMINATED), in kubetune's names.
SORT_ORDER = ("Failed", "Paused", "Pending", "Running", "Succeeded")
PHASE_STYLES = {"Pending": "yellow", "Running": "cyan", "Paused": "magenta", "Succeeded": "green", "Failed": "red"}
#: Experiment conditions shown under the headline: the status that makes each worth a look, and its style.
NOTEWORTHY_CONDITIONS = {
    "Ready": ("False", "red"),
    "Degraded": ("True", "red"),
    "Failed": ("True", "red"),
    "TrialsWaiting": ("True", "yellow"),
    "TrialsStalled": ("True", "yellow"),
    "Complete": ("True", "green"),
}
#: Reasons of a True ``Running`` condition that say nothing more than the phase; any other is an end reason
#: (``MetricMissing``, ``GoalReached``...) while the last trials stop, and is shown.
ROUTINE_RUNNING_REASONS = ("TrialsRunning", "TrialsPending")
#: Longest reason cell, in characters.
MAX_NOTE_CHARS = 60
#: Narrowest the reason column gets on a narrow console, in characters.
MIN_REASON_WIDTH = 12
#: Longest condition line, in characters.
MAX_CONDITION_CHARS = 120


def searched_keys(space: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Keys of a parameter space (an Experiment's ``spec.config``) that are search domains or ``sample_from``
    functions (whose values a trial's ``status.config`` shows once its pod drew them), as Ray's table shows them.

    Args:
        space: the space in its JSON form, e.g. ``{"lr": {"loguniform": [1e-4, 0.1]}, "seed": 0}``.
        prefix: prepended to every key (used for nested spaces).

    Returns:
        The keys in the space's order, nested ones as ``a/b``; constants are left out.
    """
    keys = []
    for key, value in space.items():
        if (isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in DOMAIN_NAMES) or is_function(value):
            keys.append(prefix + key)
        elif isinstance(value, Mapping):
            keys.extend(searched_keys(value, f"{prefix}{key}/"))
    return keys


def format_value(value: Any) -> str:
    """One table cell: floats with 4 significant digits, a missing value blank, anything else as ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_duration(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def phase_counts(trials: Sequence[Mapping]) -> dict[str, int]:
    """Trials per phase, every one of :data:`TRIAL_PHASES` in that order (a Trial without a phase is Pending)."""
    counts = dict.fromkeys(TRIAL_PHASES, 0)
    for trial in trials:
        phase = _phase(trial)
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def headline(experiment: Mapping, trials: Sequence[Mapping], now: datetime | None = None) -> str:
    """One line: the Experiment's name and phase, its trials per phase, elapsed time and best trial.

    Args:
        experiment: the Experiment object.
        trials: its Trial objects. Without any, the counts come from the Experiment's ``status.trials``.
        now: the time elapsed is counted to while the Experiment runs (default: the current time).

    Returns:
        E.g. ``Experiment digits: Running | 8 trials: 4 running, 4 succeeded | elapsed 0:01:05 |
        best mean_accuracy 0.9712 (digits-3)``. The elapsed time (from ``metadata.creationTimestamp`` to
        ``status.completionTime`` or ``now``) is left out when the Experiment has no creation time.
    """
    status = experiment.get("status") or {}
    if trials:
        counts, total = phase_counts(trials), len(trials)
    else:
        reported = status.get("trials") or {}
        counts = {phase: reported.get(phase.lower(), 0) for phase in TRIAL_PHASES}
        total = reported.get("total", 0)
    per_phase = ", ".join(f"{n} {phase.lower()}" for phase, n in counts.items() if n)
    parts = [
        f"Experiment {experiment['metadata']['name']}: {status.get('phase') or 'Pending'}",
        f"{total} {_trials(total)}{': ' + per_phase if per_phase else ''}",
    ]
    elapsed = _elapsed(experiment, now)
    if elapsed is not None:
        parts.append(f"elapsed {format_duration(elapsed)}")
    best = status.get("bestTrial") or {}
    if best.get("metricValue") is not None:
        parts.append(
            f"best {(experiment.get('spec') or {}).get('metric')} {format_value(float(best['metricValue']))} "
            f"({best.get('name')})"
        )
    return " | ".join(parts)


def status_renderable(
    experiment: Mapping,
    trials: Sequence[Mapping],
    *,
    metric_columns: Sequence[str] | Mapping[str, str] | None = None,
    max_rows: int | None = 20,
    now: datetime | None = None,
) -> Group:
    """The status view as a rich renderable: headline, noteworthy conditions, the trial table, "... more".

    Args:
        experiment: the Experiment object.
        trials: its Trial objects, in any order.
        metric_columns: result keys shown after the metric, as a list or as ``{key: column title}``
            (Ray's ``metric_columns``).
        max_rows: most trial rows (Ray's ``max_progress_rows``); None shows every trial.
        now: see :func:`headline`.
    """
    view = _View(experiment, trials, metric_columns, max_rows)
    table = Table(show_edge=False, header_style="bold")
    for i, (title, right) in enumerate(view.columns):
        # On a narrow console titles and reasons wrap; the values keep their width.
        widest = max((len(cells[i]) for _, cells in view.rows), default=0)
        table.add_column(
            title,
            justify="right" if right else "left",
            min_width=min(widest, MIN_REASON_WIDTH) if title == "reason" else widest,
        )
    for trial, cells in view.rows:
        phase = _phase(trial)
        table.add_row(
            cells[0],
            Text(cells[1], style=PHASE_STYLES.get(phase, "")),
            *cells[2:],
            style="bold" if _name(trial) == view.best else None,
        )
    parts: list[Any] = [Text(headline(experiment, trials, now), style="bold")]
    parts.extend(Text(line, style=style) for line, style in view.conditions)
    parts.append(table)
    if view.footer:
        parts.append(Text(view.footer, style="dim"))
    return Group(*parts)


def status_lines(
    experiment: Mapping,
    trials: Sequence[Mapping],
    *,
    metric_columns: Sequence[str] | Mapping[str, str] | None = None,
    max_rows: int | None = 20,
    now: datetime | None = None,
) -> list[str]:
    """The status view as plain text lines, for logs: the same content as :func:`status_renderable`.

    Args:
        experiment: the Experiment object.
        trials: its Trial objects, in any order.
        metric_columns: see :func:`status_renderable`.
        max_rows: see :func:`status_renderable`.
        now: see :func:`headline`.

    Returns:
        The headline, one line per noteworthy condition, the column titles, a rule, one line per shown
        trial (columns padded to a common width, numbers right-aligned) and the "... more trials" line
        when rows were left out. No line has trailing spaces.
    """
    view = _View(experiment, trials, metric_columns, max_rows)
    widths = [
        max([len(title)] + [len(cells[i]) for _, cells in view.rows]) for i, (title, _) in enumerate(view.columns)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, (_, right) in zip(cells, widths, view.columns)
        ).rstrip()

    lines = [
        headline(experiment, trials, now),
        *(text for text, _ in view.conditions),
        line([title for title, _ in view.columns]),
        "  ".join("-" * width for width in widths),
    ]
    lines.extend(line(cells) for _, cells in view.rows)
    if view.footer:
        lines.append(view.footer)
    return lines


class StatusTable:
    """Shows an Experiment's progress while it runs (Ray Tune's ``ProgressReporter``).

    On a terminal or in Jupyter (with ipywidgets) every :meth:`update` repaints the table in place
    (rich ``Live``); the last one stays on screen. Elsewhere the headline is printed at most every
    ``interval_s`` seconds (the whole table each time with ``intermediate_tables``, Ray's
    ``print_intermediate_tables``), and the whole table once when the Experiment has ended, or at
    :meth:`close` for the last state seen if it had not.

    Example::

        with StatusTable(metric_columns=["mean_loss"]) as table:
            while True:
                experiment, trials = read_them()
                table.update(experiment, trials)
                ...

    Args:
        metric_columns: see :func:`status_renderable`.
        max_rows: see :func:`status_renderable`.
        console: where to write (default: a new rich ``Console`` on stdout).
        interval_s: least seconds between two printouts when not repainting in place.
        intermediate_tables: print the whole table, not only the headline, at every printout.
        clock: monotonic seconds, for the interval (injectable for tests).
    """

    def __init__(
        self,
        metric_columns: Sequence[str] | Mapping[str, str] | None = None,
        max_rows: int | None = 20,
        console: Console | None = None,
        *,
        interval_s: float = 5.0,
        intermediate_tables: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.metric_columns = metric_columns
        self.max_rows = max_rows
        self.console = console if console is not None else Console()
        self.interval_s = interval_s
        self.intermediate_tables = intermediate_tables
        self._clock = clock
        self._in_place = (self.console.is_jupyter and importlib.util.find_spec("ipywidgets") is not None) or (
            self.console.is_terminal and not self.console.is_dumb_terminal
        )
        self._live: Live | None = None
        self._last: tuple[Mapping, Sequence[Mapping]] | None = None
        self._last_printed = False  # the last state seen was printed as a whole table
        self._printed_at: float | None = None
        self._ended = False

    def update(self, experiment: Mapping, trials: Sequence[Mapping]) -> None:
        """Show this state of ``experiment`` and its ``trials`` (the objects as the API returns them)."""
        if self._in_place:
            if self._live is None:
                self._live = Live(console=self.console, auto_refresh=False, transient=False)
                self._live.start()
            self._live.update(
                status_renderable(experiment, trials, metric_columns=self.metric_columns, max_rows=self.max_rows),
                refresh=True,
            )
            return
        if self._ended:
            return  # its final table is printed
        self._last, self._last_printed = (experiment, trials), False
        now = self._clock()
        if (experiment.get("status") or {}).get("phase") in FINAL_PHASES:
            self._ended = True
            self._print_table()
        elif self._printed_at is None or now - self._printed_at >= self.interval_s:
            if self.intermediate_tables:
                self._print_table()
            else:
                self._print(headline(experiment, trials))
            self._printed_at = now

    def close(self) -> None:
        """Stop repainting, leaving the last state on screen; elsewhere print it in full unless already printed."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self._last is not None and not self._last_printed:
            self._print_table()

    def __enter__(self) -> StatusTable:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _print_table(self) -> None:
        experiment, trials = self._last
        self._print(
            "\n".join(status_lines(experiment, trials, metric_columns=self.metric_columns, max_rows=self.max_rows))
        )
        self._last_printed = True

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


#: Ray's base name for a progress reporter.
ProgressReporter = StatusTable


def CLIReporter(
    metric_columns: Sequence[str] | Mapping[str, str] | None = None,  # noqa: N802 - Ray's name
    max_progress_rows: int = 20,
    max_report_frequency: float = 5.0,
    print_intermediate_tables: bool | None = None,
    **ignored: Any,
) -> StatusTable:
    """Ray's ``CLIReporter`` arguments → a :class:`StatusTable` (``parameter_columns``, ``sort_by_metric``
    and the other display options of Ray are accepted and ignored: the searched keys are always shown)."""
    return StatusTable(
        metric_columns,
        max_progress_rows,
        interval_s=max_report_frequency,
        intermediate_tables=bool(print_intermediate_tables),
    )


#: Ray's notebook reporter: the same table, which repaints in place in Jupyter.
JupyterNotebookReporter = CLIReporter


class _View:
    """What both renderings show: the columns, the chosen rows as cells, the conditions and the footer.

    Attributes:
        columns: ``(title, right_aligned)`` per column.
        rows: ``(trial, cells)`` per shown trial, in display order.
        conditions: ``(line, style)`` per noteworthy Experiment condition (:func:`noteworthy`).
        footer: ``"... N more trials not shown (...)"``, or "" when every trial is shown.
        best: name of the best trial ("" when there is none yet).
    """

    def __init__(
        self,
        experiment: Mapping,
        trials: Sequence[Mapping],
        metric_columns: Sequence[str] | Mapping[str, str] | None,
        max_rows: int | None,
    ):
        spec, status = experiment.get("spec") or {}, experiment.get("status") or {}
        metric, mode = spec_objectives(spec)
        # several objectives (spec.objectives): a column each, and no single metric to rank trials by
        metrics = list(metric) if isinstance(metric, list) else [metric] if metric else []
        if isinstance(metric, list):
            metric = mode = None
        extra = dict(metric_columns) if isinstance(metric_columns, Mapping) else {k: k for k in metric_columns or ()}
        for key in metrics:
            extra.pop(key, None)
        keys = searched_keys(spec.get("config") or {})
        self.best = (status.get("bestTrial") or {}).get("name") or ""
        shown = _choose(trials, self.best, metric, mode, max_rows)
        notes = [_note(trial) for trial in shown]
        with_notes = any(notes)
        self.columns = [
            ("Trial name", False),
            ("status", False),
            *((key, False) for key in keys),
            ("iter", True),
            ("total time (s)", True),
            *((key, True) for key in metrics),
            *((title, True) for title in extra.values()),
        ]
        if with_notes:
            self.columns.append(("reason", False))
        self.rows = []
        for trial, note in zip(shown, notes):
            trial_status = trial.get("status") or {}
            last = trial_status.get("lastResult") or {}
            config = trial_status.get("config") or (trial.get("spec") or {}).get("config") or {}
            time_total = last.get("time_total_s")
            cells = [
                trial_status.get("displayName") or _name(trial),  # Ray's str(trial): the trial_name_creator's name
                _phase(trial),
                *("" if is_function(value) else format_value(value) for value in (lookup(config, k) for k in keys)),
                format_value(trial_status.get("iteration", last.get("training_iteration"))),
                "" if time_total is None else f"{time_total:.2f}",
            ]
            cells.extend(format_value(_metric_value(trial, key)) for key in metrics)
            cells.extend(format_value(last.get(key)) for key in extra)
            if with_notes:
                cells.append(note)
            self.rows.append((trial, cells))
        self.conditions = [(condition_line(cond), style) for cond, style in noteworthy(status.get("conditions"))]
        hidden = len(trials) - len(shown)
        if hidden:
            names = {_name(trial) for trial in shown}
            left = phase_counts([trial for trial in trials if _name(trial) not in names])
            self.footer = (
                f"... {hidden} more {_trials(hidden)} not shown ("
                + ", ".join(f"{n} {phase}" for phase, n in left.items() if n)
                + ")"
            )
        else:
            self.footer = ""


def _choose(
    trials: Sequence[Mapping], best: str, metric: str | None, mode: str | None, max_rows: int | None
) -> list[Mapping]:
    """The trials that get a row, sorted as Ray sorts them (by phase in :data:`SORT_ORDER`, then name).

    With more trials than ``max_rows``: the best trial first, then the running ones, then the other
    phases in turns (each phase's best metric first), so that every phase shows, as Ray's fair filter.
    """
    ordered = sorted(trials, key=_sort_key)
    if max_rows is None or len(ordered) <= max_rows:
        return ordered
    first = [t for t in ordered if _name(t) == best] + [
        t for t in ordered if _phase(t) == "Running" and _name(t) != best
    ]
    chosen = {_name(t) for t in first[:max_rows]}
    queues = [
        sorted(
            (t for t in ordered if _phase(t) == phase and _name(t) not in chosen), key=lambda t: _rank(t, metric, mode)
        )
        for phase in SORT_ORDER
    ]
    queues.append([t for t in ordered if _phase(t) not in SORT_ORDER and _name(t) not in chosen])
    while len(chosen) < max_rows:
        for queue in queues:
            if queue and len(chosen) < max_rows:
                chosen.add(_name(queue.pop(0)))
    return [t for t in ordered if _name(t) in chosen]


def _trials(count: int) -> str:
    return "trial" if count == 1 else "trials"


def _name(trial: Mapping) -> str:
    return trial["metadata"]["name"]


def _phase(trial: Mapping) -> str:
    return (trial.get("status") or {}).get("phase") or "Pending"


def _sort_key(trial: Mapping) -> tuple:
    phase = _phase(trial)
    rank = SORT_ORDER.index(phase) if phase in SORT_ORDER else len(SORT_ORDER)
    # Names end with the trial's index: "-10" after "-9", as Ray's zero-padded trial ids sort.
    return rank, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", _name(trial))]


def _rank(trial: Mapping, metric: str | None, mode: str | None) -> tuple:
    """Best metric first (by ``mode``), trials without one last, then by name."""
    value = _metric_value(trial, metric) if metric else None
    if value is None:
        return (1, 0.0, _sort_key(trial))
    return (0, -value if mode == "max" else value, _sort_key(trial))


def _metric_value(trial: Mapping, metric: str) -> float | None:
    status = trial.get("status") or {}
    value = status.get("metricValue")
    if value is None:
        value = (status.get("lastResult") or {}).get(metric)
    return value if is_number(value) else None


def _note(trial: Mapping) -> str:
    """Why a trial is where it is: its reason (unless it just repeats the phase) and its message's last line."""
    status = trial.get("status") or {}
    reason = status.get("reason") or ""
    if reason == _phase(trial):
        reason = ""
    message = _last_line(status.get("message") or "")
    if message and message != reason:
        return _shorten(f"{reason}: {message}" if reason else message)
    return reason


def noteworthy(conditions: Sequence[Mapping] | None) -> list[tuple[Mapping, str]]:
    """The Experiment conditions worth a look, each with its style: those of :data:`NOTEWORTHY_CONDITIONS` in
    the status given there, and ``Running`` while the Experiment ends for a reason (its last trials stop)."""
    out = []
    for cond in conditions or ():
        kind, status = cond.get("type"), cond.get("status")
        if kind == "Running" and status == "True" and cond.get("reason") not in ROUTINE_RUNNING_REASONS:
            out.append((cond, "yellow"))
        elif NOTEWORTHY_CONDITIONS.get(kind, ("",))[0] == status:
            out.append((cond, NOTEWORTHY_CONDITIONS[kind][1]))
    return out


def condition_line(cond: Mapping) -> str:
    """One line for a condition: ``type (reason): the message's last line``, at most :data:`MAX_CONDITION_CHARS`."""
    message = _last_line(cond.get("message") or "")
    return _shorten(f"{cond['type']} ({cond.get('reason')})" + (f": {message}" if message else ""), MAX_CONDITION_CHARS)


def _last_line(text: str) -> str:
    """The last non-blank line: the exception of a traceback."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _shorten(text: str, limit: int = MAX_NOTE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _elapsed(experiment: Mapping, now: datetime | None) -> float | None:
    """Seconds from the Experiment's creation to its completion, or to ``now`` while it runs."""
    created = _timestamp((experiment.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return None
    end = _timestamp((experiment.get("status") or {}).get("completionTime")) or now or datetime.now(timezone.utc)
    return max(0.0, (end - created).total_seconds())


def _timestamp(value: Any) -> datetime | None:
    """An RFC 3339 time as the API returns it (``2024-05-01T12:00:00Z``), or a datetime; None stays None."""
    if value is None or isinstance(value, datetime):
        return value
    return parse_time(str(value))
