"""The operator's view of trial pods: one list-then-watch of the ``managed-by`` label per watched scope.

Owns :class:`PodWatch`, started by the startup handler (``handlers.py``) and read by every Experiment's
daemon before each pass. It keeps a :class:`kubetune_operator.podview.PodView` of every trial pod, by
``(namespace, experiment label)``, and wakes an Experiment's daemon when one of its pods changes.

Why not a kopf index: kopf treats each pod as an object with its own worker and runs each index handler
on its thread pool, and its daemons wait until every index has seen every pod; a restarted operator with
10,000 trial pods had run no pass after 300 s. Here a pod costs one JSON decode and one ``pod_view`` on
the watch thread, the list is paginated, and a pass only waits for the first full list.

A deleted pod stays in the cache for :data:`TOMBSTONE_S` as its last state with ``gone`` set (the watch's
``DELETED`` event carries it): a pod evicted or preempted ends and is deleted by its kubelet a moment
later, usually before the Experiment's next pass, and that last state is what says why it ended (the
``DisruptionTarget`` condition) and holds the runtime's termination message.

The list and the watch follow the API's rules for a reflector (KEP-3157 describes the protocol): list,
then watch from the list's ``resourceVersion`` with bookmarks; a ``410 Gone`` (the version is too old) or
any failure lists again after a back-off, and the new list replaces the cache whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections import deque
from typing import Callable

from kubernetes import client, watch

from .labels import LABEL_EXPERIMENT, LABEL_MANAGED_BY, MANAGED_BY
from .podview import PodView, pod_view

log = logging.getLogger("kubetune.podwatch")
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
#: Pods per page of the initial list.
PAGE = 500
#: Server-side length of one watch request, seconds (the watch is then resumed from the last version).
WATCH_TIMEOUT_S = 240
#: Back-off after a failed list or watch: doubles from the first value up to the second, seconds.
BACKOFF_S = (0.5, 30.0)
#: How long a deleted pod's last state stays in the cache (``PodView.gone``), seconds: long enough for the
#: next passes of its Experiment, even one backing off after API failures.
TOMBSTONE_S = 300.0

_ENDED = ("Succeeded", "Failed")
Key = tuple[str, str]
"""``(namespace, experiment label value)``."""


def _view(pod: dict, warned: set[str]) -> PodView | None:
    """``pod_view(pod)``, or None (with one warning per pod) for a pod whose kubetune labels do not parse: one
    carrying the managed-by label whose trial, attempt, rank or world-size label someone removed or edited."""
    try:
        return pod_view(pod)
    except (KeyError, ValueError) as exc:
        meta = pod["metadata"]
        if meta.get("uid") not in warned:
            warned.add(meta.get("uid"))
            log.warning(
                "ignoring pod %s/%s: it has the label %s but its kubetune labels are not kubetune's (%s: %s)",
                meta.get("namespace"),
                meta.get("name"),
                SELECTOR,
                type(exc).__name__,
                exc,
            )
        return None


def _key(pod: dict) -> Key:
    meta = pod["metadata"]
    return meta["namespace"], (meta.get("labels") or {}).get(LABEL_EXPERIMENT, "")


class PodWatch:
    """Trial pods by Experiment, kept current by a watch thread per scope.

    Args:
        core: the Kubernetes ``CoreV1Api`` to list and watch with.
        namespaces: the namespaces to watch; empty means the whole cluster.
        on_change: called on the event loop with ``(namespace, experiment label, ended)`` when one of its
            pods is added, changed or deleted, or when a new list replaces the cache; ``ended`` says a pod
            reached ``Succeeded`` or ``Failed`` or went (a slot may be free).
    """

    def __init__(
        self, core: client.CoreV1Api, namespaces: tuple[str, ...], on_change: Callable[[str, str, bool], None]
    ):
        self.core = core
        self.scopes: tuple[str | None, ...] = tuple(namespaces) or (None,)
        self.on_change = on_change
        self.error: str | None = None
        """The last list or watch failure, for conditions while the first list has not completed."""
        self._pods: dict[Key, dict[str, PodView]] = {}
        self._scope_of: dict[Key, str | None] = {}
        self._tombstones: deque[tuple[float, Key, PodView]] = deque()  # (deleted at, key, view), oldest first
        self._synced: set[str | None] = set()
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._warned: set[str] = set()  # uids of pods ignored for labels that are not kubetune's

    def start(self) -> None:
        """Start one daemon thread per scope (call on the event loop)."""
        self._loop = asyncio.get_running_loop()
        for scope in self.scopes:
            threading.Thread(target=self._run, args=(scope,), name=f"podwatch-{scope or 'all'}", daemon=True).start()

    def stop(self) -> None:
        """Ask the threads to end (each ends at its next event or watch timeout)."""
        self._stop.set()

    async def synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every scope has been listed once; True if it has."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def pods(self, namespace: str, experiment_label: str) -> dict[str, PodView]:
        """The trial pods of one Experiment, by pod name (a copy), with those deleted in the last
        :data:`TOMBSTONE_S` seconds as their last state (``gone`` set)."""
        self._expire(time.monotonic())
        return dict(self._pods.get((namespace, experiment_label), {}))

    # ----- on the event loop ---------------------------------------------------------------------
    def _replace(self, scope: str | None, listed: dict[Key, dict[str, PodView]]) -> None:
        """A full list of ``scope``: it replaces that scope's pods; every Experiment whose pods it had or
        has is woken."""
        old = [key for key, s in self._scope_of.items() if s == scope]
        for key in old:
            self._pods.pop(key, None)
            del self._scope_of[key]
        for key, views in listed.items():
            self._pods[key], self._scope_of[key] = views, scope
        self._synced.add(scope)
        if len(self._synced) == len(self.scopes):
            self._ready.set()
        for key in set(old) | set(listed):
            self.on_change(*key, True)

    def _apply(self, scope: str | None, kind: str, key: Key, view: PodView, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._expire(now)
        views = self._pods.setdefault(key, {})
        self._scope_of[key] = scope
        before = views.get(view.name)
        if kind == "DELETED":
            view = views[view.name] = dataclasses.replace(view, gone=True, deleting=True)
            self._tombstones.append((now, key, view))
        else:
            views[view.name] = view
        ended = kind == "DELETED" or (view.phase in _ENDED and (before is None or before.phase not in _ENDED))
        self.on_change(*key, ended)

    def _expire(self, now: float) -> None:
        """Drop the deleted pods' last states older than :data:`TOMBSTONE_S` (unless a pod of the same name
        came back meanwhile)."""
        while self._tombstones and self._tombstones[0][0] <= now - TOMBSTONE_S:
            _, key, view = self._tombstones.popleft()
            views = self._pods.get(key)
            if views is not None and views.get(view.name) is view:
                del views[view.name]
                if not views:
                    del self._pods[key], self._scope_of[key]

    # ----- on the watch thread -------------------------------------------------------------------
    def _call(self, fn, *args) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def _list(self, scope: str | None) -> tuple[dict[Key, dict[str, PodView]], str]:
        """Every trial pod of ``scope``, page by page, and the list's resource version."""
        listed: dict[Key, dict[str, PodView]] = {}
        token = None
        while True:
            kwargs = {"label_selector": SELECTOR, "limit": PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            resp = (
                self.core.list_pod_for_all_namespaces(**kwargs)
                if scope is None
                else self.core.list_namespaced_pod(scope, **kwargs)
            )
            page = json.loads(resp.data)
            for pod in page["items"]:
                view = _view(pod, self._warned)
                if view is not None:
                    listed.setdefault(_key(pod), {})[pod["metadata"]["name"]] = view
            token = page["metadata"].get("continue")
            if not token:
                return listed, page["metadata"]["resourceVersion"]

    def _watch(self, scope: str | None, version: str) -> str:
        """Apply watch events from ``version`` until the server ends the request; returns the last version.

        Raises:
            kubernetes.client.ApiException: e.g. 410 when ``version`` is too old.
        """
        stream = watch.Watch(return_type="object")  # plain dicts: no client models
        fn = self.core.list_pod_for_all_namespaces if scope is None else self.core.list_namespaced_pod
        args = () if scope is None else (scope,)
        for event in stream.stream(
            fn,
            *args,
            label_selector=SELECTOR,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
        ):
            pod = event["raw_object"]
            version = pod["metadata"].get("resourceVersion") or version
            view = _view(pod, self._warned) if event["type"] in ("ADDED", "MODIFIED", "DELETED") else None
            if view is not None:
                self._call(self._apply, scope, event["type"], _key(pod), view)
            if self._stop.is_set():
                stream.stop()
        return version

    def _run(self, scope: str | None) -> None:
        failures, version = 0, None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed, version = self._list(scope)
                    self._call(self._replace, scope, listed)
                version = self._watch(scope, version)
                failures, self.error = 0, None
            except Exception as exc:  # noqa: BLE001 - any failure: list again after a back-off
                failures += 1
                gone = isinstance(exc, client.ApiException) and exc.status == 410
                self.error = None if gone else f"listing trial pods failed: {type(exc).__name__}: {exc}"[:500]
                if not gone:
                    log.warning("pod watch (%s): %s", scope or "all namespaces", self.error)
                version = None
                self._stop.wait(0 if gone and failures == 1 else min(BACKOFF_S[0] * 2 ** (failures - 1), BACKOFF_S[1]))
