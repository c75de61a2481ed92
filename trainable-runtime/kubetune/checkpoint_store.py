"""The checkpoint commit protocol in object storage, and checkpoint retention.

A checkpoint of a trial is the directory ``<trial_dir>/checkpoint_<iteration:06d>/`` (Ray 1.x's
layout, docs/architecture.md "Object storage layout"). It **exists only once its commit marker**
(:data:`COMMIT_MARKER`) does: :func:`commit_checkpoint` uploads every file first and writes the
marker last, and :func:`delete_checkpoint` removes the marker first, so an upload cut by a crash, a
SIGKILL or a storage outage leaves a directory that every reader ignores. A second commit of an
iteration that already has a committed checkpoint goes to ``checkpoint_<iteration:06d>.<n>/`` and the
older one is removed only after it, so there is no instant with neither; for each iteration, readers
take the committed directory of the highest ``n``. The marker is JSON::

    {"format": 1, "committed_at": <unix seconds>, "files": {"<relative path>": <size in bytes>},
     "metadata": {...caller's metadata...}}

Which checkpoint an attempt restores (:func:`restore_candidates`: the trial's own lineage first, else its
``restoreFrom``, a PBT donor's checkpoint waited for while it may still come) is decided here too, for the
runtime's loop and for a container trial's checkpoint folder alike.

Callers: the in-pod runtime (``kubetune.runtime``) commits, restores and applies retention; the
operator and SDK read :func:`latest_committed` and :func:`read_commit`; ``kubetune.Trainable`` commits
when it has a ``remote_checkpoint_dir``; the SDK's analysis and the driver pod's callbacks get
:class:`StoredCheckpoint` handles on committed checkpoints.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from kubetune.checkpoint_layout import Checkpoint
from kubetune.storage import Storage, join_uri

log = logging.getLogger(__name__)

#: Longest wait for a ``restoreFrom`` checkpoint to be committed (a PBT donor commits it just after the
#: result that made it a donor), in seconds.
RESTORE_FROM_WAIT_S = 120.0
#: Name of the commit marker object inside a checkpoint directory.
COMMIT_MARKER = ".kubetune_commit.json"
_MARKER_FORMAT = 1
_CHECKPOINT_DIR = re.compile(r"checkpoint_(\d+)(?:\.(\d+))?")
_CHECKPOINT_IN_URI = re.compile(r"^(.*?/checkpoint_\d+(?:\.\d+)?)(?:/.*)?$")


class CheckpointRef(NamedTuple):
    """A checkpoint directory in storage: its URI, the iteration and the generation its name carries."""

    uri: str
    iteration: int
    generation: int = 0


def checkpoint_uri(trial_dir_uri: str, iteration: int) -> str:
    """``<trial_dir_uri>/checkpoint_<iteration:06d>`` (Ray 1.x's zero-padded name)."""
    return join_uri(trial_dir_uri, f"checkpoint_{iteration:06d}")


def parse_checkpoint_uri(uri: str) -> tuple[str, int] | None:
    """``(trial dir URI, iteration)`` of a checkpoint directory URI (any generation), or None if it is not one."""
    parent, _, name = join_uri(uri).rpartition("/")
    match = _CHECKPOINT_DIR.fullmatch(name)
    return (parent, int(match.group(1))) if match else None


def checkpoint_dir_of(uri: str) -> str:
    """The checkpoint directory holding ``uri`` (a file inside it, or the directory), else ``uri`` itself."""
    match = _CHECKPOINT_IN_URI.match(uri.rstrip("/"))
    return match.group(1) if match else uri.rstrip("/")


def marker_uri(uri: str) -> str:
    """URI of the commit marker of the checkpoint directory ``uri``."""
    return join_uri(uri, COMMIT_MARKER)


def commit_checkpoint(storage: Storage, local_dir: str | Path, uri: str, metadata: dict) -> str:
    """Upload the checkpoint directory ``local_dir`` to ``uri`` (or a newer generation of it) and commit it.

    Uncommitted directories of the same iteration (cut uploads of an earlier attempt) are removed
    first. If the iteration already has a committed checkpoint, the new one goes to the next
    generation (``checkpoint_000010.1``) and the older ones are deleted only once it is committed, so
    a kill at any instant leaves a committed checkpoint of the iteration. Then every file is uploaded,
    then the marker. A directory not named ``checkpoint_<n>`` is replaced in place (removed first).

    Args:
        storage: the trial's storage.
        local_dir: the local checkpoint directory (``checkpoint_<iteration:06d>/`` as ``save`` wrote it).
        uri: destination checkpoint directory, normally :func:`checkpoint_uri`.
        metadata: JSON-serialisable facts kept in the marker (the runtime stores ``iteration``,
            ``path`` relative to the directory, ``last_result``).

    Returns:
        The URI of the committed directory: ``uri``, or a newer generation of it.

    Raises:
        ValueError: ``local_dir`` holds a file named like the marker.
        NotADirectoryError: ``local_dir`` is not a directory.
        Exception: whatever ``storage`` raises once its retries give up; the checkpoint stays uncommitted.
    """
    if (Path(local_dir) / COMMIT_MARKER).exists():
        raise ValueError(f"{local_dir} holds a file named {COMMIT_MARKER}, which is kubetune's commit marker")
    uri = uri.rstrip("/")
    parent, name = uri.rsplit("/", 1)
    match = _CHECKPOINT_DIR.fullmatch(name)
    same = [(ref, ok) for ref, ok in _scan(storage, parent) if ref.iteration == int(match.group(1))] if match else []
    replaced = [ref for ref, ok in same if ok]
    if replaced:
        uri = join_uri(parent, f"checkpoint_{replaced[0].iteration:06d}.{max(r.generation for r in replaced) + 1}")
    for ref, ok in same:
        if not ok:
            delete_checkpoint(storage, ref.uri)
    if not match and storage.list(uri):
        delete_checkpoint(storage, uri)
    files = storage.upload_dir(local_dir, uri)
    marker = {
        "format": _MARKER_FORMAT,
        "committed_at": time.time(),
        "files": {rel: (Path(local_dir) / rel).stat().st_size for rel in files},
        "metadata": metadata,
    }
    storage.put_bytes(marker_uri(uri), json.dumps(marker, default=repr).encode())
    for ref in replaced:
        delete_checkpoint(storage, ref.uri)
    return uri


def read_commit(storage: Storage, uri: str) -> dict | None:
    """Return the commit marker of checkpoint ``uri`` (shape in the module docstring), or None if uncommitted."""
    try:
        return json.loads(storage.get_bytes(marker_uri(uri)))
    except FileNotFoundError:
        return None


def is_committed(storage: Storage, uri: str) -> bool:
    """Whether the checkpoint directory ``uri`` has its commit marker."""
    return storage.exists(marker_uri(uri))


def _scan(storage: Storage, trial_dir_uri: str) -> list[tuple[CheckpointRef, bool]]:
    """Every checkpoint directory directly under the trial dir, with whether it is committed; one listing."""
    base = join_uri(trial_dir_uri)
    committed: dict[str, bool] = {}
    refs: dict[str, CheckpointRef] = {}
    for uri in storage.list(base):
        parts = uri[len(base) + 1 :].split("/")
        match = _CHECKPOINT_DIR.fullmatch(parts[0])
        if len(parts) < 2 or not match:
            continue
        refs[parts[0]] = CheckpointRef(join_uri(base, parts[0]), int(match.group(1)), int(match.group(2) or 0))
        committed[parts[0]] = committed.get(parts[0], False) or parts[1:] == [COMMIT_MARKER]
    return [(refs[name], committed[name]) for name in sorted(refs, key=lambda n: refs[n][1:])]


def list_checkpoints(storage: Storage, trial_dir_uri: str) -> tuple[list[CheckpointRef], list[CheckpointRef]]:
    """Return ``(committed, others)`` checkpoint directories directly under the trial dir, oldest first.

    ``committed`` holds one directory per iteration: the committed one of the highest generation.
    ``others`` holds the rest: uncommitted directories (cut uploads) and committed ones a newer
    generation replaced (a kill came before their deletion). One recursive listing of the trial dir.
    """
    scanned = _scan(storage, trial_dir_uri)
    newest: dict[int, CheckpointRef] = {ref.iteration: ref for ref, ok in scanned if ok}
    committed = [newest[i] for i in sorted(newest)]
    others = [ref for ref, _ in scanned if newest.get(ref.iteration) != ref]
    return committed, others


def latest_committed(storage: Storage, trial_dir_uri: str) -> tuple[str, int] | None:
    """Return ``(uri, iteration)`` of the trial's newest committed checkpoint, or None if it has none.

    A checkpoint directory without its marker does not exist for this function.
    """
    committed, _ = list_checkpoints(storage, trial_dir_uri)
    return (committed[-1].uri, committed[-1].iteration) if committed else None


def _replacement(storage: Storage, uri: str) -> str:
    """The committed checkpoint that replaced ``uri`` (same iteration, newer generation), else ``uri``."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    match = _CHECKPOINT_DIR.fullmatch(name)
    if not match:
        return uri
    same = [ref for ref in list_checkpoints(storage, parent)[0] if ref.iteration == int(match.group(1))]
    return same[0].uri if same else uri


def restore_checkpoint(storage: Storage, uri: str, local_dir: str | Path) -> dict:
    """Download the committed checkpoint ``uri`` into ``local_dir`` and check it is complete.

    A ``uri`` whose commit a newer generation of the same iteration replaced gives that generation.

    Returns:
        The caller's ``metadata`` from the marker.

    Raises:
        FileNotFoundError: ``uri`` is not a committed checkpoint.
        ValueError: a file listed in the marker is missing or has another size locally.
    """
    marker = read_commit(storage, uri)
    if marker is None:
        uri = _replacement(storage, uri)
        marker = read_commit(storage, uri)
    if marker is None:
        raise FileNotFoundError(f"{uri} is not a committed checkpoint (no {COMMIT_MARKER})")
    storage.download_dir(uri, local_dir)
    (Path(local_dir) / COMMIT_MARKER).unlink(missing_ok=True)
    for rel, size in marker.get("files", {}).items():
        path = Path(local_dir) / rel
        if not path.is_file() or path.stat().st_size != size:
            raise ValueError(f"checkpoint {uri} is incomplete in storage: {rel} missing or not {size} bytes")
    return marker.get("metadata", {})


def delete_checkpoint(storage: Storage, uri: str) -> None:
    """Delete the checkpoint directory ``uri``: its marker first, so it is never half-committed."""
    storage.delete(marker_uri(uri))
    storage.delete_prefix(uri)


def _score(metadata: dict, score_attribute: str) -> float:
    """The checkpoint's score, higher is better; -inf when the attribute is absent or not a number."""
    from kubetune.resultkeys import flatten

    lower_is_better = score_attribute.startswith("min-")
    attribute = score_attribute[4:] if lower_is_better else score_attribute
    result = metadata.get("last_result") or {}
    value: Any = result[attribute] if attribute in result else flatten(result).get(attribute)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return -math.inf
    return -value if lower_is_better else value


def apply_retention(storage: Storage, trial_dir_uri: str, keep: int, score_attribute: str) -> list[str]:
    """Delete checkpoints beyond the ``keep`` best; return the deleted URIs.

    Ray's ``keep_checkpoints_num`` / ``checkpoint_score_attr`` (Ray 1.x ``CheckpointManager``): the
    ``keep`` best checkpoints by ``metadata["last_result"][score_attribute]`` stay (higher is better;
    a ``min-`` prefix means lower is better; ties go to the newer), and so does the newest, even when
    it is not among them. Checkpoints whose result lacks the attribute rank last. The other
    directories up to the newest committed iteration (cut uploads, replaced generations) are deleted
    too.

    Args:
        keep: how many best checkpoints to keep; 0 keeps every committed checkpoint.
        score_attribute: result key (flattened ``a/b`` keys allowed), optionally prefixed ``min-``.

    Raises:
        ValueError: ``keep`` is negative.
    """
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    committed, others = list_checkpoints(storage, trial_dir_uri)
    if not committed:
        return []
    newest = committed[-1]
    doomed = [ref for ref in others if ref.iteration <= newest.iteration]
    if keep and len(committed) > keep:
        ranked = []
        for ref in committed:
            marker = read_commit(storage, ref.uri)
            if marker is not None:  # a concurrent deletion may have taken it already
                ranked.append((_score(marker.get("metadata", {}), score_attribute), ref.iteration, ref))
        ranked.sort(key=lambda item: (item[0], item[1]), reverse=True)
        kept = {item[2] for item in ranked[:keep]} | {newest}
        doomed.extend(item[2] for item in ranked if item[2] not in kept)
    for ref in doomed:
        delete_checkpoint(storage, ref.uri)
    return [ref.uri for ref in doomed]


def restore_candidates(
    storage: Storage, trial_dir_uri: str, restore_from: str | None, wait_s: float = RESTORE_FROM_WAIT_S
) -> list[str]:
    """The checkpoints an attempt of the trial at ``trial_dir_uri`` may restore, best first: try each until one
    restores (a committed checkpoint whose files are missing or cut short in storage is skipped for the next).

    The trial's own committed checkpoints win, newest first: a retry or resume continues where the trial got to,
    and ``restore_from`` only seeds the lineage. With ``restore_from`` set (a PBT exploit, or ``spec.restoreFrom``),
    only own checkpoints taken since that restore count (their commit metadata records it as ``restored_from``):
    those from before belong to a lineage the trial left. Without any, the one candidate is ``restore_from``'s
    checkpoint as :func:`nearest_checkpoint` finds it. Empty: start at iteration 0.

    Args:
        storage: the trial's storage.
        trial_dir_uri: the trial's folder.
        restore_from: a checkpoint URI (or a file in one) that seeds the lineage, or None.
        wait_s: how long a ``restore_from`` not committed yet is waited for, in seconds.
    """
    committed, _ = list_checkpoints(storage, trial_dir_uri)
    own = [ref.uri for ref in reversed(committed)]
    if restore_from:
        own = [
            uri
            for uri in own
            if ((read_commit(storage, uri) or {}).get("metadata") or {}).get("restored_from") == restore_from
        ]
    if own or not restore_from:
        return own
    return [nearest_checkpoint(storage, checkpoint_dir_of(restore_from), wait_s)]


def nearest_checkpoint(storage: Storage, uri: str, wait_s: float = RESTORE_FROM_WAIT_S) -> str:
    """The checkpoint to restore for ``restoreFrom`` ``uri``: ``uri`` once committed; while it is not, and its
    trial has committed nothing later (it may still commit it), wait up to ``wait_s`` seconds. Otherwise the
    nearest committed checkpoint of that trial: the newest at or below its iteration, else the oldest above (a
    donor whose ``checkpoint`` answer came late checkpointed a later iteration). ``uri`` itself when there is
    none (its restore then fails with the reason)."""
    parsed = parse_checkpoint_uri(uri)
    deadline = time.monotonic() + wait_s
    while True:
        if is_committed(storage, uri):
            return uri
        committed = list_checkpoints(storage, parsed[0])[0] if parsed else []
        if not parsed or any(ref.iteration > parsed[1] for ref in committed) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    below = [ref for ref in committed if ref.iteration <= parsed[1]] if parsed else []
    above = [ref for ref in committed if ref.iteration > parsed[1]] if parsed else []
    nearest = below[-1] if below else above[0] if above else None
    if nearest is None:
        return uri
    log.warning("%s is not committed; restoring %s, the nearest checkpoint of that trial", uri, nearest.uri)
    return nearest.uri


class StoredCheckpoint(Checkpoint):
    """A committed checkpoint in storage, downloaded to a new temporary directory when ``path`` is first read.

    ``to_directory``, ``as_directory`` and ``path`` behave as :class:`kubetune.Checkpoint`'s (they read
    ``path``), so nothing is downloaded for checkpoints that are only listed.

    Attributes:
        uri: the checkpoint directory in storage (``.../checkpoint_000010`` or a newer generation).
    """

    def __init__(self, storage: Storage, uri: str):  # noqa: D107 - no call to Checkpoint.__init__: path is lazy
        self.uri = uri
        self._storage = storage
        self._path: str | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """The local directory holding the checkpoint's files (downloaded on first access).

        Raises:
            FileNotFoundError: the checkpoint is no longer committed (retention deleted it).
            ValueError: a file the commit lists is missing in storage.
        """
        with self._lock:
            if self._path is None:
                local = tempfile.mkdtemp(prefix="checkpoint_")
                try:
                    restore_checkpoint(self._storage, self.uri, local)
                except BaseException:
                    shutil.rmtree(local, ignore_errors=True)
                    raise
                self._path = local
            return self._path

    def __repr__(self) -> str:
        return f"StoredCheckpoint(uri={self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredCheckpoint) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)
