"""Optuna Dashboard over an experiment read from storage, live: ``kubetune dashboard NAME [--storage-only]``.

Owns serving Optuna Dashboard (PyPI ``optuna-dashboard``: its web application, over an Optuna storage) for
one experiment, on a local address, from the Optuna study a :class:`kubetune.sdk.live_study.LiveStudy` keeps
from an :class:`kubetune.sdk.analysis.ExperimentAnalysis`. The study lives in an Optuna ``InMemoryStorage``
in this process (no database, nothing written anywhere). While the server serves, a thread refreshes it from
storage every ``refresh_s`` seconds (one listing of the experiment's folder; the experiment read again only
when something there changed), so new trials, new results and trials' final states show in the open page
(its trial list polls every 2 s, the study's page every 10 s). Callers: the ``kubetune dashboard`` command
(:func:`serve`, until Ctrl-C) and tests or notebooks (:class:`Dashboard` in a thread, stopped with
:meth:`Dashboard.close`).

The server is the standard library's WSGI server with a thread per request (the dashboard's pages poll
its API while the user looks); Optuna's ``InMemoryStorage`` takes a lock for each call.
"""

from __future__ import annotations

import logging
import socketserver
import threading
from typing import TYPE_CHECKING, Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from kubetune.sdk.live_study import DEFAULT_SETTLE_S, LiveStudy

if TYPE_CHECKING:
    from kubetune.sdk.analysis import ExperimentAnalysis

__all__ = ["DEFAULT_REFRESH_S", "Dashboard", "serve"]

log = logging.getLogger(__name__)

#: Seconds between two refreshes of the study from storage. A result written to storage shows in the trial list
#: within about this plus 4 s: Optuna Dashboard's server caches the trials for 2 s (under 100 trials) and the
#: page polls every 2 s.
DEFAULT_REFRESH_S = 1.0


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Leave each request unlogged (the dashboard polls every few seconds)."""


class Dashboard:
    """Optuna Dashboard of one experiment, listening on ``host:port`` (bound when made; served by :meth:`start`).

    Args:
        analysis: the experiment, read from storage.
        metric, mode: the study's objective; default the analysis's
            (:func:`kubetune.sdk.optuna_study.fill_study`).
        host: the address to listen on; the default, loopback, keeps it on this machine.
        port: the TCP port; 0 picks a free one.
        reread: reads the experiment again at a refresh; default ``analysis.reread`` (:class:`LiveStudy`).
        refresh_s: seconds between two refreshes from storage while serving.
        settle_s: seconds without a write to storage after which the trials get their final states
            (:mod:`kubetune.sdk.live_study`).

    Attributes:
        live: the :class:`LiveStudy` served; ``live.study`` is the Optuna study.
        refresh_s: as given.
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
        reread: Callable[[], ExperimentAnalysis] | None = None,
        refresh_s: float = DEFAULT_REFRESH_S,
        settle_s: float = DEFAULT_SETTLE_S,
    ):
        try:
            from optuna_dashboard import wsgi
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("the dashboard needs Optuna Dashboard: pip install 'kubetune[views]'") from exc
        self.live = LiveStudy(analysis, metric, mode, reread=reread, settle_s=settle_s)
        self.refresh_s = refresh_s
        storage = self.live.storage
        study_id = storage.get_study_id_from_name(self.live.study.study_name)
        self._server = make_server(
            host, port, wsgi(storage), server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        self.url = f"http://{bound_host}:{bound_port}/dashboard/studies/{study_id}"

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`close` (from another thread) or an exception (Ctrl-C), refreshing the
        study from storage in a daemon thread meanwhile. That thread ends after the refresh it may be in (not
        waited for: one can wait out an S3 outage for minutes)."""
        stop = threading.Event()
        refresher = threading.Thread(target=self._refresh_until, args=(stop,), name="kubetune-refresh", daemon=True)
        refresher.start()
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            stop.set()

    def _refresh_until(self, stop: threading.Event) -> None:
        """Refresh the study every :attr:`refresh_s` seconds until ``stop`` is set; a refresh that fails (storage
        unreachable, say) is logged and the next one tries again."""
        while not stop.wait(self.refresh_s):
            try:
                self.live.refresh()
            except Exception:  # noqa: BLE001 - any failure of one refresh; the page keeps what it shows
                log.warning("refreshing the dashboard's study from storage failed", exc_info=True)

    def start(self) -> Dashboard:
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

    def __enter__(self) -> Dashboard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(dashboard: Dashboard, open_browser: bool = True) -> None:
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
