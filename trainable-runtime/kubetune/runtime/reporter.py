"""Results from the trial pod to the operator's collector, posted in the background.

The in-pod runtime (``kubetune.runtime``) hands every result to :meth:`Reporter.report`, which only
appends to a bounded in-memory buffer; where the scheduler decides at results, the runtime then
waits for that result's answer (:meth:`Reporter.wait_answered`: one round trip, bounded, and not at
all while the collector is unreachable) before the next step, as Ray does. A daemon thread posts
the buffer in batches to ``<collector>/v1alpha1/results`` (protocol in :mod:`kubetune.env`) over one
kept-alive urllib3 connection, retries while the collector is unreachable or answers 5xx with the
exponential backoff of urllib3's ``Retry`` (no limit on attempts: results wait in the buffer), and reads the
scheduler's decision from each reply (``continue``, ``stop``, ``pause``, ``checkpoint``), which the
runtime polls with :meth:`Reporter.take_decision`.

Delivery rules:
    * results are sent in order and leave the buffer when their batch is acknowledged (200); a batch
      whose reply was lost is sent again, so delivery is at least once (``training_iteration``
      identifies a repeat);
    * when more than ``max_buffer`` results wait, the oldest are dropped, never the newest
      (the scheduler decides on the newest);
    * the latest committed checkpoint rides on the next batch (a batch with no results is sent for it);
    * what stalls the attempt (:meth:`Reporter.set_stall`: storage that does not answer) rides on every
      batch while it lasts; a change is sent at once, in a batch with no results if need be;
    * a 413 halves the batch; a result alone larger than ``MAX_BATCH_BYTES`` is dropped; a 400 drops
      the batch (it would never be accepted); a 401 fences the attempt (a newer one owns the trial:
      :meth:`Reporter.take_decision` says :data:`FENCED`, nothing more is sent); other failures are
      retried;
    * :meth:`Reporter.close` sends what is left with ``done: true`` on the last batch.

Results go out without their ``config`` key: the operator holds each trial's config already, and it
would otherwise dominate the batch size. The bearer token is never logged.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections import deque
from itertools import islice
from typing import Any
from urllib.parse import urlparse

import urllib3
from urllib3.util.retry import Retry

from kubetune.env import COLLECTOR_RESULTS_PATH, DECISIONS, MAX_BATCH_BYTES, MAX_STALL_MESSAGE

#: What :meth:`Reporter.take_decision` returns once the collector refused this attempt's token.
FENCED = "fenced"

log = logging.getLogger(__name__)

#: How often, at most, the reporter logs that the collector is still unreachable, in seconds.
_LOG_EVERY_S = 30.0


def json_default(obj: Any) -> Any:
    """``json.dumps`` fallback for results: numpy scalars and arrays, sets, then ``str`` (Ray's SafeFallbackEncoder)."""
    if hasattr(obj, "tolist"):  # numpy arrays and scalars (a scalar's tolist() is its Python value)
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    return str(obj)


class _Retry(Exception):
    """The batch was not delivered and may be sent again.

    Args:
        reason: what went wrong, for the log.
        error: the connection error, if that is what went wrong.
        response: the 5xx (or other unexpected) response, if that is what went wrong.
    """

    def __init__(self, reason: str, error: Exception | None = None, response: Any = None):
        super().__init__(reason)
        self.error, self.response = error, response


class _Rejected(Exception):
    """The collector refused the batch for good (400)."""


class _TooLarge(Exception):
    """The collector answered 413."""


class _Fenced(Exception):
    """The collector answered 401: this attempt's token is not (or no longer) the trial's."""


class Reporter:
    """Posts results of one trial attempt to the collector from a daemon thread.

    Args:
        url: the collector's base URL (``KUBETUNE_COLLECTOR_URL``), ``http://`` or ``https://``.
        token: the per-trial bearer token (``KUBETUNE_TOKEN``), or None.
        namespace, experiment, trial, attempt: the batch envelope's identity fields.
        max_buffer: how many results may wait for delivery; beyond it the oldest are dropped.
        max_batch: most results in one batch.
        timeout_s: socket timeout of one POST, in seconds.
        backoff_s: ``(factor, cap)`` of the retry backoff, in seconds: urllib3's ``Retry`` waits
            ``factor * 2 ** (n - 1)`` plus up to ``factor`` of jitter after the n-th failure in a row
            (none after the first), at most ``cap``.

    Attributes:
        dropped: results dropped because the buffer was full or a result was too large.
        delivered: results acknowledged by the collector.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        namespace: str,
        experiment: str,
        trial: str,
        attempt: int,
        max_buffer: int = 10_000,
        max_batch: int = 1000,
        timeout_s: float = 10.0,
        backoff_s: tuple[float, float] = (0.2, 10.0),
    ):
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"collector URL must be http(s)://host[:port][/path], got {url!r}")
        tls = {"ssl_context": ssl.create_default_context()} if parsed.scheme == "https" else {}
        self._pool = urllib3.connection_from_url(
            url, maxsize=1, timeout=urllib3.Timeout(total=timeout_s), retries=False, **tls
        )
        self._path = parsed.path.rstrip("/") + COLLECTOR_RESULTS_PATH
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._envelope = json.dumps(
            {"namespace": namespace, "experiment": experiment, "trial": trial, "attempt": int(attempt)}
        )[:-1]
        self.max_buffer = max_buffer
        self._batch_limit = self._max_batch = max_batch
        #: The backoff policy: unlimited attempts (``total=None``) of any method, 5xx retried.
        self._retry = self._fresh_retry = Retry(
            total=None,
            allowed_methods=None,
            backoff_factor=backoff_s[0],
            backoff_jitter=backoff_s[0],
            backoff_max=backoff_s[1],
            raise_on_status=False,
        )

        self._cond = threading.Condition()
        self._buffer: deque[tuple[int, dict]] = deque()
        self._seq = 0
        self._checkpoint: dict | None = None
        self._checkpoint_version = 0
        self._checkpoint_sent = 0
        self._stall: dict | None = None
        self._stall_version = 0
        self._stall_sent = 0
        self._explored: str | None = None  # JSON of the config this attempt computed, until answered
        self._display_name: str | None = None  # the display name this attempt's trial_name_creator gave, until answered
        self._closing = False
        self._done_sent = False
        self._final_decision: str | None = None
        self._checkpoint_requested = False
        #: Set once the collector said this attempt is stale (401): the attempt must stop writing at once.
        self.fenced = threading.Event()
        #: The last post failed and is being retried.
        self.unreachable = False
        self._answered = 0  # sequence number of the newest result the collector answered for
        self.dropped = 0
        self.delivered = 0
        self._thread = threading.Thread(target=self._run, name="kubetune-reporter", daemon=True)

    # -- called by the training loop (never blocks on the network) -------------------------------

    def start(self) -> None:
        """Start the sender thread."""
        self._thread.start()

    def report(self, result: dict) -> int:
        """Queue ``result`` for delivery and return its sequence number (for :meth:`wait_answered`). O(1);
        drops the oldest queued result when the buffer is full."""
        with self._cond:
            self._seq += 1
            self._buffer.append((self._seq, result))
            if len(self._buffer) > self.max_buffer:
                self._buffer.popleft()
                self.dropped += 1
            self._cond.notify()
            return self._seq

    def wait_answered(self, seq: int, timeout_s: float) -> bool:
        """Wait until the collector answered a batch holding result ``seq`` (its decision is then in
        :meth:`take_decision`), at most ``timeout_s`` seconds; at once while the collector is unreachable
        (training goes on, and a late answer applies when it comes).

        Returns:
            Whether the answer came (or the attempt was fenced).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._answered < seq and not self.fenced.is_set() and not self.unreachable:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return self._answered >= seq or self.fenced.is_set()

    def set_checkpoint(self, uri: str, iteration: int) -> None:
        """Announce a newly committed checkpoint; it rides on the next batch."""
        with self._cond:
            self._checkpoint = {"uri": uri, "iteration": int(iteration)}
            self._checkpoint_version += 1
            self._cond.notify()

    def set_stall(self, reason: str, message: str | None) -> None:
        """Say what stalls the attempt (``reason`` one of ``kubetune.env.STALL_REASONS``, ``message`` why), or
        with None that it no longer does; the operator shows it on the Trial and the Experiment."""
        with self._cond:
            stall = None if message is None else {"reason": reason, "message": message[:MAX_STALL_MESSAGE]}
            if stall != self._stall:
                self._stall = stall
                self._stall_version += 1
                self._cond.notify()

    def set_explored(self, config: dict) -> None:
        """Report the config this attempt computed in its pod (a PBT exploit's user functions called, or the
        values drawn for ``sample_from`` functions): it rides on every batch until the collector answers one, so
        the operator journals it before any result."""
        with self._cond:
            self._explored = json.dumps(config, default=json_default, sort_keys=True)
            self._cond.notify()

    def set_display_name(self, name: str) -> None:
        """Report the display name this attempt's ``trial_name_creator`` gave: it rides on every batch until the
        collector answers one (the first batch, unless that one is lost), and the operator journals it."""
        with self._cond:
            self._display_name = name
            self._cond.notify()

    def take_decision(self) -> str | None:
        """Return the pending decision other than ``continue``, or None.

        ``stop`` and ``pause`` stay pending once received (the first one wins); ``checkpoint`` is
        returned once per request.
        """
        if self.fenced.is_set():
            return FENCED
        if self._final_decision is not None:
            return self._final_decision
        if self._checkpoint_requested:
            self._checkpoint_requested = False
            return "checkpoint"
        return None

    @property
    def pending(self) -> int:
        """Results waiting for delivery."""
        return len(self._buffer)

    def close(self, timeout_s: float) -> bool:
        """Send what is left, the last batch with ``done: true``; wait at most ``timeout_s`` seconds.

        Returns:
            Whether the final batch was acknowledged in time.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            while not self._done_sent:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    break
                self._cond.wait(left)
            if not self._done_sent:
                log.warning(
                    "collector did not acknowledge the final batch within %.0f s; %d results undelivered",
                    timeout_s,
                    len(self._buffer),
                )
            return self._done_sent

    # -- sender thread ---------------------------------------------------------------------------

    def _has_work(self) -> bool:
        return (
            bool(self._buffer)
            or self._checkpoint_version != self._checkpoint_sent
            or self._stall_version != self._stall_sent
            or self._explored is not None
            or self._display_name is not None
            or (self._closing and not self._done_sent)
        )

    def _run(self) -> None:
        down_since: float | None = None
        last_log = 0.0
        while True:
            with self._cond:
                while not self._has_work():
                    if self._closing and self._done_sent:
                        return
                    self._cond.wait()
                entries = list(islice(self._buffer, self._batch_limit))
                version = self._checkpoint_version
                checkpoint = self._checkpoint if version != self._checkpoint_sent else None
                stall_version, stall = self._stall_version, self._stall
                explored, display_name = self._explored, self._display_name
                final = self._closing and len(entries) == len(self._buffer)
            body, covered, sent = self._encode(entries, checkpoint, final, stall, explored, display_name)
            try:
                decision = self._post(body)
            except _TooLarge:
                if covered > 1:
                    self._batch_limit = max(1, covered // 2)
                    continue
                log.error("collector answered 413 to a single result; dropping it")
                decision, sent = "continue", 0
            except _Rejected as exc:
                log.error("collector rejected a batch of %d results (%s); dropping it", covered, exc)
                decision, sent = "continue", 0
            except _Fenced as exc:
                log.error("collector refused this attempt's token (%s): a newer attempt owns the trial; stopping", exc)
                with self._cond:
                    self.fenced.set()
                    self._buffer.clear()
                    self._done_sent = True
                    self._cond.notify_all()
                return
            except _Retry as exc:
                self._retry = self._retry.increment("POST", self._path, response=exc.response, error=exc.error)
                with self._cond:
                    self.unreachable = True
                    self._cond.notify_all()  # a result waiting for its answer goes on without it
                now = time.monotonic()
                down_since = down_since or now
                if now - last_log >= _LOG_EVERY_S:
                    last_log = now
                    log.warning(
                        "collector unreachable for %.0f s (%s); %d results buffered, %d dropped",
                        now - down_since,
                        exc,
                        len(self._buffer),
                        self.dropped,
                    )
                self._retry.sleep()
                continue
            if down_since is not None:
                log.info("collector reachable again after %.0f s", time.monotonic() - down_since)
            self._retry, down_since = self._fresh_retry, None
            self._batch_limit = min(self._max_batch, self._batch_limit * 2)
            with self._cond:
                last_seq = entries[covered - 1][0] if covered else 0
                while self._buffer and self._buffer[0][0] <= last_seq:
                    self._buffer.popleft()
                self.delivered += sent
                self.dropped += covered - sent
                if checkpoint is not None:
                    self._checkpoint_sent = version
                self._stall_sent = stall_version
                if explored is not None and self._explored == explored:
                    self._explored = None
                if display_name is not None and self._display_name == display_name:
                    self._display_name = None
                if final and covered == len(entries) and not self._buffer:
                    self._done_sent = True
                self._apply(decision)  # before the waiting step sees its result answered
                self._answered = max(self._answered, last_seq)
                self.unreachable = False
                self._cond.notify_all()

    def _encode(
        self,
        entries: list[tuple[int, dict]],
        checkpoint: dict | None,
        final: bool,
        stall: dict | None = None,
        explored: str | None = None,
        display_name: str | None = None,
    ) -> tuple[bytes, int, int]:
        """Return the batch body, how many ``entries`` it covers, and how many results it holds.

        Entries that do not fit under ``MAX_BATCH_BYTES`` are left for the next batch (then ``done``
        stays false); a result too large for any batch is covered but dropped.
        """
        head = (self._envelope + ',"results":[').encode()
        stalled = f',"stalled":{json.dumps(stall)}' if stall else ""
        stalled += f',"explored":{explored}' if explored is not None else ""
        stalled += f',"displayName":{json.dumps(display_name)}' if display_name is not None else ""
        budget = MAX_BATCH_BYTES - len(head) - 200 - len(json.dumps(checkpoint)) - len(stalled.encode())
        parts: list[bytes] = []
        covered = 0
        for _, result in entries:
            part = json.dumps({k: v for k, v in result.items() if k != "config"}, default=json_default).encode()
            if len(part) + 1 > budget:
                if parts:
                    break
                log.error(
                    "a result of %d bytes exceeds the collector's limit of %d bytes; dropping it",
                    len(part),
                    MAX_BATCH_BYTES,
                )
            else:
                parts.append(part)
                budget -= len(part) + 1
            covered += 1
        done = final and covered == len(entries)
        tail = f'],"checkpoint":{json.dumps(checkpoint)},"done":{"true" if done else "false"}{stalled}}}'.encode()
        return head + b",".join(parts) + tail, covered, len(parts)

    def _post(self, body: bytes) -> str:
        try:
            response = self._pool.urlopen(
                "POST", self._path, body=body, headers=self._headers, retries=False, redirect=False
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _Retry(f"{type(exc).__name__}: {exc}", error=exc) from exc
        data = response.data
        if response.status == 413:
            raise _TooLarge()
        if response.status == 400:
            raise _Rejected(data[:200].decode(errors="replace"))
        if response.status == 401:
            raise _Fenced(data[:200].decode(errors="replace"))
        if response.status != 200:
            raise _Retry(f"HTTP {response.status}", response=response)
        try:
            decision = json.loads(data).get("decision", "continue")
        except (ValueError, AttributeError):
            log.warning("collector reply is not JSON with a decision; continuing")
            return "continue"
        return decision

    def _apply(self, decision: str) -> None:
        if decision not in DECISIONS:
            log.warning("collector sent unknown decision %r; continuing", decision)
        elif decision in ("stop", "pause") and self._final_decision is None:
            log.info("collector decision: %s", decision)
            self._final_decision = decision
        elif decision == "checkpoint":
            log.info("collector decision: checkpoint")
            self._checkpoint_requested = True
