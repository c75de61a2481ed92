"""Results read from what a container trial prints: Katib's metric line formats, parsed into Ray-style results.

Owns the line formats of a container trial's output (docs/api.md, "Any container as a trial"): ``TEXT``, Katib's
``name=value`` pairs found by its default regex (:data:`KATIB_METRICS_FORMAT`) or by custom regexes with two
groups, a leading RFC 3339 timestamp taken as the result's time; and ``JSON``, one object per line whose values
are numbers or numbers written as JSON strings (Katib reads only strings and silently skips numbers: both are
taken here). :class:`OutputParser` turns lines into results: each line that reports an objective metric is one
result (``training_iteration`` counts them, or is the value of a named step key) holding the latest value of
every metric printed so far. Called by the operator's log streams (``kubetune_operator.logstream``); pure, so
the same parser gives the same results however often a log is read again from its start (an operator restart
re-reads it, and the operator drops the iterations it holds).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Iterable, Sequence

__all__ = ["KATIB_METRICS_FORMAT", "FORMATS", "MAX_LINE_BYTES", "LineBuffer", "OutputParser", "metrics_format_problem"]

#: Katib's default ``filter.metricsFormat``: a metric name (word characters, ``|`` and ``-``), ``=``, a number.
KATIB_METRICS_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
#: The line formats: ``TEXT`` (regexes) and ``JSON`` (one object per line).
FORMATS = ("TEXT", "JSON")
#: Longer lines are skipped whole (a progress bar without newlines, a dumped array): no metric line is that long.
MAX_LINE_BYTES = 65536
#: Keys the output may not set: kubetune and Ray fill them in (``training_iteration`` only through ``iteration_key``).
RESERVED_KEYS = frozenset(
    {"training_iteration", "timestamp", "done", "trial_id", "time_total_s", "time_this_iter_s", "date", "config"}
)
# An RFC 3339 time at the start of a line: 2026-11-27T10:00:00Z, 2026-11-27T10:00:00.123+01:00 (Katib's rule).
_TIMESTAMP = re.compile(r"^\s*(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2}))\s")


def metrics_format_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a ``metricsFormat`` regex, or None: it must compile and have two groups at
    least (the first the name, the second the value), as Katib requires."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"metricsFormat {pattern!r} is not a regular expression: {exc}"
    if compiled.groups < 2:
        return f"metricsFormat {pattern!r} needs two groups, the metric's name and its value"
    return None


def _time(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None if ``text`` is not one."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00")).timestamp()
    except ValueError:
        return None


def _number(value: object) -> float | None:
    """A finite number from a JSON value (a number or a string holding one), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


class LineBuffer:
    """Whole lines out of bytes that arrive in pieces (a followed log, a growing file): the unfinished last line
    waits for the rest, and one over :data:`MAX_LINE_BYTES` is dropped up to its newline."""

    def __init__(self):
        self.pending = b""

    def feed(self, data: bytes) -> list[str]:
        """The lines ``data`` completes, decoded (UTF-8, undecodable bytes replaced), without their newlines."""
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        if len(self.pending) > MAX_LINE_BYTES:
            self.pending = b""
        return [line.decode("utf-8", "replace") for line in lines]

    def end(self) -> list[str]:
        """The unfinished last line, once nothing more comes (an empty list without one)."""
        rest, self.pending = self.pending, b""
        return [rest.decode("utf-8", "replace")] if rest else []


class OutputParser:
    """Turns a trial's output, line by line, into results.

    Args:
        objectives: the objective metric names (``spec.metric``, or ``spec.objectives``' names); a line that
            reports one of them makes a result, once each of them has been printed.
        format: ``TEXT`` or ``JSON`` (:data:`FORMATS`).
        metrics_format: ``TEXT`` regexes with two groups (name, value); default Katib's
            (:data:`KATIB_METRICS_FORMAT`).
        iteration_key: the metric whose value is the result's ``training_iteration`` (an epoch or step
            counter the program prints); None: each result is the next iteration (1, 2, ...). A result
            before the key has been printed, or with a value that is not a whole number >= 0, is skipped.

    Raises:
        ValueError: an unknown format, or a regex :func:`metrics_format_problem` refuses.
    """

    def __init__(
        self,
        objectives: Sequence[str],
        format: str = "TEXT",
        metrics_format: Sequence[str] = (),
        iteration_key: str | None = None,
    ):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        for pattern in metrics_format:
            problem = metrics_format_problem(pattern)
            if problem:
                raise ValueError(problem)
        self.objectives = frozenset(objectives)
        self.format = format
        self.patterns = [re.compile(p) for p in (metrics_format or (KATIB_METRICS_FORMAT,))]
        self.iteration_key = iteration_key
        self.latest: dict[str, float] = {}
        """The latest value of every metric printed so far."""
        self.iteration = 0
        """``training_iteration`` of the last result made."""

    def _pairs(self, line: str) -> tuple[float | None, dict[str, float]]:
        if self.format == "JSON":
            try:
                record = json.loads(line)
            except ValueError:
                return None, {}
            if not isinstance(record, dict):
                return None, {}
            raw_time = record.pop("timestamp", None)
            when = _time(raw_time) if isinstance(raw_time, str) else _number(raw_time)
            values = {str(k): v for k, v in ((k, _number(v)) for k, v in record.items()) if v is not None}
            return when, values
        match = _TIMESTAMP.match(line)
        when = _time(match.group(1)) if match else None
        values: dict[str, float] = {}
        for pattern in self.patterns:
            for found in pattern.finditer(line):
                number = _number(found.group(2))
                if number is not None:
                    values[found.group(1)] = number
        return when, values

    def feed(self, line: str) -> dict | None:
        """Read one line of output (without or with its newline); return the result it makes, or None.

        A result is ``{metric: value, ..., "training_iteration": n}`` plus ``timestamp`` (whole seconds since the
        epoch) when the line starts with an RFC 3339 time (``TEXT``) or has a ``timestamp`` key (``JSON``).
        """
        if len(line) > MAX_LINE_BYTES:
            return None
        when, values = self._pairs(line.rstrip("\r\n"))
        return self.take(values, when)

    def take(self, values: dict[str, float], when: float | None = None) -> dict | None:
        """Take metric values printed together (a line's, or one step of TensorFlow event files); return the
        result they make, as :meth:`feed` does, or None. ``when``: their time, in seconds since the epoch."""
        if not values:
            return None
        key = self.iteration_key
        self.latest.update((k, v) for k, v in values.items() if k not in RESERVED_KEYS or k == key)
        if not self.objectives.intersection(values) or not self.objectives.issubset(self.latest):
            return None
        if key is None:
            iteration = self.iteration + 1
        else:
            step = self.latest.get(key)
            if step is None or step < 0 or step != int(step):
                return None
            iteration = int(step)
        self.iteration = iteration
        result: dict = {k: v for k, v in self.latest.items() if k != key or key not in RESERVED_KEYS}
        result["training_iteration"] = iteration
        if when is not None:
            result["timestamp"] = int(when)
        return result

    def feed_all(self, lines: Iterable[str]) -> list[dict]:
        """:meth:`feed` every line; the results they make, in order."""
        return [r for r in map(self.feed, lines) if r is not None]
