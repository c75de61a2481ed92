"""The results collector: an aiohttp endpoint in the operator's own event loop
where trial runtimes POST batches of results and get the scheduler's decision;
the same server answers ``/healthz``, ``/metrics`` (Prometheus) and an Experiment's driver pod, which reads the
journal's entries there (``kubetune.env.DRIVER_EVENTS_PATH``, ``kubetune_operator.driver``).

Started by the operator's startup handler (``handlers.py``); it hands each
authenticated batch to the Experiment's
:class:`kubetune_operator.controller.ExperimentController` through the
:class:`kubetune_operator.registry.Registry`, and answers only once the
Experiment's journal holds the decision (so a restarted operator decides on
from exactly there). Protocol: ``kubetune.env``
(``COLLECTOR_RESULTS_PATH``). Forged or stale tokens get 401 (a forged one before
its body is read), malformed bodies 400 (the batch's shape is the pydantic model
:class:`ResultBatch`), bodies over the limit 413, and none of them reaches trial
state. A well-formed batch with a value the operator cannot take (an infinite
``training_iteration``, a checkpoint outside the trial's folder: the checks of
:mod:`kubetune_operator.podinput`) is refused whole with a 400 that says why, and the
refusal is reported on the Trial in a Warning event. Tokens and bodies are never logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import (
    BaseModel,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from kubetune.env import (
    COLLECTOR_RESULTS_PATH,
    DRIVER_ANSWERS_PATH,
    DRIVER_EVENTS_PATH,
    MAX_STALL_MESSAGE,
    STALL_REASONS,
)

from . import metrics
from .driver import driver_subject
from .labels import pod_name
from .metricsauth import MetricsAuth
from .params import describe
from .podinput import checkpoint_problem, display_name_problem, explored_problem, result_problem
from .podview import DECISION_RANK
from .tokens import token_claims

#: Results handed to the scheduler at a time; the event loop (probes, other requests) runs between steps.
RESULTS_PER_STEP = 10
#: Longest a driver pod's request for events waits for one (its ``wait``, in seconds).
MAX_DRIVER_WAIT_S = 20.0
#: While a driver pod's request waits, how often it looks again whether the Experiment would end (no journal entry
#: says so), in seconds.
DRIVER_WAIT_SLICE_S = 0.5

log = logging.getLogger("kubetune.collector")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


_Name = Annotated[StrictStr, Field(min_length=1)]


class CheckpointRef(BaseModel):
    """The latest checkpoint the attempt committed (``kubetune.checkpoint_store``)."""

    uri: StrictStr
    """The committed checkpoint folder's URI (checked by :func:`kubetune_operator.podinput.checkpoint_problem`)."""

    iteration: StrictInt | None = None
    """The ``training_iteration`` it was saved at."""


class Stall(BaseModel):
    """What stalls a trial attempt, as its runtime sees it (``kubetune.env.STALL_REASONS``)."""

    reason: Literal[STALL_REASONS]
    message: Annotated[StrictStr, Field(max_length=MAX_STALL_MESSAGE)]


class ResultBatch(BaseModel):
    """One POST of a trial runtime (written by ``kubetune.runtime.reporter``).

    Validate with ``ResultBatch.model_validate_json(body, context={"max_results": n})``; JSON's ``NaN``
    and ``Infinity`` are accepted here, and the values of the results are checked next, by
    :func:`kubetune_operator.podinput.result_problem` (a diverging metric is a result; an infinite
    ``training_iteration`` is not).

    Raises:
        pydantic.ValidationError: a field is missing or of the wrong type, ``attempt`` is negative, or
            ``results`` holds more than ``max_results`` entries.
    """

    namespace: _Name
    experiment: _Name
    trial: _Name
    attempt: Annotated[StrictInt, Field(ge=0)]
    """The attempt the bearer token was issued for."""

    results: list[dict[str, Any]] = []
    """Results in the order they were reported, without their ``config``."""

    checkpoint: CheckpointRef | None = None
    done: StrictBool = False
    """The attempt's last batch."""

    stalled: Stall | None = None
    """What stalls the attempt now; absent: nothing does (:meth:`ExperimentController.trial_stalled`)."""

    explored: dict[str, Any] | None = None
    """The config the attempt computed in its pod: its PBT exploit's user functions called
    (``kubetune.env.PBT_EXPLORE``), or the values it drew for the config's ``sample_from`` functions."""

    displayName: StrictStr | None = None
    """The display name the attempt's ``trial_name_creator`` gave (``kubetune.env.TRIAL_NAME_CREATOR``)."""

    @field_validator("results")
    @classmethod
    def _at_most(cls, results: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        limit = (info.context or {}).get("max_results")
        if limit is not None and len(results) > limit:
            raise ValueError(f"at most {limit} results per batch")
        return results


def _problem(
    ctl,
    trial: str,
    results: list[dict[str, Any]],
    checkpoint: dict | None,
    explored: dict | None = None,
    display_name: str | None = None,
) -> str | None:
    """Why the operator cannot take a batch's values (:mod:`kubetune_operator.podinput`), or None."""
    for index, result in enumerate(results):
        problem = result_problem(result)
        if problem is not None:
            return f"results[{index}]: {problem}"
    if explored is not None:  # it becomes the Trial's status.config
        problem = explored_problem(explored)
        if problem is not None:
            return f"explored: {problem}"
    if display_name is not None:  # it becomes the Trial's status.displayName
        problem = display_name_problem(display_name)
        if problem is not None:
            return f"displayName: {problem}"
    if checkpoint is not None and ctl.trials.get(trial) is not None:
        return checkpoint_problem(checkpoint["uri"], checkpoint["iteration"], ctl.trial_dir(trial))
    return None


def make_app(registry, metrics_auth: MetricsAuth | None = None) -> web.Application:
    """Return the collector's application for ``registry`` (which holds settings, key and controllers);
    ``/metrics`` answers only the requests ``metrics_auth`` lets in (None: every request)."""
    limits = registry.settings.collector
    busy = asyncio.Lock()

    @web.middleware
    async def count(request: web.Request, handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path == COLLECTOR_RESULTS_PATH:
            metrics.COLLECTOR_REQUESTS.labels(str(response.status)).inc()
        return response

    async def results(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return _error(401, "missing bearer token")
        claims = token_claims(registry.key, auth[len("Bearer ") :])
        if claims is None:  # checked before the body is read: a forged request costs one HMAC
            return _error(401, "invalid token")
        if request.content_length is not None and request.content_length > limits.max_body_bytes:
            return _error(413, f"body over {limits.max_body_bytes} bytes")
        try:
            body = await request.read()  # the whole body (a plain read may return a part of a large one)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body over {limits.max_body_bytes} bytes")
        async with busy:  # one batch parsed and judged at a time: a flood queues here, not in the event loop
            try:
                batch = ResultBatch.model_validate_json(body, context={"max_results": limits.max_results_per_batch})
            except ValidationError as exc:
                return _error(400, f"malformed batch: {describe(exc, 'body')}")
            ns, experiment, trial, attempt = batch.namespace, batch.experiment, batch.trial, batch.attempt
            if (ns, trial, attempt) != claims[:3]:
                return _error(401, "invalid token for this trial and attempt")
            ctl = registry.get(ns, experiment)
            if ctl is None or not ctl.adopted:
                return _error(503, "experiment not loaded yet; retry")
            results, decision = batch.results, "continue"
            checkpoint = batch.checkpoint.model_dump() if batch.checkpoint else None
            problem = _problem(ctl, trial, results, checkpoint, batch.explored, batch.displayName)
            if problem is not None:  # nothing of the batch is taken; the Trial shows why
                ctl.results_refused(trial, attempt, problem)
                registry.wake(ns, experiment)
                return _error(400, f"refused batch: {problem}")
            for start in range(0, max(len(results), 1), RESULTS_PER_STEP):
                if start:
                    await asyncio.sleep(0)  # the probes and the daemons run between the steps of a large batch
                last = start + RESULTS_PER_STEP >= len(results)
                try:
                    step = ctl.record_results(
                        trial,
                        attempt,
                        results[start : start + RESULTS_PER_STEP],
                        checkpoint if last else None,
                        uid=claims[3],
                        explored=batch.explored if not start else None,
                        display_name=batch.displayName if not start else None,
                    )
                except Exception:  # noqa: BLE001 - a scheduler or searcher bug must not take the collector down
                    log.exception("experiment %s/%s: results of %s could not be taken", ns, experiment, trial)
                    return _error(500, "the operator could not take these results; retry")
                if step is None:
                    return _error(401, "stale token: not the trial's current attempt")
                decision = max(decision, step, key=DECISION_RANK.__getitem__)
            ctl.trial_stalled(trial, batch.stalled.model_dump() if batch.stalled else None)
            if batch.done and ctl.container_trial is not None:  # the sidecar's last batch: nothing more comes
                ctl.output_read_to_end(pod_name(trial, attempt), "sidecar")
        try:
            await registry.commit(ctl)  # the decision is durable before the trial acts on it
        except Exception as exc:  # noqa: BLE001 - the runtime retries; the results are de-duplicated
            log.warning("experiment %s/%s: journal not committed: %s", ns, experiment, exc)
            return _error(503, "the operator could not persist its decision; retry")
        registry.wake(ns, experiment)
        metrics.RESULTS.inc(len(results))
        metrics.DECISIONS.labels(decision).inc()
        return web.json_response({"decision": decision})

    def driver_controller(request: web.Request):
        """The controller of the Experiment whose driver pod's token the request carries (``namespace`` and
        ``experiment`` in its query), or the error to answer: 401 for a token that is not that driver's or is
        stale, 503 while the Experiment is not loaded."""
        auth = request.headers.get("Authorization", "")
        claims = token_claims(registry.key, auth[len("Bearer ") :]) if auth.startswith("Bearer ") else None
        namespace, experiment = request.query.get("namespace", ""), request.query.get("experiment", "")
        if claims is None or claims[:2] != (namespace, driver_subject(experiment)):
            return _error(401, "invalid driver token")
        ctl = registry.get(namespace, experiment)
        if ctl is None or not ctl.adopted:
            return _error(503, "experiment not loaded yet; retry")
        if claims[3] != ctl.experiment["metadata"].get("uid"):
            return _error(401, "stale driver token: the Experiment was created again")
        return ctl

    async def driver_answers(request: web.Request) -> web.Response:
        """The driver pod's answers (``kubetune.env.DRIVER_ANSWERS_PATH``, a JSON body ``{"suggestions": {trial:
        config or "FINISHED"}, "checkpoints": {trial: [attempt, iteration]}}``, either part optional): its searcher's
        suggestions the operator asks for and its callbacks' checkpoint requests are journaled, committed and then
        answered ``{"taken": [trial, ...]}`` (the suggestions taken); 400 for a malformed body, suggestion or request,
        401 and 503 as for the events, 503 when the journal could not be committed (the pod sends them again)."""
        ctl = driver_controller(request)
        if isinstance(ctl, web.Response):
            return ctl
        try:
            body = await request.json()
            suggestions, checkpoints = body.get("suggestions") or {}, body.get("checkpoints") or {}
            if not isinstance(suggestions, dict) or not isinstance(checkpoints, dict):
                raise TypeError("suggestions and checkpoints must be objects")
            taken = [trial for trial, suggestion in suggestions.items() if ctl.driver_suggested(trial, suggestion)]
            asked = [trial for trial, ask in checkpoints.items() if ctl.driver_checkpoint(trial, ask)]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _error(400, f"bad answers: {exc}")
        if taken or asked:
            try:
                await registry.commit(ctl)
            except Exception as exc:  # noqa: BLE001 - the pod sends its answers again; taken ones are ignored then
                log.warning("experiment %s/%s: journal not committed: %s", ctl.namespace, ctl.name, exc)
                return _error(503, "the operator could not persist the driver's answers; retry")
            registry.wake(ctl.namespace, ctl.name)
        return web.json_response({"taken": taken})

    async def driver(request: web.Request) -> web.Response:
        """The driver pod's events (``kubetune.env.DRIVER_EVENTS_PATH``): 401 for a token that is not the
        Experiment's driver's, 400 for a bad ``after`` or ``wait``, 503 while the Experiment is not loaded, 409 when
        the entries asked for are not kept. With ``wait`` (seconds, at most :data:`MAX_DRIVER_WAIT_S`), an answer
        with no event waits until an entry is committed, the Experiment would end, or ``wait`` has passed."""
        try:
            after = int(request.query.get("after", "-1"))
        except ValueError:
            return _error(400, "after must be an integer")
        if after < -1:
            return _error(400, "after must be -1 or more")
        ctl = driver_controller(request)
        if isinstance(ctl, web.Response):
            return ctl
        namespace, experiment = ctl.namespace, ctl.name
        try:
            wait_s = float(request.query.get("wait", "0"))
        except ValueError:
            wait_s = math.nan
        if math.isnan(wait_s):  # NaN passes no comparison: it would be clamped to nothing and wait forever
            return _error(400, "wait must be a number of seconds")
        wait_s = min(max(wait_s, 0.0), MAX_DRIVER_WAIT_S)
        declined = request.query.get("declined")  # the trial its searcher said "not now" for: no reason to answer
        deadline = time.monotonic() + wait_s
        try:
            while True:
                reply = ctl.driver_events(after)
                left = deadline - time.monotonic()
                asked = reply["suggest"] is not None and reply["suggest"] != declined
                if (
                    reply["events"]
                    or reply["finished"]
                    or asked
                    or left <= 0
                    or registry.get(namespace, experiment) is not ctl
                ):
                    return web.json_response(reply)
                # the Experiment's end is no journal entry: looked at again at least every DRIVER_WAIT_SLICE_S
                await ctl.journal.wait_for_feed(reply["next"], min(left, DRIVER_WAIT_SLICE_S))
        except LookupError as exc:
            return _error(409, str(exc))

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=limits.max_body_bytes, middlewares=[count])
    app.router.add_post(COLLECTOR_RESULTS_PATH, results)
    app.router.add_get(DRIVER_EVENTS_PATH, driver)
    app.router.add_post(DRIVER_ANSWERS_PATH, driver_answers)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics.handler(metrics_auth))
    return app


async def start(registry, metrics_auth: MetricsAuth | None = None) -> web.AppRunner:
    """Start serving on the settings' bind address; returns the runner (``await runner.cleanup()`` stops it)."""
    runner = web.AppRunner(make_app(registry, metrics_auth), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, registry.settings.collector.bind_host, registry.settings.collector.bind_port)
    await site.start()
    log.info(
        "collector listening on %s:%s", registry.settings.collector.bind_host, registry.settings.collector.bind_port
    )
    return runner
