"""The Experiment's decision journal: where its searcher's and scheduler's state lives.

Owns :class:`Journal`, the write-ahead log of every call that changes what an
Experiment's searcher or scheduler knows, kept in ConfigMaps owned by the
Experiment (``docs/architecture.md``, "Where state lives"). The controller
(:mod:`kubetune_operator.controller`) records entries as it decides; the
operator commits them with :func:`commit` before any decision leaves it (the
collector's answer to a trial, the Trials and pods a reconcile pass creates);
a restarted operator rebuilds the exact state with :func:`load` (the newest
snapshot, then every entry after it, replayed in order). Pure apart from
asyncio: the ConfigMap calls are the ``write`` function handed in
(``kubetune_operator.kube``).

Layout, per Experiment (``<base>`` is :func:`kubetune_operator.labels.label_value` of its name, a
dash and the first 8 characters of its uid; every ConfigMap is labelled with the Experiment and
``kubetune.io/state``, and owned by the Experiment, so the garbage collector removes it with it):

- ``<base>-journal-<first seq>``: entries; each data key ``<seq:012d>`` holds one
  committed batch (a JSON list of entries numbered from that seq). A ConfigMap
  takes batches until it holds :data:`SEGMENT_BYTES`; then a new one starts. A commit's entries are
  cut into batches of at most :data:`SEGMENT_BYTES` (one entry alone may be larger), so no write ever
  carries a ConfigMap past the API server's 1 MiB, however many entries a commit gathers.
- ``<base>-snapshot-<seq>-<k>``: chunk ``k`` of a snapshot of the state after
  entries ``0 .. seq-1``; written only once those entries are committed, so any
  snapshot whose chunks are all present can be used. Entries and snapshots it
  covers are deleted once it is complete, but for entries an Experiment's driver pod has not saved yet
  (:meth:`Journal.keep_for_driver`: the pod reads them through the collector, ``kubetune_operator.driver``).

An entry is stored as a JSON list, its kind first (``["results", trial, attempt, [result, ...]]``); in memory
it is one of the typed records of :data:`Entry` (:func:`entry_from_json`, :meth:`as_json` at the boundary).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Iterator, NamedTuple, Union

from .labels import LABEL_EXPERIMENT, LABEL_MANAGED_BY, MANAGED_BY, label_value

__all__ = [
    "Add",
    "CheckpointAsked",
    "Checkpointed",
    "Choose",
    "End",
    "Entry",
    "Explored",
    "Journal",
    "JournalCorrupt",
    "LABEL_STATE",
    "MetricMissing",
    "Named",
    "Results",
    "Sampled",
    "Suggest",
    "Suggested",
    "Write",
    "commit",
    "entry_from_json",
    "load",
]

#: Label on the journal's ConfigMaps: ``journal`` or ``snapshot``.
LABEL_STATE = "kubetune.io/state"
#: Annotations on snapshot chunks: the snapshot's seq, the chunk's index and the chunk count.
ANNOTATION_SNAPSHOT = "kubetune.io/snapshot"
ANNOTATION_CHUNK = "kubetune.io/chunk"
ANNOTATION_CHUNKS = "kubetune.io/chunks"
#: Bytes of entries after which a journal ConfigMap takes no more batches (ConfigMaps hold at most 1 MiB).
SEGMENT_BYTES = 512 * 1024
#: Bytes of snapshot text per chunk ConfigMap.
CHUNK_BYTES = 768 * 1024
#: A snapshot is taken once the entries since the last one exceed this many bytes and the last
#: snapshot's size (so snapshots cost O(1) amortised per entry byte, and replay stays short).
MIN_SNAPSHOT_INTERVAL_BYTES = 256 * 1024
#: Longest the encoding of a snapshot holds the event loop at a time (seconds).
STEP_SECONDS = 0.005
#: How long the encoding then leaves the loop to other tasks (seconds).
STEP_PAUSE_SECONDS = 0.001


class JournalCorrupt(RuntimeError):
    """The stored journal has a gap after its newest snapshot (an entry was lost): the state cannot be rebuilt."""


class Add(NamedTuple):
    """A Trial was created: the scheduler's ``on_trial_add`` (and ``set_trial_config``)."""

    trial: str
    kind = "add"

    def as_json(self) -> list:
        """The stored form: ``[kind, *fields]``."""
        return [self.kind, *self]


class Suggest(NamedTuple):
    """The searcher was asked for the config of the new trial ``trial``."""

    trial: str
    kind = "suggest"
    as_json = Add.as_json


class Suggested(NamedTuple):
    """The driver pod's searcher (``spec.searchAlgorithm.name: driver``) answered ``suggestion`` for the new trial
    ``trial``: a config, or ``"FINISHED"``."""

    trial: str
    suggestion: dict | str
    kind = "suggested"
    as_json = Add.as_json


class Results(NamedTuple):
    """A batch of new results of ``trial``'s ``attempt`` went to the stoppers, scheduler and searcher."""

    trial: str
    attempt: int
    results: list[dict]
    kind = "results"
    as_json = Add.as_json


class End(NamedTuple):
    """``trial`` ended ``how`` (``complete``, ``remove`` or ``error``) with its last ``result``."""

    trial: str
    result: dict | None
    how: str
    kind = "end"
    as_json = Add.as_json


class Choose(NamedTuple):
    """The scheduler chose among the ``paused`` trials for a free slot (``search_finished`` as it was then)."""

    paused: list[str]
    search_finished: bool
    kind = "choose"
    as_json = Add.as_json


class Explored(NamedTuple):
    """The outcome of ``trial``'s exploration: PB2's explore step, or the config its pod chose (``{"config",
    "attempt"}``; without ``attempt`` in an entry an earlier operator wrote)."""

    trial: str
    outcome: dict
    kind = "explored"
    as_json = Add.as_json


class Sampled(NamedTuple):
    """The values ``trial``'s pod of ``attempt`` drew for its config's ``sample_from`` functions: ``config``."""

    trial: str
    config: dict
    attempt: int
    kind = "sampled"
    as_json = Add.as_json


class Named(NamedTuple):
    """The display name ``trial``'s pod got from the experiment's ``trial_name_creator``: ``name``."""

    trial: str
    name: str
    kind = "named"
    as_json = Add.as_json


class Checkpointed(NamedTuple):
    """``trial``'s ``attempt`` committed the checkpoint ``uri`` at ``iteration`` (journaled for the driver pod only:
    its callbacks' ``on_checkpoint``; the searcher and scheduler are not told)."""

    trial: str
    attempt: int
    uri: str
    iteration: int | None
    kind = "checkpoint"
    as_json = Add.as_json


class CheckpointAsked(NamedTuple):
    """A callback in the driver pod set ``should_checkpoint`` on ``trial``'s result at ``iteration`` of ``attempt``
    (Ray's ``result[SHOULD_CHECKPOINT] = True``): the attempt's next batch is answered ``checkpoint``."""

    trial: str
    attempt: int
    iteration: int
    kind = "checkpoint_asked"
    as_json = Add.as_json


class MetricMissing(NamedTuple):
    """A result lacked the experiment's metric: ``message`` says which (the Experiment fails)."""

    message: str
    kind = "metric_missing"
    as_json = Add.as_json


_ENTRY_TYPES = (
    Add,
    Suggest,
    Suggested,
    Results,
    End,
    Choose,
    Explored,
    Sampled,
    Named,
    Checkpointed,
    CheckpointAsked,
    MetricMissing,
)
#: One journal entry, as the controller records and replays it.
Entry = Union[_ENTRY_TYPES]
_KINDS: dict[str, type] = {t.kind: t for t in _ENTRY_TYPES}


def entry_from_json(stored: list) -> Entry:
    """The typed record of a stored entry.

    Raises:
        JournalCorrupt: an unknown kind.
    """
    kind = _KINDS.get(stored[0])
    if kind is None:
        raise JournalCorrupt(f"unknown journal entry {stored[0]!r}")
    return kind(*stored[1 : 1 + len(kind._fields)])


@dataclass
class Write:
    """The ConfigMap calls of one commit, carried out in this order; creates and patches must succeed.

    Attributes:
        creates: ConfigMap manifests to create; one that exists already (a retried create the API
            server had carried out) gets the manifest's ``data`` merged in instead.
        patches: ``(name, data)`` to merge into an existing ConfigMap's ``data``.
        deletes: ConfigMap names to delete afterwards; failures are logged, not raised (they only
            leave garbage that the next snapshot deletes again, and :func:`load` ignores).
    """

    creates: list[dict] = field(default_factory=list)
    patches: list[tuple[str, dict]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


def _dumps(value: Any) -> str:
    # NaN and infinities are legitimate metric values; a ConfigMap value is a string, so JSON's
    # NaN/Infinity extension round-trips through it untouched.
    return json.dumps(value, separators=(",", ":"))


def _batches(first: int, entries: list[list]) -> Iterator[tuple[int, int, str]]:
    """``entries`` (numbered from ``first``) as ``(first seq, count, JSON list)`` batches of at most
    :data:`SEGMENT_BYTES` each, in order (an entry larger than that is a batch alone)."""
    texts = [_dumps(entry) for entry in entries]
    start, size = 0, 2
    for i, text in enumerate(texts):
        if i > start and size + 1 + len(text) > SEGMENT_BYTES:
            yield first + start, i - start, "[" + ",".join(texts[start:i]) + "]"
            start, size = i, 2
        size += len(text) + (i > start)
    yield first + start, len(texts) - start, "[" + ",".join(texts[start:]) + "]"


async def _dumps_in_steps(value: Any, clock: list[float]) -> str:
    """:func:`_dumps` of ``value``, letting the event loop run every :data:`STEP_SECONDS` of encoding
    (between the items of objects); ``clock`` holds when the current step began."""
    if isinstance(value, dict) and value:
        parts = []
        for key, item in value.items():
            parts.append(f"{_dumps(str(key))}:{await _dumps_in_steps(item, clock)}")
        return "{" + ",".join(parts) + "}"
    text = _dumps(value)
    if time.monotonic() - clock[0] > STEP_SECONDS:
        # A timer, not sleep(0): after sleep(0) this task is ready again ahead of the next step of every
        # other task, so a collector request would wait one whole step at each of its awaits.
        await asyncio.sleep(STEP_PAUSE_SECONDS)
        clock[0] = time.monotonic()
    return text


class Journal:
    """The in-memory side of one Experiment's journal.

    Args:
        namespace, experiment, uid: the Experiment's; ConfigMaps are named after it and owned by ``uid``.
        enabled: False when neither the searcher nor the scheduler keeps state: nothing is recorded.

    Attributes:
        kinds: when set, only entries of these kinds are recorded (an Experiment whose searcher and scheduler
            keep no state journals only what its trial pods computed).
        next_seq: number of the next entry recorded.
        durable_seq: every entry below it is committed.
        snapshot_due: take a snapshot at the next commit (set after a spec change rebuilt the searcher).
        feed: with a driver pod (:meth:`keep_for_driver`), the committed entries from ``feed_start`` on, which the
            driver has not said it saved: kept in memory and in their ConfigMaps (no snapshot deletes them) until
            :meth:`delivered`; None without a driver.
    """

    def __init__(self, namespace: str, experiment: str, uid: str, enabled: bool = True):
        # The uid in the names keeps a re-created Experiment of the same name off the old one's ConfigMaps.
        self.namespace, self.uid, self.enabled = namespace, uid, enabled
        self.kinds: frozenset[str] | None = None
        self.label, self.base = label_value(experiment), f"{label_value(experiment)}-{uid[:8]}"
        self.experiment = experiment
        self.next_seq = self.durable_seq = 0
        self.pending: list[list] = []
        self.segment: str | None = None  # the journal ConfigMap that takes the next batch
        self.segment_bytes = 0
        self.segments: dict[str, int] = {}  # journal ConfigMap -> its last seq
        self.snapshots: dict[int, list[str]] = {}  # snapshot seq -> chunk names (incomplete ones too)
        self.bytes_since_snapshot = 0
        self.last_snapshot_bytes = 0
        self.snapshot_due = False
        self.snapshotting = False  # a snapshot is being encoded and written (outside the lock)
        self.lock = asyncio.Lock()
        self.feed: list[list] | None = None
        self.feed_start = 0
        self._feed_waiters: list[asyncio.Future] = []

    def keep_for_driver(self) -> None:
        """Keep every entry committed from now on for the Experiment's driver pod (``spec.driver``), until it has
        them (:meth:`delivered`); :func:`load` then keeps what is stored."""
        if self.feed is None:
            self.feed, self.feed_start = [], self.durable_seq

    def delivered(self, after: int) -> None:
        """The driver has saved every entry up to ``after``: they need not be kept for it any more."""
        if self.feed is not None and after + 1 > self.feed_start:
            count = min(after + 1 - self.feed_start, len(self.feed))
            del self.feed[:count]
            self.feed_start += count

    async def wait_for_feed(self, after: int, timeout_s: float) -> None:
        """Return once an entry after ``after`` is committed for the driver, or after ``timeout_s`` seconds (the
        driver's long poll: its request waits here instead of the driver asking again and again)."""
        if self.feed is None or self.durable_seq - 1 > after or timeout_s <= 0:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._feed_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            if waiter in self._feed_waiters:
                self._feed_waiters.remove(waiter)

    def wake_feed_waiters(self) -> None:
        """Answer the driver's waiting requests now (:meth:`wait_for_feed`): something it is served beside the
        entries changed (the trial the operator asks its searcher a config for), or an entry was committed."""
        waiters, self._feed_waiters = self._feed_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def feed_after(self, after: int, limit: int) -> list[tuple[int, list]]:
        """``(seq, entry)`` of up to ``limit`` committed entries after ``after``, for the driver.

        Raises:
            LookupError: no driver is kept for, or entries after ``after`` were forgotten already.
        """
        if self.feed is None or after + 1 < self.feed_start:
            kept = f"kept from {self.feed_start}" if self.feed is not None else "none kept: no spec.driver"
            raise LookupError(f"journal entries from {after + 1} are not kept ({kept})")
        first = after + 1 - self.feed_start
        return [(self.feed_start + i, self.feed[i]) for i in range(first, min(len(self.feed), first + limit))]

    def record(self, entry: list) -> None:
        """Append ``entry`` (a JSON-able list) to the entries to commit; a no-op when not enabled or not of
        :attr:`kinds`."""
        if self.enabled and (self.kinds is None or entry[0] in self.kinds):
            self.pending.append(entry)
            self.next_seq += 1

    @property
    def clean(self) -> bool:
        """Every recorded entry is committed."""
        return self.durable_seq == self.next_seq

    def _manifest(self, name: str, kind: str, data: dict, annotations: dict | None = None) -> dict:
        meta = {
            "name": name,
            "namespace": self.namespace,
            "labels": {LABEL_EXPERIMENT: self.label, LABEL_MANAGED_BY: MANAGED_BY, LABEL_STATE: kind},
            "ownerReferences": [
                {
                    "apiVersion": "kubetune.io/v1alpha1",
                    "kind": "Experiment",
                    "name": self.experiment,
                    "uid": self.uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        }
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    def _batch_write(self, first: int, text: str, segment: tuple[str | None, int], write: Write) -> tuple[str, int]:
        """Add the batch ``text`` (entries from ``first``) to ``write``: into ``segment`` (``(name, bytes)``)
        when it fits, else into a new one; return the segment that took it, with its bytes."""
        key, (name, size) = f"{first:012d}", segment
        if name is not None and size + len(text) <= SEGMENT_BYTES:
            created = next((m for m in write.creates if m["metadata"]["name"] == name), None)
            if created is not None:  # a segment this write creates: one create with all its batches
                created["data"][key] = text
            else:
                write.patches.append((name, {key: text}))
            return name, size + len(text)
        name = f"{self.base}-journal-{first}"
        write.creates.append(self._manifest(name, "journal", {key: text}))
        return name, len(text)

    async def _snapshot_write(self, seq: int, state: dict) -> tuple[Write, list[str], int]:
        text = await _dumps_in_steps(state, [time.monotonic()])
        chunks = [text[i : i + CHUNK_BYTES] for i in range(0, len(text), CHUNK_BYTES)] or [""]
        names = [f"{self.base}-snapshot-{seq}-{k}" for k in range(len(chunks))]
        write = Write(
            creates=[
                self._manifest(
                    name,
                    "snapshot",
                    {"state": chunk},
                    {ANNOTATION_SNAPSHOT: str(seq), ANNOTATION_CHUNK: str(k), ANNOTATION_CHUNKS: str(len(chunks))},
                )
                for k, (name, chunk) in enumerate(zip(names, chunks))
            ]
        )
        return write, names, len(text)

    def _covered(self, seq: int) -> list[str]:
        """Names of ConfigMaps a complete snapshot at ``seq`` makes unnecessary."""
        old = [n for s, names in self.snapshots.items() if s != seq for n in names]
        keep = seq if self.feed is None else min(seq, self.feed_start)  # the driver's entries stay
        return old + [n for n, last in self.segments.items() if last < keep]

    async def _commit_locked(
        self, write: Callable[[Write], Awaitable[None]], snapshot: Callable[[], dict]
    ) -> tuple[int, dict] | None:
        """Write the pending entries; when a snapshot is due, take its state and return ``(seq, state)`` for
        :meth:`_write_snapshot`, which runs without the lock."""
        first, entries = self.durable_seq, list(self.pending)
        if entries:
            batch, segment, lasts, size = Write(), (self.segment, self.segment_bytes), {}, 0
            for start, count, text in _batches(first, entries):
                segment = self._batch_write(start, text, segment, batch)
                lasts[segment[0]] = start + count - 1
                size += len(text)
            await write(batch)
            self.pending = self.pending[len(entries) :]
            self.durable_seq = first + len(entries)
            self.segment, self.segment_bytes = segment
            self.segments.update(lasts)
            self.bytes_since_snapshot += size
            if self.feed is not None:
                self.feed.extend(entries)
                self.wake_feed_waiters()
        due = self.snapshot_due or self.bytes_since_snapshot >= max(
            MIN_SNAPSHOT_INTERVAL_BYTES, self.last_snapshot_bytes
        )
        if not (due and self.clean) or self.snapshotting:
            return None
        seq, self.snapshotting = self.durable_seq, True
        # entries from seq on go to a new segment, which the snapshot does not cover
        self.segment, self.segment_bytes = None, 0
        self.bytes_since_snapshot, self.snapshot_due = 0, False
        return seq, {"seq": seq, **snapshot()}

    async def _write_snapshot(self, write: Callable[[Write], Awaitable[None]], seq: int, state: dict) -> None:
        """Encode and write the snapshot of the state after entries ``0 .. seq-1``, then delete what it covers.
        Other commits go on meanwhile (into segments it does not cover); a failure leaves the snapshot due."""
        try:
            chunks, names, size = await self._snapshot_write(seq, state)
            self.snapshots[seq] = names
            await write(chunks)
            covered = self._covered(seq)
            await write(Write(deletes=covered))
            for name in covered:
                self.segments.pop(name, None)
            self.snapshots = {seq: names}
            self.last_snapshot_bytes = size
        except BaseException:
            self.snapshot_due = True
            raise
        finally:
            self.snapshotting = False


async def commit(journal: Journal, write: Callable[[Write], Awaitable[None]], snapshot: Callable[[], dict]) -> None:
    """Make every entry recorded so far durable (group commit: one write carries all pending entries).

    Waits for a commit already in flight, then writes what is still pending; takes a snapshot
    (``snapshot()``: the state after every recorded entry, a JSON-able dict) when one is due, no entry
    is pending and no other snapshot is being written. The snapshot is encoded and written after the
    lock is released: later commits write their entries meanwhile instead of waiting for it.

    Args:
        journal: the Experiment's journal.
        write: carries out a :class:`Write` against the API server; raises when a create or patch fails.
        snapshot: returns the state to snapshot.

    Raises:
        Exception: whatever ``write`` raised; the entries stay pending for the next commit.
    """
    if not journal.enabled:
        return
    target = journal.next_seq
    async with journal.lock:
        if journal.durable_seq >= target and not journal.snapshot_due:
            return  # a commit that finished while this one waited carried these entries
        due = await journal._commit_locked(write, snapshot)
    if due is not None:  # encoded and written outside the lock: commits behind this one need not wait for it
        await journal._write_snapshot(write, *due)


def load(journal: Journal, configmaps: Iterable[dict]) -> tuple[dict | None, list[list]]:
    """Read the stored journal of ``journal``'s Experiment: its newest complete snapshot and the entries after it.

    ConfigMaps not owned by the Experiment's uid (an earlier Experiment of the same name) are ignored.
    Positions ``journal`` after the last stored entry; for a journal that keeps entries for a driver pod
    (:meth:`Journal.keep_for_driver`), ``feed`` holds every stored entry, the snapshot's covered ones too, back to
    the first gap.

    Args:
        journal: a new journal for the Experiment.
        configmaps: the ConfigMaps labelled with the Experiment (dicts as the API returns them).

    Returns:
        ``(snapshot or None, entries to replay after it, in order)``.

    Raises:
        JournalCorrupt: an entry after the snapshot is missing.
    """
    entries: dict[int, list] = {}
    chunks: dict[int, dict[int, str]] = {}
    counts: dict[int, int] = {}
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        if not any(ref.get("uid") == journal.uid for ref in meta.get("ownerReferences") or ()):
            continue
        kind, data = (meta.get("labels") or {}).get(LABEL_STATE), cm.get("data") or {}
        if kind == "journal":
            last = -1
            for key, text in data.items():
                for offset, entry in enumerate(json.loads(text)):
                    entries[int(key) + offset] = entry
                    last = max(last, int(key) + offset)
            journal.segments[meta["name"]] = last
        elif kind == "snapshot":
            notes = meta.get("annotations") or {}
            seq = int(notes[ANNOTATION_SNAPSHOT])
            chunks.setdefault(seq, {})[int(notes[ANNOTATION_CHUNK])] = data.get("state", "")
            counts[seq] = int(notes[ANNOTATION_CHUNKS])
            journal.snapshots.setdefault(seq, []).append(meta["name"])
    complete = [seq for seq, parts in chunks.items() if len(parts) == counts[seq]]
    snapshot, start = None, 0
    if complete:
        start = max(complete)
        text = "".join(chunks[start][k] for k in range(counts[start]))
        snapshot = json.loads(text)
        journal.last_snapshot_bytes = len(text)
    after = sorted(seq for seq in entries if seq >= start)
    if after and after != list(range(start, start + len(after))):
        missing = next(s for s in range(start, after[-1]) if s not in entries)
        raise JournalCorrupt(f"journal entry {missing} is missing (entries from {start} to {after[-1]} stored)")
    replay = [entries[seq] for seq in after]
    journal.next_seq = journal.durable_seq = start + len(after)
    if journal.feed is not None:  # the driver's: every stored entry of the unbroken run that ends the journal
        first = journal.durable_seq
        while first - 1 in entries:
            first -= 1
        journal.feed, journal.feed_start = [entries[seq] for seq in range(first, journal.durable_seq)], first
    journal.bytes_since_snapshot = len(_dumps(replay))  # what the next snapshot will spare a restart
    return snapshot, replay
