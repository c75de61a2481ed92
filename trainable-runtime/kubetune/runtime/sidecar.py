"""The metrics sidecar of a container trial: reads the metrics the trial's container writes to a file or to TensorFlow
event files, or pushes over HTTP, and reports them to the operator's collector as they come; and saves the trial's
checkpoint folder when the container asks and when it ends (:mod:`kubetune.runtime.checkpoint_folder`); where the trial
has storage, writes the results it reads to the trial's folder as a runtime trial's pod does (``result.json``,
``progress.csv``, ``params.json``: :class:`kubetune.runtime.results.ResultLog`), so that the SDK's analysis, the
dashboard and ``kubetune plot`` show them (:data:`kubetune.env.RESULT_LOG`).

Runs as ``python -m kubetune.runtime.sidecar`` in a native sidecar (an init container with ``restartPolicy: Always``,
Kubernetes 1.29 and later) that the operator's pod builder adds to a container trial's pod for
``metricsCollector.kind`` ``File``, ``TensorFlowEvent`` or ``Push``, and for a trial with a checkpoint folder
(``spec.checkpoint.path``) whatever its kind (docs/api.md, "Any container as a trial"); the trial's own container is
left as it is. A native sidecar never holds the pod: the pod ends when the trial's container ends, and the kubelet
then sends this process SIGTERM; it reads what is left, saves the folder, reports it, and its last batch says
``done`` (the operator then knows the output was read to its end and the last checkpoint saved). Results are made
by :class:`kubetune.output_metrics.OutputParser` and sent by :class:`kubetune.runtime.reporter.Reporter` (retried,
de-duplicated by iteration at the operator); the collector's decisions need no answer here: the operator deletes a
pod it stops. Configured by :data:`kubetune.env.METRICS_SOURCE`, :data:`kubetune.env.CHECKPOINT_FOLDER`,
:data:`kubetune.env.RESULT_LOG` and the trial's identity and storage variables of :mod:`kubetune.env`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import queue
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

from kubetune.env import (
    ATTEMPT,
    CHECKPOINT_FOLDER,
    COLLECTOR_URL,
    EXPERIMENT,
    GRACE_PERIOD,
    METRICS_SOURCE,
    NAMESPACE,
    RESULT_LOG,
    STORAGE_ENDPOINT,
    STORAGE_REGION,
    TOKEN,
    TRIAL,
)
from kubetune.output_metrics import LineBuffer, OutputParser
from kubetune.runtime.checkpoint_folder import CheckpointFolder, FolderSpec, read_restored
from kubetune.runtime.reporter import Reporter, json_default
from kubetune.runtime.results import ResultLog
from kubetune.storage import join_uri, open_storage

log = logging.getLogger("kubetune.sidecar")

#: Seconds between reads of a file or an event folder.
POLL_S = 0.5
#: The path the push endpoint serves (``POST http://127.0.0.1:<port>/metrics``).
PUSH_PATH = "/metrics"
#: Largest body a push may send, in bytes.
MAX_PUSH_BYTES = 1 << 20
#: Seconds between uploads of the result history (as a runtime trial's default).
RESULT_SYNC_S = 10.0


class FileSource:
    """New whole lines of a file the trial's container appends to; a file that shrank is read again from its
    start (it was truncated or replaced)."""

    def __init__(self, path: str):
        self.path, self.offset, self.buffer = path, 0, LineBuffer()

    def lines(self, final: bool = False) -> list[str]:
        """The lines written since the last call (with the unfinished last line when ``final``)."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self.offset:
            self.offset, self.buffer = 0, LineBuffer()
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return self.buffer.feed(data) + (self.buffer.end() if final else [])


class EventSource:
    """Scalars of the TensorFlow event files (``*tfevents*``) under a folder, read with TensorBoard's own event file
    loader (which keeps its place in each file), grouped by step: ``(step, wall time, {tag: value})``. A step is
    handed over once a later one appears, or at the end."""

    def __init__(self, folder: str):
        self.folder = folder
        self.loaders: dict[str, object] = {}
        self.step: int | None = None
        self.wall_time: float | None = None
        self.values: dict[str, float] = {}

    def steps(self, final: bool = False) -> list[tuple[int, float, dict[str, float]]]:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util

        out: list[tuple[int, float, dict[str, float]]] = []
        pattern = os.path.join(self.folder, "**", "*tfevents*")
        for path in sorted(glob.glob(pattern, recursive=True)):
            loader = self.loaders.get(path)
            if loader is None:
                loader = self.loaders[path] = EventFileLoader(path)
            for event in loader.Load():
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    if value.HasField("simple_value"):
                        number = float(value.simple_value)
                    elif value.HasField("tensor") and not value.tensor.tensor_shape.dim:
                        number = float(tensor_util.make_ndarray(value.tensor).item())
                    else:
                        continue
                    if self.step is not None and event.step != self.step:
                        out.append((self.step, self.wall_time, self.values))
                        self.values = {}
                    self.step, self.wall_time = event.step, event.wall_time
                    self.values[value.tag] = number
        if final and self.values:
            out.append((self.step, self.wall_time, self.values))
            self.values = {}
        return out


class PushSource:
    """An HTTP endpoint on the pod's loopback interface: the trial's container posts lines in the collector's format
    (``curl -d 'loss=0.31' http://127.0.0.1:<port>/metrics``); each line is taken in the order received. With
    ``katib_trial``, Katib's ``ReportObservationLog`` is served too (:mod:`kubetune.runtime.katib_db`): each
    ``kubeflow.katib.report_metrics()`` call of that trial is one line."""

    def __init__(self, port: int, katib_trial: str | None = None, katib_port: int | None = None):
        self.received: queue.Queue[str] = queue.Queue()
        self.katib = None
        if katib_trial is not None:
            from kubetune.runtime import katib_db  # grpcio: only where Katib's SDK reports

            self.katib = katib_db.serve(katib_trial, self.received.put, katib_port or katib_db.PORT)
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != PUSH_PATH:
                    self._answer(404, {"error": f"post metrics to {PUSH_PATH}"})
                elif length > MAX_PUSH_BYTES:
                    self._answer(413, {"error": f"body over {MAX_PUSH_BYTES} bytes"})
                else:
                    lines = self.rfile.read(length).decode("utf-8", "replace").splitlines()
                    for line in lines:
                        received.put(line)
                    self._answer(202, {"lines": len(lines)})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # the trial's lines are not logged
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="push", daemon=True)
        self.thread.start()

    def lines(self, final: bool = False) -> list[str]:
        if final:
            self.server.shutdown()
            if self.katib is not None:
                self.katib.stop(0).wait()
        out = []
        while True:
            try:
                out.append(self.received.get_nowait())
            except queue.Empty:
                return out


def results(source, parser: OutputParser, final: bool = False) -> Iterator[dict]:
    """The results ``source`` has for ``parser`` since the last call."""
    if isinstance(source, EventSource):
        for step, wall_time, values in source.steps(final):
            result = parser.take({**values, "step": float(step)}, wall_time)
            if result is not None:
                yield result
    else:
        for line in source.lines(final):
            result = parser.feed(line)
            if result is not None:
                yield result


def make_source(spec: dict, trial: str = ""):
    """The source of ``spec`` (:data:`kubetune.env.METRICS_SOURCE`): ``kind`` ``File`` (``path``), ``TensorFlowEvent``
    (``path``, a folder) or ``Push`` (``port``; ``katibDBManager``: Katib's ``report_metrics`` of ``trial`` too);
    None for ``StdOut`` (the operator reads the log).

    Raises:
        ValueError: another kind.
    """
    kind = spec.get("kind")
    if kind == "File":
        return FileSource(spec["path"])
    if kind == "TensorFlowEvent":
        return EventSource(spec["path"])
    if kind == "Push":
        return PushSource(int(spec["port"]), trial if spec.get("katibDBManager") else None)
    if kind == "StdOut":
        return None
    raise ValueError(f"no metrics source of kind {kind!r}")


def make_parser(spec: dict, start: int = 0) -> OutputParser:
    """The parser of ``spec``, numbering results from ``start`` + 1 (the iteration of the restored checkpoint);
    TensorFlow event files' steps are the iterations unless ``iterationKey`` says else."""
    key = spec.get("iterationKey") or ("step" if spec.get("kind") == "TensorFlowEvent" else None)
    parser = OutputParser(spec["objectives"], spec.get("format") or "TEXT", spec.get("metricsFormat") or (), key)
    parser.iteration = start
    return parser


def run(
    source,
    parser: OutputParser,
    report: Callable[[dict], object],
    stopping: threading.Event,
    folder: CheckpointFolder | None = None,
) -> int:
    """Hand every result of ``source`` (None: no source) to ``report`` and save ``folder`` when asked, until
    ``stopping`` is set, then what is left (the folder's final save last); return how many results."""
    count, last = 0, None
    while True:
        final = stopping.wait(POLL_S)
        if source is not None:
            for result in results(source, parser, final):
                report(result)
                count, last = count + 1, result
        if folder is not None:
            iteration = parser.iteration if source is not None else None
            try:
                (folder.finish if final else folder.poll)(iteration, last)
            except Exception as exc:  # noqa: BLE001 - the marker stays: the next poll tries again
                log.error("the checkpoint folder could not be saved: %s: %s", type(exc).__name__, exc)
        if final:
            return count


class TrialResults:
    """The trial's result history in its storage folder (:data:`kubetune.env.RESULT_LOG`), as the runtime writes it:
    each result the sidecar reads with the trial's id and config, the lines of an earlier attempt above the restored
    checkpoint dropped (:meth:`kubetune.runtime.results.ResultLog.resume`), ``params.json`` written at the start.
    The storage is set up in a thread of its own, so that a store that is slow or unreachable never holds the
    results on their way to the operator: what comes meanwhile waits in memory.

    Args:
        spec: the variable's JSON: ``trialDir``, ``state``, ``configFile``.
        trial: the trial's name.
        restored: the iteration of the checkpoint the attempt restored (0: none).
        endpoint, region: the storage's.

    Raises:
        OSError, ValueError: the config cannot be read (the caller goes on without the history).
    """

    def __init__(self, spec: dict, trial: str, restored: int, endpoint: str | None, region: str | None):
        with open(spec["configFile"], encoding="utf-8") as f:
            self.config = json.load(f)
        self.trial, self.uri = trial, spec["trialDir"]
        self._lock = threading.Lock()
        self._waiting: list[dict] | None = []  # results before the log is ready; None once it is
        self._log: ResultLog | None = None
        args = (endpoint, region, os.path.join(spec["state"], "results"), restored)
        self._ready = threading.Thread(target=self._start, args=args, name="result-history", daemon=True)
        self._ready.start()

    def _start(self, endpoint: str | None, region: str | None, local_dir: str, restored: int) -> None:
        try:
            storage = open_storage(self.uri, endpoint, region)
            history = ResultLog(storage, self.uri, local_dir, RESULT_SYNC_S)
            history.resume(restored)
            params = json.dumps(self.config, indent=2, sort_keys=True, default=json_default).encode()
            storage.put_bytes(join_uri(self.uri, "params.json"), params)
        except Exception as exc:  # noqa: BLE001 - the results still reach the operator
            log.error("the trial's result history is not written to %s: %s: %s", self.uri, type(exc).__name__, exc)
            with self._lock:
                self._waiting = None
            return
        with self._lock:
            for result in self._waiting or ():
                history.append(result)
            self._waiting, self._log = None, history
        history.start_background_sync()

    def append(self, result: dict) -> None:
        """Add ``result`` (as the sidecar reports it) to the history."""
        line = {**result, "trial_id": self.trial, "config": self.config}
        with self._lock:
            if self._log is not None:
                self._log.append(line)
            elif self._waiting is not None:
                self._waiting.append(line)

    def close(self, wait_s: float) -> None:
        """Upload what is left and stop, waiting at most ``wait_s`` seconds for a store still being set up; an
        upload that fails is logged (the results reached the operator)."""
        self._ready.join(wait_s)
        with self._lock:
            history, self._log, self._waiting = self._log, None, None
        if history is None:
            return
        try:
            history.sync(final=True)
        except Exception as exc:  # noqa: BLE001 - the trial's outcome does not depend on it
            log.error("the result history could not be uploaded to %s: %s: %s", self.uri, type(exc).__name__, exc)
        history.close()


def main(environ=os.environ) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    spec = json.loads(environ[METRICS_SOURCE])
    reporter = Reporter(
        environ[COLLECTOR_URL],
        environ.get(TOKEN),
        namespace=environ[NAMESPACE],
        experiment=environ[EXPERIMENT],
        trial=environ[TRIAL],
        attempt=int(environ[ATTEMPT]),
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    folder, start = None, 0
    if environ.get(CHECKPOINT_FOLDER):
        folder_spec = FolderSpec.from_json(environ[CHECKPOINT_FOLDER])
        restored = read_restored(folder_spec)
        storage = open_storage(folder_spec.trial_dir, environ.get(STORAGE_ENDPOINT), environ.get(STORAGE_REGION))
        folder = CheckpointFolder(storage, folder_spec, int(environ[ATTEMPT]), restored, reporter.set_checkpoint)
        start = int(restored.get("iteration") or 0)
    source, parser = make_source(spec, environ[TRIAL]), make_parser(spec, start)
    history = None
    if environ.get(RESULT_LOG) and source is not None:
        try:
            history = TrialResults(
                json.loads(environ[RESULT_LOG]),
                environ[TRIAL],
                start,
                environ.get(STORAGE_ENDPOINT),
                environ.get(STORAGE_REGION),
            )
        except (OSError, ValueError) as exc:  # the results still reach the operator
            log.error("the trial's result history is not written: %s: %s", type(exc).__name__, exc)
    reporter.start()
    where = spec.get("path") or f"127.0.0.1:{spec.get('port')}"
    log.info(
        "reading %s metrics %s%s",
        spec["kind"],
        f"from {where}" if source is not None else "in the operator (the log)",
        f"; checkpoint folder {folder.spec.path} from iteration {start}" if folder is not None else "",
    )
    report = reporter.report if history is None else lambda result: (reporter.report(result), history.append(result))
    count = run(source, parser, report, stopping, folder)
    grace = float(environ.get(GRACE_PERIOD) or 30)
    sent = reporter.close(max(1.0, grace - 2))
    if history is not None:  # after the last batch, which ends the attempt's output for the operator
        history.close(max(1.0, grace - 4))
    log.info("%d results read; the last batch %s", count, "acknowledged" if sent else "not acknowledged")
    return 0 if sent else 1


if __name__ == "__main__":
    sys.exit(main())
