"""The log streams of container trials: the operator follows each running container trial's log through the
Kubernetes API (``pods/log``, what ``kubectl logs -f`` reads) and hands the results it makes to its Experiment.

Owns :class:`LogStreams`, one asyncio task per followed pod on the operator's event loop (no thread per pod), each
an HTTP stream read line by line into :class:`kubetune.output_metrics.OutputParser`. Nothing runs in the trial's pod:
its command is not rewritten and no sidecar reads its output (docs/api.md, "Any container as a trial"). Results
are checked as the collector checks a runtime's (:func:`kubetune_operator.podinput.result_problem`), taken by
:meth:`ExperimentController.record_results` and committed to the journal before the next line is read, so a
decision is durable before the pod is deleted on it. A stream that breaks while its pod runs (an operator restart,
an API server's timeout) reads the log again from its start: the parser makes the same results and the controller
drops the iterations it holds, so none is lost or taken twice. A trial with a checkpoint folder numbers its results
from the iteration its restore init container restored (its termination message, ``PodView.restored_iteration``).
Once the container has ended and its log has been read to the end, the pod's outcome may follow
(:meth:`ExperimentController.output_read_to_end`). Started by the operator's startup handler (``handlers.py``); each
reconcile pass calls :meth:`LogStreams.follow`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Callable, Mapping
from urllib.parse import quote

import aiohttp

from kubetune.output_metrics import LineBuffer, OutputParser

from .labels import TRIAL_CONTAINER, pod_name
from .podinput import result_problem
from .podview import PodView
from .trial_book import TERMINAL

log = logging.getLogger("kubetune.logstream")

#: Seconds between tries to open a log that cannot be read yet (the container is still being created).
RETRY_S = 1.0
#: Longest the end of a log waits for the pod watch to show its container ended before the log is read again.
END_WAIT_S = 3.0
#: Results handed to the controller at a time, at most.
RESULTS_PER_BATCH = 50
#: Bytes read from the stream at a time.
CHUNK_BYTES = 65536


class LogStreams:
    """The log streams of every container trial the operator runs.

    Args:
        configuration: the operator's ``kubernetes.client.Configuration`` (API server, CA, client credentials).
        registry: the :class:`kubetune_operator.registry.Registry` of Experiments.
        pod_of: ``pod_of(namespace, experiment, pod)``: the pod's :class:`PodView` as the pod watch holds it, or None.
    """

    def __init__(self, configuration, registry, pod_of: Callable[[str, str, str], PodView | None]):
        self.cfg, self.registry, self.pod_of = configuration, registry, pod_of
        self.tasks: dict[tuple[str, str], asyncio.Task] = {}
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.cfg.host.startswith("https"):
            return False
        context = ssl.create_default_context(cafile=self.cfg.ssl_ca_cert)
        if self.cfg.cert_file:
            context.load_cert_chain(self.cfg.cert_file, self.cfg.key_file)
        if not self.cfg.verify_ssl:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context

    def session(self) -> aiohttp.ClientSession:
        """The HTTP session of every stream (made on first use, on the event loop): no limit on connections."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ssl=self._ssl())
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    def _headers(self) -> dict[str, str]:
        auth = self.cfg.auth_settings().get("BearerToken") or {}  # refreshes a projected token when it rotates
        return {"Authorization": auth["value"]} if auth.get("value") else {}

    def follow(self, ctl, pods: Mapping[str, PodView]) -> None:
        """Follow the log of each current attempt's pod of ``ctl``'s container trials that is running, or has ended
        with its log not read to the end yet; a no-op for an Experiment of runtime trials, or of container trials whose
        metrics a sidecar reads (``metricsCollector.kind`` other than ``StdOut``)."""
        if ctl.container_trial is None or ctl.container_trial.sidecar_reads_metrics:
            return  # runtime trials post their results; a metrics sidecar posts a container's
        for trial in ctl.open_trials():
            if trial.phase in TERMINAL or trial.phase == "Paused":
                continue
            pod = pods.get(pod_name(trial.name, trial.attempt))
            if (
                pod is None
                or pod.gone
                or pod.phase == "Pending"
                or pod.restore_failed
                or ctl.output_read(pod.name, "log")
            ):
                continue
            key = (ctl.namespace, pod.name)
            if key not in self.tasks:
                task = asyncio.get_running_loop().create_task(
                    self._follow(ctl.namespace, ctl.name, trial.name, trial.attempt, pod.name)
                )
                self.tasks[key] = task
                task.add_done_callback(lambda _, key=key: self.tasks.pop(key, None))

    async def close(self) -> None:
        """Cancel every stream and close the session."""
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _follow(self, namespace: str, experiment: str, trial: str, attempt: int, pod: str) -> None:
        url = (
            f"{self.cfg.host}/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log"
            f"?container={TRIAL_CONTAINER}&follow=true"
        )
        while True:
            ctl = self.registry.get(namespace, experiment)
            state = ctl.trials.get(trial) if ctl is not None else None
            if state is None or state.attempt != attempt or state.phase in TERMINAL or state.phase == "Paused":
                return  # the Experiment went, or the attempt's outcome is taken: nobody waits for its results
            try:
                ended = await self._read(ctl, url, trial, attempt, pod)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken stream is read again from its start
                log.warning("experiment %s/%s: log of pod %s: %s (reading it again)", namespace, experiment, pod, exc)
                ctl.output_unreadable(pod, f"{type(exc).__name__}: {exc}"[:300])
                ended = False
            if ended is None:
                return
            view = self.pod_of(namespace, experiment, pod)
            if ended or view is None or view.gone:  # read to its end, or nothing more can be read
                ctl.output_read_to_end(pod, "log")
                self.registry.wake(namespace, experiment)
                return
            await asyncio.sleep(RETRY_S)

    async def _read(self, ctl, url: str, trial: str, attempt: int, pod: str) -> bool | None:
        """Read the log once from its start; return True when it ended with the container (or the pod went), False
        when it broke or could not be opened yet, None when the attempt is no longer current."""
        spec = ctl.container_trial
        metrics = ctl.metric if isinstance(ctl.metric, tuple) else (ctl.metric,)
        parser = OutputParser(metrics, spec.format, spec.metrics_format, spec.iteration_key)
        if spec.checkpoint_path is not None:  # results go on from the restored checkpoint's iteration
            view = self.pod_of(ctl.namespace, ctl.name, pod)
            if view is None or view.restored_iteration is None:
                return False  # the watch has not shown the restore's end yet
            parser.iteration = view.restored_iteration
        async with self.session().get(url, headers=self._headers()) as response:
            if response.status == 404:
                return True  # the pod went, its log with it: what was read is all there is
            if response.status != 200:  # 400 while the container is being created
                text = (await response.text())[:300]
                if response.status != 400 and not ctl.output_unreadable(pod, f"HTTP {response.status}: {text}"):
                    log.warning(
                        "experiment %s/%s: log of pod %s: HTTP %d: %s",
                        ctl.namespace,
                        ctl.name,
                        pod,
                        response.status,
                        text,
                    )
                return False
            lines = LineBuffer()
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                results = parser.feed_all(lines.feed(chunk))
                if results and not await self._deliver(ctl, trial, attempt, results):
                    return None
            results = parser.feed_all(lines.end())
            if results and not await self._deliver(ctl, trial, attempt, results):
                return None
        return await self._ended(ctl, pod)

    async def _ended(self, ctl, pod: str) -> bool:
        """Whether the pod's container ended, as the pod watch shows it within :data:`END_WAIT_S` of the log's end
        (the log ends as the container does; the watch's event follows shortly): else the log broke."""
        deadline = asyncio.get_running_loop().time() + END_WAIT_S
        while True:
            view = self.pod_of(ctl.namespace, ctl.name, pod)
            if view is None or view.gone or view.phase in ("Succeeded", "Failed") or view.deleting:
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def _deliver(self, ctl, trial: str, attempt: int, results: list[dict]) -> bool:
        """Hand ``results`` to the controller and commit its decisions; False when ``attempt`` is not current."""
        for start in range(0, len(results), RESULTS_PER_BATCH):
            batch = []
            for result in results[start : start + RESULTS_PER_BATCH]:
                problem = result_problem(result)
                if problem is None:
                    batch.append(result)
                else:  # the result is left out; the Trial shows why
                    ctl.results_refused(trial, attempt, f"a result read from the output: {problem}")
            if batch and ctl.record_results(trial, attempt, batch, None) is None:
                return False
            await self.registry.commit(ctl)
            self.registry.wake(ctl.namespace, ctl.name)
        return True
