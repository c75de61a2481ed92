"""Optuna Dashboard over experiments read from storage, live: ``kubetune dashboard [NAME]``.

Owns serving Optuna Dashboard (PyPI ``optuna-dashboard``: its web application, over an Optuna storage) on a local
address, read-only, for one experiment (:class:`Dashboard`: the Optuna study a
:class:`kubetune.sdk.live_study.LiveStudy` keeps from an :class:`kubetune.sdk.analysis.ExperimentAnalysis`) or for
every Experiment the user may list (:class:`ExperimentsDashboard`: the studies of an
:class:`kubetune.sdk.experiment_studies.ExperimentStudies`, listed on Optuna Dashboard's home page). The studies live
in an Optuna ``InMemoryStorage`` in this process (no database, nothing written anywhere). While the server serves, a
thread refreshes them every ``refresh_s`` seconds (one listing of each experiment's folder; an experiment read again
only when something there changed; for the list, the Experiments listed again first), so new trials, new results and
trials' final states show in the open page (its trial list polls every 2 s, the study's page every 10 s). Where the
dashboard may read the Experiment's cluster objects (the list always; one experiment when given ``notes`` and
``experiment``), each refresh also hands them to a :class:`kubetune.sdk.cluster_notes.ClusterNotes`, which reads
the cluster at most every few seconds and writes the Experiment's conditions and Events into the study's note and
each Trial's status and pod log tail into its trial's columns and note. Callers:
the ``kubetune dashboard`` command (:func:`serve`, until Ctrl-C) and tests or notebooks (a dashboard in a thread,
stopped with :meth:`Dashboard.close`).

Read-only: the server answers GET and HEAD alone (405 otherwise), so no one who reaches it can rename, delete or add
studies, notes or trials (Optuna Dashboard's own API would let them) for the others who look. It authenticates no
one: it listens on loopback unless told otherwise; docs/operations.md says how to put authentication in front.

The server is the standard library's WSGI server with a thread per request (the dashboard's pages poll
its API while the user looks); Optuna's ``InMemoryStorage`` takes a lock for each call.
"""

from __future__ import annotations

import logging
import math
import socketserver
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from kubetune.sdk.cluster_notes import Shown, read_error
from kubetune.sdk.live_study import DEFAULT_SETTLE_S, LiveStudy

if TYPE_CHECKING:
    from kubetune.sdk.analysis import ExperimentAnalysis
    from kubetune.sdk.cluster_notes import ClusterNotes
    from kubetune.sdk.experiment_studies import ExperimentStudies

__all__ = ["DEFAULT_LIST_REFRESH_S", "DEFAULT_REFRESH_S", "Dashboard", "ExperimentsDashboard", "serve"]

log = logging.getLogger(__name__)

#: Seconds between two refreshes of the study from storage. A result written to storage shows in the trial list
#: within about this plus 4 s: Optuna Dashboard's server caches the trials for 2 s (under 100 trials) and the
#: page polls every 2 s.
DEFAULT_REFRESH_S = 1.0
#: Seconds between two refreshes of the experiment list: each lists the Experiments (one API call, or one per
#: namespace) and each Experiment's storage folder.
DEFAULT_LIST_REFRESH_S = 5.0
#: The HTTP methods the server answers; Optuna Dashboard's others change the studies.
READ_METHODS = ("GET", "HEAD")


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Leave each request unlogged (the dashboard polls every few seconds)."""


def read_only(app: Callable) -> Callable:
    """The WSGI application ``app`` answering only :data:`READ_METHODS`: any other request gets 405, unseen by it."""

    def guarded(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") in READ_METHODS:
            return app(environ, start_response)
        start_response("405 Method Not Allowed", [("Allow", ", ".join(READ_METHODS)), ("Content-Type", "text/plain")])
        return [b"this dashboard is read-only\n"]

    return guarded


class _Served:
    """Optuna Dashboard over ``storage``, bound to ``host:port`` when made, with ``refresh`` called every
    ``refresh_s`` seconds while it serves (the constructor of :class:`Dashboard` and :class:`ExperimentsDashboard`
    document the arguments).

    Raises:
        ImportError: Optuna Dashboard is not installed (``pip install 'kubetune[views]'``).
        OSError: the port cannot be bound (taken, say).
    """

    def __init__(
        self, storage: Any, refresh: Callable[[], object], refresh_s: float, host: str, port: int, first_now: bool
    ):
        try:
            from optuna_dashboard import wsgi
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("the dashboard needs Optuna Dashboard: pip install 'kubetune[views]'") from exc
        self.refresh_s = refresh_s
        self._refresh = refresh
        self._first_now = first_now
        self._server = make_server(
            host, port, read_only(wsgi(storage)), server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        self.base_url = f"http://{bound_host}:{bound_port}/dashboard"

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`close` (from another thread) or an exception (Ctrl-C), refreshing the
        studies in a daemon thread meanwhile. That thread ends after the refresh it may be in (not waited for: one
        can wait out an S3 outage for minutes)."""
        stop = threading.Event()
        refresher = threading.Thread(target=self._refresh_until, args=(stop,), name="kubetune-refresh", daemon=True)
        refresher.start()
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            stop.set()

    def _refresh_until(self, stop: threading.Event) -> None:
        """Refresh every :attr:`refresh_s` seconds (at once first when made so) until ``stop`` is set; a refresh
        that fails (storage or the API server unreachable, say) is logged and the next one tries again."""
        wait = 0.0 if self._first_now else self.refresh_s
        while not stop.wait(wait):
            wait = self.refresh_s
            try:
                self._refresh()
            except Exception:  # noqa: BLE001 - any failure of one refresh; the page keeps what it shows
                log.warning("refreshing the dashboard's studies failed", exc_info=True)

    def start(self):
        """Serve in a daemon thread; return self."""
        self._thread = threading.Thread(target=self.serve_forever, name="kubetune-dashboard", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving (waits for :meth:`serve_forever` to return when it runs) and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Dashboard(_Served):
    """Optuna Dashboard of one experiment, listening on ``host:port`` (bound when made; served by :meth:`start`).

    Args:
        analysis: the experiment, read from storage.
        metric, mode: the study's objective; default the analysis's
            (:func:`kubetune.sdk.optuna_study.fill_study`).
        host: the address to listen on; the default, loopback, keeps it on this machine.
        port: the TCP port; 0 picks a free one.
        reread: reads the experiment again at a refresh, given the analysis last read and the refresh's listing of
            its folder; default ``ExperimentAnalysis.reread`` (:class:`LiveStudy`).
        refresh_s: seconds between two refreshes from storage while serving.
        settle_s: seconds without a write to storage after which the trials get their final states
            (:mod:`kubetune.sdk.live_study`).
        notes: writes what the cluster says of the Experiment and its Trials into the study at each refresh
            (its note, its trials' status columns and notes); needs ``experiment``. None: storage alone.
        experiment: reads the Experiment from the cluster, as the API returns it (called when ``notes`` is due to
            read the cluster; what it raises is said in the note, the Experiment shown as last read).

    Attributes:
        live: the :class:`LiveStudy` served; ``live.study`` is the Optuna study.
        notes: as given.
        refresh_s: as given.
        base_url: ``http://host:port/dashboard``, the home page.
        url: ``http://host:port/dashboard/studies/<id>``, the study's page.

    Raises:
        ValueError: as :func:`kubetune.sdk.optuna_study.fill_study` (no metric or mode...).
        ImportError: Optuna Dashboard is not installed (``pip install 'kubetune[views]'``).
        OSError: the port cannot be bound (taken, say).
    """

    def __init__(
        self,
        analysis: ExperimentAnalysis,
        metric: str | None = None,
        mode: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        reread: Callable[[ExperimentAnalysis, Mapping[str, Any]], ExperimentAnalysis] | None = None,
        refresh_s: float = DEFAULT_REFRESH_S,
        settle_s: float = DEFAULT_SETTLE_S,
        notes: ClusterNotes | None = None,
        experiment: Callable[[], dict] | None = None,
    ):
        if (notes is None) != (experiment is None):
            raise ValueError("notes and experiment go together")
        self.notes = notes
        self._experiment = experiment
        self._last_experiment: dict | None = None
        self._experiment_error: str | None = None
        self._experiment_tried = -math.inf
        first_attrs = None
        if notes is not None:  # the Trials' columns before the trials are added: those final at once keep them
            self._read_experiment()
            if self._last_experiment is not None:
                first_attrs = notes.trial_attrs_of(self._last_experiment)
        self.live = LiveStudy(analysis, metric, mode, reread=reread, settle_s=settle_s, trial_attrs=first_attrs)
        super().__init__(self.live.storage, self._refresh_all, refresh_s, host, port, first_now=notes is not None)
        study_id = self.live.storage.get_study_id_from_name(self.live.study.study_name)
        self.url = f"{self.base_url}/studies/{study_id}"

    def _refresh_all(self) -> bool:
        """Refresh the study from storage, then the cluster's notes (also when storage failed: the Trials' status
        and logs say most then); raise what storage raised, after."""
        try:
            changed = self.live.refresh()
        except Exception:
            self._refresh_notes()
            raise
        return self._refresh_notes() or changed

    def _read_experiment(self) -> None:
        """Read the Experiment (kept as last read when that fails, and why in :attr:`_experiment_error`)."""
        self._experiment_tried = self.notes.clock()
        try:
            self._last_experiment, self._experiment_error = self._experiment(), None
        except Exception as exc:  # noqa: BLE001 - refused, no answer...: said in the note
            log.debug("reading the Experiment failed", exc_info=True)
            self._experiment_error = read_error(exc)

    def _refresh_notes(self) -> bool:
        """Read the Experiment when the notes are due, and hand it to them; whether a note or attribute changed."""
        if self.notes is None or self._experiment is None:
            return False
        from kubetune.sdk.experiment_studies import note
        from kubetune.sdk.experiment_summary import summary

        if self.notes.due() and self.notes.clock() - self._experiment_tried >= self.notes.interval_s:
            self._read_experiment()
        experiment = self._last_experiment
        if experiment is None:
            return False
        head = note(experiment, summary(experiment))
        return self.notes.refresh([Shown(experiment, self.live.study, self.live, head, self._experiment_error)])


class ExperimentsDashboard(_Served):
    """Optuna Dashboard of every Experiment ``studies`` lists, on ``host:port`` (bound when made; served by
    :meth:`start`). The first refresh runs as serving starts, so the server answers at once and the studies appear
    as they are read.

    Args:
        studies: the Experiments' studies (:class:`kubetune.sdk.experiment_studies.ExperimentStudies`).
        host: the address to listen on; the default, loopback, keeps it on this machine.
        port: the TCP port; 0 picks a free one.
        refresh_s: seconds between two refreshes while serving.

    Attributes:
        studies: as given.
        refresh_s: as given.
        base_url, url: ``http://host:port/dashboard``, the home page: the list of studies.

    Raises:
        ImportError: Optuna Dashboard is not installed (``pip install 'kubetune[views]'``).
        OSError: the port cannot be bound (taken, say).
    """

    def __init__(
        self,
        studies: ExperimentStudies,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        refresh_s: float = DEFAULT_LIST_REFRESH_S,
    ):
        self.studies = studies
        super().__init__(studies.storage, studies.refresh, refresh_s, host, port, first_now=True)
        self.url = self.base_url


def serve(dashboard: Dashboard | ExperimentsDashboard, open_browser: bool = True) -> None:
    """Serve ``dashboard`` in this thread until Ctrl-C, which ends it (``KeyboardInterrupt`` propagates).

    Args:
        dashboard: the dashboard, bound.
        open_browser: open :attr:`Dashboard.url` in the user's browser first (Python's ``webbrowser``).
    """
    if open_browser:
        import webbrowser

        webbrowser.open(dashboard.url)
    try:
        dashboard.serve_forever()
    finally:
        dashboard.close()
