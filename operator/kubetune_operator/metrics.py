"""The operator's Prometheus metrics, served at ``/metrics`` on the collector's port.

Updated by the collector (requests, results, decisions) and by the Experiment
daemon in ``handlers.py`` (trials per phase, reconcile pass time). The collector
serves :func:`handler`, behind :class:`kubetune_operator.metricsauth.MetricsAuth`
unless ``metrics.auth`` is ``none``.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from .metricsauth import MetricsAuth
from .status import TRIAL_PHASES

COLLECTOR_REQUESTS = Counter("kubetune_collector_requests_total", "Result batches received, by HTTP status.", ["code"])
RESULTS = Counter("kubetune_results_total", "Training results accepted by the collector.")
DECISIONS = Counter("kubetune_decisions_total", "Decisions sent back to trial runtimes.", ["decision"])
TRIALS = Gauge("kubetune_trials", "Trials per phase.", ["namespace", "experiment", "phase"])
RECONCILE_SECONDS = Histogram(
    "kubetune_reconcile_seconds",
    "Time of one reconcile pass of an Experiment.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def set_trial_counts(namespace: str, experiment: str, counts: dict[str, int]) -> None:
    """Publish ``status.trials`` counts (``{"pending": n, ...}``) of one Experiment."""
    for phase, value in counts.items():
        if phase != "total":
            TRIALS.labels(namespace, experiment, phase).set(value)


def forget(namespace: str, experiment: str) -> None:
    """Drop the series of a deleted Experiment."""
    for phase in TRIAL_PHASES:
        try:
            TRIALS.remove(namespace, experiment, phase.lower())
        except KeyError:
            pass


def handler(auth: MetricsAuth | None):
    """The ``GET /metrics`` handler: every metric in the Prometheus text format, to requests ``auth`` lets in
    (None: to every request); others get its 401, 403 or 500 with a one-line reason."""

    async def handle_metrics(request: web.Request) -> web.Response:
        if auth is not None:
            decision = await auth.check(request.headers.get("Authorization"))
            if decision.status != 200:
                return web.Response(status=decision.status, text=decision.message + "\n")
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handle_metrics
