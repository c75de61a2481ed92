"""TensorBoard event files of a trial, as Ray Tune's ``TBXLoggerCallback`` writes them.

Owned by the in-pod runtime: :class:`kubetune.runtime.results.ResultLog` hands every result to
:class:`TrialEvents` and mirrors its event file to the trial's storage folder next to
``result.json``, so ``tensorboard --logdir <storage>/<namespace>/<experiment>`` shows every trial's
curves. Like Ray's logger: each numeric result value (nested keys joined with ``/``, ``config``
left out) is a scalar ``ray/tune/<key>`` at step ``training_iteration``, and when the trial ends its
config is written as hyperparameters with the last values as their metrics. Needs the optional
``tensorboardX`` package (the ``tensorboard`` extra, installed in the runtime image, with ``crc32c``
for its record checksums); :func:`open_events` returns None without it, and nothing is written.

Unlike Ray's logger, a result's scalars go out as one event written in the calling thread through
tensorboardX's ``EventsWriter`` (about 10 µs for ten scalars with ``crc32c``), not as one event per
scalar through ``SummaryWriter``'s multiprocessing queue (about 470 µs): the same records, read the
same way by TensorBoard, at a cost that fits the runtime's per-iteration budget.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kubetune.resultkeys import finite_number, flatten

#: Tag prefix of every scalar (Ray's).
PREFIX = "ray/tune/"


def _scalars(result: dict) -> dict[str, float]:
    values = flatten({k: v for k, v in result.items() if k != "config"})
    return {key: number for key, value in values.items() if (number := finite_number(value)) is not None}


class TrialEvents:
    """One attempt's event file in ``local_dir`` (``events.out.tfevents.<time>.<host>``); thread-safe.

    Args:
        local_dir: the trial's local folder.
        writer: a ``tensorboardX.event_file_writer.EventsWriter`` whose file prefix is
            ``<local_dir>/events``.
    """

    def __init__(self, local_dir: Path, writer):
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        self._event, self._summary = Event, Summary
        self.local_dir, self._writer = Path(local_dir), writer
        self._lock = threading.Lock()
        self._config: dict | None = None
        self._last: dict[str, float] = {}
        self._closed = False

    def _write(self, summary, step: int | None = None) -> None:
        event = self._event(wall_time=time.time(), summary=summary)
        if isinstance(step, int):
            event.step = step
        self._writer.write_event(event)

    def add(self, result: dict) -> None:
        """Write ``result``'s numeric values as one event of scalars at its ``training_iteration``."""
        scalars = _scalars(result)
        values = [self._summary.Value(tag=PREFIX + key, simple_value=value) for key, value in scalars.items()]
        with self._lock:
            if self._closed:
                return
            self._write(self._summary(value=values), result.get("training_iteration"))
            self._last.update(scalars)
            if isinstance(result.get("config"), dict):
                self._config = result["config"]

    def files(self) -> list[Path]:
        """Flush, and return the event files written so far."""
        with self._lock:
            if not self._closed:
                self._writer.flush()
        return sorted(self.local_dir.glob("events.out.tfevents.*"))

    def close(self) -> None:
        """Write the hyperparameters (the config's scalar values, the last results as metrics) and close."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._config is not None:
                from tensorboardX.summary import hparams

                values = {k: v for k, v in flatten(self._config).items() if isinstance(v, (bool, int, float, str))}
                for summary in hparams(values, {PREFIX + k: v for k, v in self._last.items()}):
                    self._write(summary)  # in this file, as Ray's logger does
            self._writer.close()


def open_events(local_dir: Path) -> TrialEvents | None:
    """Return the trial's :class:`TrialEvents`, or None when ``tensorboardX`` is not installed."""
    try:
        from tensorboardX.event_file_writer import EventsWriter
    except ImportError:
        return None
    return TrialEvents(local_dir, EventsWriter(str(Path(local_dir) / "events")))
