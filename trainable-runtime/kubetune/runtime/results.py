"""The trial's result history: ``result.json`` and ``progress.csv``, kept locally and mirrored to storage.

Owned by the in-pod runtime (:mod:`kubetune.runtime.loop` appends, syncs before each checkpoint commit
and at the end; a background thread syncs every ``sync_period_s``). Formats follow Ray Tune's loggers:
``result.json`` holds one JSON object per reported result; ``progress.csv`` holds the results
flattened with ``/`` and without ``config``, its columns fixed by the first result (later keys are
left out, as Ray's CSV logger does).

**One line per result, across restarts.** ``result.json`` always describes the lineage of the
trial's current state, so its ``training_iteration`` values strictly increase. When an attempt
starts, :meth:`ResultLog.resume` downloads the trial's ``result.json`` and keeps the lines up to the
first one whose ``training_iteration`` exceeds the restored checkpoint's iteration (0 when nothing is
restored): results written after that checkpoint by an earlier attempt are dropped, because training
produces them again. Every line of a committed checkpoint is in storage, since the runtime syncs
the log before it commits. After a restore from another trial's checkpoint (``restoreFrom``, as PBT
does) the same rule keeps the trial's own earlier history up to that iteration.

Object stores cannot append, so each sync uploads both files whole; a sync runs only when they
changed, and the background period stretches to ten times the last upload's duration, which keeps
uploads under ~10% of wall time for very long histories. When ``tensorboardX`` is installed, the
attempt's TensorBoard event file (:mod:`kubetune.runtime.tensorboard`) is written and uploaded
alongside; the final sync adds the hyperparameters.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubetune.resultkeys import flatten
from kubetune.runtime.reporter import json_default
from kubetune.runtime.tensorboard import TrialEvents, open_events
from kubetune.storage import Storage, join_uri

log = logging.getLogger(__name__)

RESULT_FILE = "result.json"
PROGRESS_FILE = "progress.csv"


class ResultLog:
    """``result.json`` and ``progress.csv`` of one trial.

    Args:
        storage: the trial's storage.
        trial_dir_uri: where the two files are mirrored.
        local_dir: local directory for the working copies (created).
        sync_period_s: background sync period, in seconds.
    """

    def __init__(self, storage: Storage, trial_dir_uri: str, local_dir: Path, sync_period_s: float = 10.0):
        self.storage = storage
        self.trial_dir_uri = trial_dir_uri
        self.local_dir = Path(local_dir)
        self.local_dir.mkdir(parents=True, exist_ok=True)
        self.sync_period_s = sync_period_s
        self._lock = threading.Lock()  # guards the open files and the sizes
        self._sync_lock = threading.Lock()  # one upload at a time, in order
        self._json = open(self.local_dir / RESULT_FILE, "wb")
        self._csv_file = open(self.local_dir / PROGRESS_FILE, "wb")
        self._row = io.StringIO()
        self._csv = csv.writer(self._row)
        self._columns: list[str] | None = None
        self._version = 0
        self._synced_version = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The event file is opened with the first result: tensorboardX's import (numpy, protobuf; about
        # 0.05 s) is not needed before the first step.
        self._events: TrialEvents | None = None
        self._events_opened = False

    def resume(self, restored_iteration: int) -> tuple[int, int]:
        """Load the trial's ``result.json`` from storage, keeping the lineage up to ``restored_iteration``.

        Returns:
            ``(kept, dropped)`` line counts. A line that does not parse (a cut upload) ends the kept part.
        """
        try:
            data = self.storage.get_bytes(join_uri(self.trial_dir_uri, RESULT_FILE))
        except FileNotFoundError:
            return 0, 0
        lines = data.decode("utf-8", errors="replace").splitlines()
        kept = 0
        with self._lock:
            for line in lines:
                try:
                    result = json.loads(line)
                except ValueError:
                    break
                iteration = result.get("training_iteration") if isinstance(result, dict) else None
                if not isinstance(result, dict) or (isinstance(iteration, int) and iteration > restored_iteration):
                    break
                self._write(line, result)
                kept += 1
            self._json.flush()
            self._csv_file.flush()
            self._version += 1
        return kept, len(lines) - kept

    def append(self, result: dict) -> None:
        """Append one result to both local files (buffered; no network, no flush until :meth:`sync`)."""
        line = json.dumps(result, default=json_default)
        with self._lock:
            self._write(line, result)
            if not self._events_opened:
                self._events, self._events_opened = open_events(self.local_dir), True
            if self._events is not None:
                self._events.add(result)
            self._version += 1

    def _write(self, line: str, result: dict) -> None:
        self._json.write(line.encode() + b"\n")
        row: dict = {}
        for key, value in result.items():  # flatten only what is nested: this runs once per iteration
            if isinstance(value, dict):
                if key != "config":
                    row.update(flatten({key: value}))
            else:
                row[key] = value
        self._row.seek(0)
        self._row.truncate()
        if self._columns is None:
            self._columns = list(row)
            self._csv.writerow(self._columns)
        self._csv.writerow([row.get(column, "") for column in self._columns])
        self._csv_file.write(self._row.getvalue().encode())

    def sync(self, final: bool = False) -> bool:
        """Upload the files if they changed since the last sync; return whether anything was uploaded.

        Args:
            final: the attempt's last sync: the event file gets its hyperparameters and is closed, and
                it is uploaded even if no result came since the last sync.

        Raises:
            Exception: whatever the storage raises once its retries give up.
        """
        with self._sync_lock:
            with self._lock:
                if self._json.closed:
                    return False
                self._json.flush()
                self._csv_file.flush()
                version = self._version
                sizes = {RESULT_FILE: self._json.tell(), PROGRESS_FILE: self._csv_file.tell()}
                events = []
                if self._events is not None:
                    if final:
                        self._events.close()
                    events = self._events.files()
                    if final:
                        self._events = None
            if version == self._synced_version and not (final and events):
                return False
            uploads = []
            for name, size in sizes.items():
                with open(self.local_dir / name, "rb") as f:
                    uploads.append((join_uri(self.trial_dir_uri, name), f.read(size)))
            uploads += [(join_uri(self.trial_dir_uri, path.name), path.read_bytes()) for path in events]
            with ThreadPoolExecutor(len(uploads), thread_name_prefix="kubetune-result-put") as pool:
                list(pool.map(lambda upload: self.storage.put_bytes(*upload), uploads))  # raises the first error
            self._synced_version = version
            return True

    def start_background_sync(self) -> None:
        """Sync every ``sync_period_s`` seconds from a daemon thread until :meth:`close`."""
        self._thread = threading.Thread(target=self._sync_loop, name="kubetune-result-sync", daemon=True)
        self._thread.start()

    def _sync_loop(self) -> None:
        wait = self.sync_period_s
        while not self._stop.wait(wait):
            started = time.monotonic()
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - logged, retried next period
                log.warning("could not upload the result log (%s); retrying later", type(exc).__name__)
            wait = max(self.sync_period_s, 10 * (time.monotonic() - started))

    def close(self) -> None:
        """Stop the background sync and close the local files (a final :meth:`sync` is the caller's).

        Later :meth:`sync` calls upload nothing.
        """
        self._stop.set()
        with self._lock:
            self._json.close()
            self._csv_file.close()
            if self._events is not None:
                self._events.close()
                self._events = None
