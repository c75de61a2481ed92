"""What the dashboard shows of an Experiment's cluster objects: Trial status columns and Markdown notes.

Owns what Optuna Dashboard shows, beside the trials read from storage, of the Experiment and its Trials as the
Kubernetes API holds them, through Optuna Dashboard's own features (no page of ours):

* each trial's user attributes (columns of the trial table), from its Trial's status (:func:`trial_attrs`):
  ``phase``, ``reason``, ``pending_cause`` and ``attempt``;
* the study's note (Markdown, Optuna Dashboard's Note tab; :func:`cluster_section`): the Experiment's conditions
  (type, status, reason, message, last transition) as a table, the Trials that wait for their pod (reason and
  message), and the last :data:`MAX_EVENTS` Events about the Experiment or its Trials (last seen, type, reason,
  object, message), as ``kubectl describe`` and ``kubectl get events`` show them;
* each trial's note (:func:`trial_note`): its status (phase, reason, attempt, pod, message) and the last
  :data:`LOG_LINES` lines of its current pod's log (container ``trial``, the user's own output), as a terminal
  shows them (:func:`clean_log`: no colour codes, a progress bar's last state, long lines cut).

Callers: :mod:`kubetune.sdk.experiment_studies` (the experiment list, ``kubetune dashboard``) and
:mod:`kubetune.sdk.dashboard` (one Experiment that exists in the cluster, ``kubetune dashboard NAME``), whose
refresh thread calls :meth:`ClusterNotes.refresh` at each refresh; :mod:`kubetune.sdk.cli` makes the
:class:`ClusterNotes` of both over its :class:`kubetune.sdk.client.Cluster` (the user's kubeconfig), through which
the cluster is read (a :class:`ClusterReader`; tests give a fake one).

Bounds: the cluster is read at most every ``interval_s`` seconds (one list of the Trials and one of kubetune's
Events per namespace shown); at most ``max_logs`` pod logs are read per such refresh, each its last
:data:`LOG_LINES` lines (at most :data:`kubetune.sdk.client.LOG_TAIL_BYTES` bytes), and only of a trial whose
pod runs or ended since its log was last read: a pod whose trial's phase is new to the notes first (an ended one's
before a running one's), then those whose trial is ``Running`` again (the longest unread first); an ended one is
read once, a pending one never (its container has not started). A trial gets a note once it has something to say
beyond its columns (a log read, a status message), and at most :data:`MAX_TRIAL_NOTES` trials of a study do (the
first to have one; their logs alone are read then; the study's note says how many have none). Each read is
bounded by :data:`kubetune.sdk.client.READ_TIMEOUT_S`. A read that fails (refused by RBAC, a pod gone, no
answer) is said in the note, never raised. Nothing is written to the cluster.

Secrets: the notes hold what the Trials' and Experiment's status and Events say and what the trial container
printed, nothing else of the pod (no environment, no token); an API error is shown by its status and the API
server's own message alone.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from kubetune.sdk.experiment_summary import age, parse_time

if TYPE_CHECKING:
    import optuna

    from kubetune.sdk.live_study import LiveStudy

__all__ = [
    "ATTR_KEYS",
    "ClusterNotes",
    "ClusterReader",
    "LogRead",
    "DEFAULT_NOTES_S",
    "LOG_LINES",
    "MAX_LOG_LINE",
    "MAX_EVENTS",
    "MAX_LOGS_PER_REFRESH",
    "MAX_TRIAL_NOTES",
    "Shown",
    "clean_log",
    "cluster_section",
    "conditions_table",
    "events_table",
    "fenced",
    "read_error",
    "trial_attrs",
    "trial_note",
    "waiting_table",
]

log = logging.getLogger(__name__)

#: Seconds between two reads of the cluster for the notes (the dashboard refreshes more often).
DEFAULT_NOTES_S = 5.0
#: Most pod logs read per refresh of the notes.
MAX_LOGS_PER_REFRESH = 8
#: Lines of a trial pod's log its note shows (the last ones).
LOG_LINES = 50
#: Longest log line a trial's note shows, in characters (the rest cut, with "…").
MAX_LOG_LINE = 400
#: Most trials of one study with a note. Optuna Dashboard keeps the notes in the study's system attributes and,
#: for each trial with a note it serves, reads every one of them: serving a study costs (trials with a note) x
#: (notes): 0.6 s for 1,000 noted trials and 10 s for 3,000 on a loaded 2-core machine, 0.2 s for 300 notes of
#: 3,000 characters.
MAX_TRIAL_NOTES = 300
#: Events the study's note lists (the newest).
MAX_EVENTS = 20
#: Trials waiting for their pod the study's note lists (then how many more).
MAX_WAITING = 20
#: Longest message in a table cell, in characters (the rest cut, with "…").
MAX_CELL = 300
#: The user attributes :func:`trial_attrs` gives every trial, in the trial table's order.
ATTR_KEYS = ("phase", "reason", "pending_cause", "attempt")
#: Trial phases whose pod has run or runs, so has a log to read.
_LOGGED_PHASES = ("Running", "Succeeded", "Failed")
_TRIAL_KIND, _EXPERIMENT_KIND = "Trial", "Experiment"


class ClusterReader(Protocol):
    """The cluster's reads the notes need (:class:`kubetune.sdk.client.Cluster` has them); each raises what the
    Kubernetes client raises (``ApiException`` for a refusal, urllib3's errors for no answer)."""

    def list_trials(self, namespace: str) -> list[dict]:
        """Every Trial of ``namespace``, as the API returns them."""

    def list_events(self, namespace: str) -> list[dict]:
        """The Events of ``namespace`` about kubetune's objects, as the API returns them."""

    def log_tail(self, namespace: str, pod: str, lines: int) -> str:
        """The last ``lines`` lines of the log of container ``trial`` of ``pod``."""


def read_error(exc: BaseException) -> str:
    """One line saying why a read failed, for a note: an ``ApiException``'s status and the API server's message
    (never its headers), else the exception's type and text."""
    status = getattr(exc, "status", None)
    if status is not None and hasattr(exc, "body"):
        from kubetune.sdk.client import api_message

        message = api_message(exc)
        return message if message.startswith(str(status)) else f"{status} {getattr(exc, 'reason', '')}: {message}"
    return f"{type(exc).__name__}: {exc}"


def _line(value: Any, limit: int = MAX_CELL) -> str:
    """``value`` as text on one line (its whitespace runs one space), cut at ``limit`` characters with "…"."""
    text = " ".join(str("" if value is None else value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(value: Any, limit: int = MAX_CELL) -> str:
    """``value`` as one cell of a Markdown table: :func:`_line`, ``\\`` and ``|`` escaped."""
    return _line(value, limit).replace("\\", "\\\\").replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown (GitHub's) table of ``rows`` under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def fenced(text: str, info: str = "text") -> str:
    """``text`` as a Markdown code block, its fence longer than any run of backticks in it (so nothing in it can
    end the block), ``info`` its language."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def trial_attrs(trial: Mapping[str, Any]) -> dict[str, Any]:
    """The user attributes of a Trial's Optuna trial that come from its status (:data:`ATTR_KEYS`).

    Args:
        trial: the Trial as the API returns it (``status`` may be missing: just created).

    Returns:
        ``{"phase": str, "reason": str, "pending_cause": str, "attempt": int}``: the phase (``Pending`` while
        none is written), the reason (``""`` when none), why it waits for its pod while ``Pending`` (the
        status message, e.g. the scheduler's for ``Unschedulable``, else the reason; ``""`` in other phases),
        the current attempt (0 first). Every key each time: Optuna cannot delete a user attribute.
    """
    status = _status(trial)
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    cause = ""
    if phase == "Pending":
        cause = _line(status.get("message") or reason or "not scheduled yet")
    attempt = status.get("attempt")
    return {
        "phase": phase,
        "reason": reason,
        "pending_cause": cause,
        "attempt": attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
    }


def _parse(timestamp: str | None) -> datetime.datetime | None:
    if not timestamp:
        return None
    try:
        return parse_time(timestamp)
    except ValueError:
        return None


def conditions_table(experiment: Mapping[str, Any], now: datetime.datetime) -> str:
    """The Experiment's ``status.conditions`` as a Markdown table (in the status's order), or a line saying it
    has none yet.

    Args:
        experiment: the Experiment as the API returns it.
        now: the time ages are counted to (aware).

    Returns:
        Markdown: ``| Type | Status | Reason | Message | Last transition |`` rows, the last transition as
        ``<RFC 3339> (<age> ago)``.
    """
    conditions = _status(experiment).get("conditions") or []
    if not conditions:
        return "No conditions yet (the operator has not written the Experiment's status)."
    rows = []
    for condition in conditions:
        when = condition.get("lastTransitionTime")
        rows.append(
            (
                condition.get("type"),
                condition.get("status"),
                condition.get("reason"),
                condition.get("message"),
                f"{when} ({age(when, now)} ago)" if when else "",
            )
        )
    return _table(("Type", "Status", "Reason", "Message", "Last transition"), rows)


def _event_time(event: Mapping[str, Any]) -> str:
    """When ``event`` was last seen: ``lastTimestamp``, else ``eventTime``, else ``firstTimestamp``, else its
    creation (RFC 3339 text; "" when none)."""
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return str(event[key])
    return str((event.get("metadata") or {}).get("creationTimestamp") or "")


def _about(event: Mapping[str, Any], experiment: str, trials: set[str]) -> bool:
    involved = event.get("involvedObject") or {}
    kind, name = involved.get("kind"), involved.get("name")
    return (kind == _EXPERIMENT_KIND and name == experiment) or (kind == _TRIAL_KIND and name in trials)


def events_table(
    events: Iterable[Mapping[str, Any]],
    experiment: str,
    trials: Iterable[str],
    now: datetime.datetime,
    limit: int = MAX_EVENTS,
) -> str:
    """The newest ``limit`` of ``events`` about Experiment ``experiment`` or its Trials ``trials`` (by name, in its
    namespace) as a Markdown table, newest first, or a line saying there are none.

    Args:
        events: Events as the API returns them (those of the namespace: others are left out here).
        experiment: the Experiment's name.
        trials: its Trials' names.
        now: the time ages are counted to (aware).
        limit: most rows.

    Returns:
        Markdown: ``| Last seen | Type | Reason | Object | Message |`` rows (``kubectl get events``' columns; the
        object ``experiment/<name>`` or ``trial/<name>``; ``(×N)`` after the message of an Event seen N > 1 times).
    """
    names = set(trials)
    about = [e for e in events if _about(e, experiment, names)]
    about.sort(key=lambda e: _parse(_event_time(e)) or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc))
    newest = list(reversed(about))[:limit]
    if not newest:
        return "No events about the Experiment or its Trials (the API server keeps them an hour by default)."
    rows = []
    for event in newest:
        involved = event.get("involvedObject") or {}
        count = event.get("count") or 1
        message = event.get("message") or ""
        rows.append(
            (
                f"{age(_event_time(event) or None, now)} ago",
                event.get("type"),
                event.get("reason"),
                f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
                f"{message} (×{count})" if count > 1 else message,
            )
        )
    table = _table(("Last seen", "Type", "Reason", "Object", "Message"), rows)
    more = len(about) - len(newest)
    return table if more <= 0 else f"{table}\n\n…and {more} older."


def waiting_table(trials: Sequence[Mapping[str, Any]], limit: int = MAX_WAITING) -> str | None:
    """The Trials that wait for their pod (phase ``Pending``) with why, as a Markdown table; None when none waits.

    Returns:
        ``| Trial | Attempt | Reason | Message |`` rows, at most ``limit``, then how many more wait.
    """
    waiting = [t for t in trials if trial_attrs(t)["phase"] == "Pending"]
    if not waiting:
        return None
    rows = []
    for trial in waiting[:limit]:
        status = _status(trial)
        rows.append((trial["metadata"]["name"], status.get("attempt", 0), status.get("reason"), status.get("message")))
    table = _table(("Trial", "Attempt", "Reason", "Message"), rows)
    more = len(waiting) - limit
    return table if more <= 0 else f"{table}\n\n…and {more} more waiting."


def cluster_section(
    experiment: Mapping[str, Any],
    trials: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]] | str,
    now: datetime.datetime,
    *,
    trials_error: str | None = None,
    experiment_error: str | None = None,
) -> str:
    """The part of the study's note that the cluster says: the Experiment's conditions, its waiting Trials and the
    Events about it and its Trials (module docstring).

    Args:
        experiment: the Experiment as the API returns it (as last read).
        trials: its Trials.
        events: the Events of its namespace about kubetune's objects, or why they cannot be read (one line).
        now: the time ages are counted to (aware).
        trials_error: why its Trials cannot be read now, when they cannot.
        experiment_error: why the Experiment cannot be read now (the note shows it as last read).

    Returns:
        Markdown, headed ``### Conditions``, ``### Trials waiting`` (when any waits) and ``### Events``.
    """
    parts = []
    if experiment_error:
        parts.append(f"*The Experiment cannot be read now ({_cell(experiment_error)}); as last read:*")
    parts += ["### Conditions", conditions_table(experiment, now)]
    if trials_error:
        parts += ["### Trials", f"The Trials cannot be read: {_cell(trials_error)}."]
    else:
        waiting = waiting_table(trials)
        if waiting:
            parts += ["### Trials waiting for their pod", waiting]
    parts.append("### Events")
    if isinstance(events, str):
        parts.append(f"The Events cannot be read: {_cell(events)}.")
    else:
        names = [t["metadata"]["name"] for t in trials]
        parts.append(events_table(events, experiment["metadata"]["name"], names, now))
    return "\n\n".join(parts)


@dataclass
class LogRead:
    """What was last read of a trial's pod log.

    Attributes:
        pod: the pod read.
        phase: its Trial's phase when read.
        text: the last lines read (:func:`clean_log`'s), or None when none was ever read of this pod.
        error: why the last read failed (:func:`read_error`), when it did and the pod was not gone.
        gone: whether the last read found the pod deleted (404).
        read_at: when it was read, in seconds since the epoch.
    """

    pod: str
    phase: str
    text: str | None = None
    error: str | None = None
    gone: bool = False
    read_at: float = 0.0


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def clean_log(text: str, lines: int = LOG_LINES, width: int = MAX_LOG_LINE) -> str:
    """The last ``lines`` lines of the log ``text`` as a terminal would show them: terminal escape sequences
    (colours) dropped, each line what follows its last carriage return (a progress bar's last state), cut at
    ``width`` characters with "…".

    Returns:
        The lines, each ending with a newline ("" for an empty log).
    """
    found = _ANSI.sub("", text).replace("\r\n", "\n").split("\n")  # not splitlines(): it splits at \r too
    if found[-1] == "":
        found.pop()
    shown = []
    for line in found[-lines:]:
        line = line.rsplit("\r", 1)[-1]
        shown.append(line if len(line) <= width else line[: width - 1] + "…")
    return "".join(f"{line}\n" for line in shown)


def trial_note(trial: Mapping[str, Any], log_state: LogRead | None, lines: int = LOG_LINES) -> str:
    """The Markdown note of a Trial's Optuna trial: its status, then the tail of its current pod's log.

    Args:
        trial: the Trial as the API returns it.
        log_state: what was last read of its pod's log (None: nothing yet).
        lines: how many lines a log read holds at most (for the heading).

    Returns:
        Markdown: ``**<phase>** · reason `<reason>` · attempt <n> · pod `<pod>```, the status message (a code
        block), then the log (a code block headed with the pod and when it was read; between two attempts, the
        last one's as last read), or why there is none.
    """
    status = _status(trial)
    attrs = trial_attrs(trial)
    pod = status.get("podName")
    head = [f"**{attrs['phase']}**"]
    if attrs["reason"]:
        head.append(f"reason `{attrs['reason']}`")
    head.append(f"attempt {attrs['attempt']}")
    if pod:
        head.append(f"pod `{pod}`")
    parts = [f"Trial `{trial['metadata']['name']}`: " + " · ".join(head)]
    message = status.get("message")
    if message:  # a traceback's end, the scheduler's words: as they are, not as Markdown
        parts += ["Message:", fenced(str(message))]
    if not pod:
        parts.append("No pod yet.")
        return "\n\n".join(parts)
    if log_state is None:
        reason = {
            "Pending": "its pod has not started",
            "Paused": "the trial is paused (checkpointed, its pod deleted)",
        }.get(attrs["phase"], "not read yet (a few pods' logs are read every few seconds)")
        parts.append(f"No log shown: {reason}.")
        return "\n\n".join(parts)
    read_at = datetime.datetime.fromtimestamp(log_state.read_at, datetime.timezone.utc).strftime("%H:%M:%S UTC")
    if log_state.gone:
        parts.append(
            f"Pod `{log_state.pod}` is gone (spec.podRetentionPolicy deletes the pods of succeeded attempts by "
            "default); the trial's results are in storage."
        )
    elif log_state.error:
        parts.append(f"The log of pod `{log_state.pod}` cannot be read ({read_at}): {_cell(log_state.error)}.")
    if log_state.text is not None:
        shown = log_state.text.rstrip("\n")
        words = "as last read" if log_state.gone or log_state.error else "read"
        parts.append(
            f"Last {lines} lines of the log of pod `{log_state.pod}` (container `trial`), {words} at {read_at}:"
        )
        parts.append(fenced(shown) if shown else "*(empty)*")
    return "\n\n".join(parts)


@dataclass
class Shown:
    """One Experiment the dashboard shows, for :meth:`ClusterNotes.refresh`.

    Attributes:
        experiment: the Experiment as the API returns it (as last read).
        study: its Optuna study.
        live: what keeps the study's trials in step with storage; None when the study has no trials (nothing in
            storage yet...): no trial attributes or notes then.
        head: Markdown put first in the study's note (the Experiment in a few words).
        error: why the Experiment cannot be read now (shown as last read), when it cannot.
    """

    experiment: dict
    study: optuna.Study
    live: LiveStudy | None
    head: str
    error: str | None = None


@dataclass
class _Reading:
    """One namespace's Trials by their owner's uid (or why they cannot be read) and its Events (or why not)."""

    trials: dict[str, list[dict]] = field(default_factory=dict)
    trials_error: str | None = None
    events: list[dict] | str = field(default_factory=list)


class ClusterNotes:
    """Reads the cluster for the Experiments shown (at most every ``interval_s`` seconds) and writes their trials'
    status columns and their studies' and trials' notes (module docstring).

    Args:
        reader: the cluster's reads.
        interval_s: seconds between two reads of the cluster.
        max_logs: most pod logs read per read of the cluster.
        log_lines: lines of each log read (its last ones).
        max_trial_notes: most trials of a study with a note (module docstring: a bound Optuna Dashboard's
            serving needs).
        clock: seconds since the epoch, now (tests pass their own).

    Attributes:
        interval_s, max_logs, log_lines, max_trial_notes, clock: as given.
    """

    def __init__(
        self,
        reader: ClusterReader,
        *,
        interval_s: float = DEFAULT_NOTES_S,
        max_logs: int = MAX_LOGS_PER_REFRESH,
        log_lines: int = LOG_LINES,
        max_trial_notes: int = MAX_TRIAL_NOTES,
        clock: Callable[[], float] = time.time,
    ):
        self.reader = reader
        self.interval_s = interval_s
        self.max_logs = max_logs
        self.log_lines = log_lines
        self.max_trial_notes = max_trial_notes
        self.clock = clock
        self._read_at: float | None = None
        self._readings: dict[str, _Reading] = {}
        self._logs: dict[tuple[str, str], LogRead] = {}  # by (namespace, trial)
        self._written: dict[tuple[int, int | None], int] = {}  # note's hash by (study id, trial id or None)
        self._noted: dict[int, set[int]] = {}  # trial ids with a note, by study id
        self._unnoted: dict[int, int] = {}  # trials with something to note but no note, by study id

    def trial_attrs_of(self, experiment: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The status columns (:func:`trial_attrs`) of ``experiment``'s Trials, as last read, reading its
        namespace's Trials (and Events) first when they were never read: for a study about to be filled, whose
        trials final at once cannot take them later.

        Returns:
            ``{trial name: attributes}``; empty when the Trials cannot be read (said in the next note).
        """
        meta = experiment["metadata"]
        if meta["namespace"] not in self._readings:
            self._readings[meta["namespace"]] = self._read(meta["namespace"])
        owned = self._readings[meta["namespace"]].trials.get(meta["uid"], [])
        return {t["metadata"]["name"]: trial_attrs(t) for t in owned}

    def due(self) -> bool:
        """Whether ``interval_s`` passed since the cluster was last read (or it never was)."""
        return self._read_at is None or self.clock() - self._read_at >= self.interval_s

    def refresh(self, shown: Sequence[Shown]) -> bool:
        """Write the notes and trial attributes of ``shown``, reading the cluster first when :meth:`due`.

        Between two reads only the studies' notes are written again where their ``head`` changed.

        Args:
            shown: the Experiments shown, each with its study.

        Returns:
            Whether a note or a trial's user attribute changed.
        """
        now = self.clock()
        read = self.due()
        if read:
            self._read_at = now
            namespaces = dict.fromkeys(s.experiment["metadata"]["namespace"] for s in shown)
            self._readings = {namespace: self._read(namespace) for namespace in namespaces}
        owned: list[tuple[Shown, list[dict]]] = []
        for item in shown:
            meta = item.experiment["metadata"]
            reading = self._readings.get(meta["namespace"]) or _Reading(trials_error="not read yet")
            trials = sorted(reading.trials.get(meta["uid"], []), key=lambda t: (t.get("spec") or {}).get("index", 0))
            owned.append((item, trials))
        changed = self._write_trials(owned, now) if read else False
        when = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        for item, trials in owned:
            reading = self._readings.get(item.experiment["metadata"]["namespace"]) or _Reading(trials_error="-")
            section = cluster_section(
                item.experiment,
                trials,
                reading.events,
                when,
                trials_error=reading.trials_error,
                experiment_error=item.error,
            )
            unnoted = self._unnoted.get(item.study._study_id, 0)
            if unnoted:
                section += (
                    f"\n\n*Trials left without a note of their own: {unnoted}. At most {self.max_trial_notes} "
                    "trials of a study get one (Optuna Dashboard reads all of a study's notes for each noted trial "
                    "it serves); their columns say their status, and `kubetune logs TRIAL` prints a trial's log.*"
                )
            changed |= self._save_note(item.study, None, f"{item.head}\n\n{section}")
        return changed

    def _write_trials(self, owned: Sequence[tuple[Shown, list[dict]]], now: float) -> bool:
        """Read the pods' logs due (:meth:`_read_logs`), then write each trial's status columns, and the note of
        each trial that has something to say beyond them (a log read or a status message) while its study has
        fewer than :attr:`max_trial_notes` noted trials (or it is one of them)."""
        self._read_logs(owned, now)
        changed = False
        for item, trials in owned:
            if item.live is None or not trials:
                continue
            changed |= item.live.set_trial_attrs({t["metadata"]["name"]: trial_attrs(t) for t in trials})
            namespace = item.experiment["metadata"]["namespace"]
            noted = self._noted.setdefault(item.study._study_id, set())
            unnoted = 0
            for trial in trials:
                name = trial["metadata"]["name"]
                trial_id = item.live.trial_id(name)
                log_state = self._logs.get((namespace, name))
                if trial_id is None or (log_state is None and not _status(trial).get("message")):
                    continue
                if trial_id not in noted and len(noted) >= self.max_trial_notes:
                    unnoted += 1
                    continue
                noted.add(trial_id)
                changed |= self._save_note(item.study, trial_id, trial_note(trial, log_state, self.log_lines))
            self._unnoted[item.study._study_id] = unnoted
        return changed

    def _may_note(self, study: optuna.Study, trial_id: int) -> bool:
        """Whether trial ``trial_id`` of ``study`` has a note or may get one (:attr:`max_trial_notes`)."""
        noted = self._noted.get(study._study_id, set())
        return trial_id in noted or len(noted) < self.max_trial_notes

    def _read(self, namespace: str) -> _Reading:
        """Read the Trials and Events of ``namespace``; a read that fails is kept as its error line."""
        reading = _Reading()
        try:
            for trial in self.reader.list_trials(namespace):
                for owner in trial["metadata"].get("ownerReferences") or ():
                    if owner.get("kind") == _EXPERIMENT_KIND and owner.get("uid"):
                        reading.trials.setdefault(owner["uid"], []).append(trial)
        except Exception as exc:  # noqa: BLE001 - refused, no answer...: said in the note
            log.debug("listing the Trials of namespace %s failed", namespace, exc_info=True)
            reading.trials_error = read_error(exc)
        try:
            reading.events = self.reader.list_events(namespace)
        except Exception as exc:  # noqa: BLE001 - refused (RBAC often lets a viewer list no Events), no answer...
            log.debug("listing the Events of namespace %s failed", namespace, exc_info=True)
            reading.events = read_error(exc)
        return reading

    def _read_logs(self, owned: Sequence[tuple[Shown, list[dict]]], now: float) -> None:
        """Read at most :attr:`max_logs` pod logs of the trials the studies hold (module docstring), in this order:
        a pod never read, or whose trial's phase changed since, first (an ended trial's before a running one's:
        spec.podRetentionPolicy may delete it soon), in the Trials' order; then the running ones, the longest
        unread first."""
        fresh: list[tuple[float, str, dict]] = []
        again: list[tuple[float, str, dict]] = []
        for item, trials in owned:
            if item.live is None:
                continue
            namespace = item.experiment["metadata"]["namespace"]
            for trial in trials:
                status = _status(trial)
                pod, phase = status.get("podName"), status.get("phase")
                trial_id = item.live.trial_id(trial["metadata"]["name"])
                if not pod or phase not in _LOGGED_PHASES or trial_id is None:
                    continue
                if not self._may_note(item.study, trial_id):
                    continue  # its note could not show the log
                last = self._logs.get((namespace, trial["metadata"]["name"]))
                if last is None or (last.pod, last.phase) != (pod, phase):  # an ended pod may go soon: first
                    fresh.append((float(phase == "Running"), namespace, trial))
                elif phase == "Running" and not last.gone:
                    again.append((last.read_at, namespace, trial))
        chosen = sorted(fresh, key=lambda c: c[0]) + sorted(again, key=lambda c: c[0])
        for _, namespace, trial in chosen[: self.max_logs]:
            self._read_log(namespace, trial, now)

    def _read_log(self, namespace: str, trial: Mapping[str, Any], now: float) -> None:
        status = _status(trial)
        name, pod, phase = trial["metadata"]["name"], status["podName"], status["phase"]
        last = self._logs.get((namespace, name))
        kept = last.text if last is not None and last.pod == pod else None
        state = LogRead(pod, phase, text=kept, read_at=now)
        try:
            state.text = clean_log(self.reader.log_tail(namespace, pod, self.log_lines), self.log_lines)
        except Exception as exc:  # noqa: BLE001 - gone, refused, no answer...: said in the note
            if getattr(exc, "status", None) == 404:
                state.gone = True
            else:
                log.debug("reading the log of pod %s/%s failed", namespace, pod, exc_info=True)
                state.error = read_error(exc)
        self._logs[(namespace, name)] = state

    def _save_note(self, study: optuna.Study, trial_id: int | None, body: str) -> bool:
        """Write ``body`` as the note of ``study`` (``trial_id`` None) or of its trial ``trial_id``, when it is not
        the note this object wrote there last (Optuna Dashboard's ``save_note``: a study system attribute)."""
        key, digest = (study._study_id, trial_id), hash(body)  # not the body: thousands of notes of 50 lines
        if self._written.get(key) == digest:
            return False
        import optuna
        from optuna_dashboard import save_note

        save_note(study if trial_id is None else optuna.Trial(study, trial_id), body)
        self._written[key] = digest
        return True
