"""The checkpoint folder of a container trial: restored from storage before the trial's container starts, saved to
storage when the container asks for it and when the container ends (docs/api.md, "Checkpoints of a container trial").

The trial's container only reads and writes a folder (``spec.checkpoint.path``, named by
:data:`kubetune.env.CHECKPOINT_DIR` in its environment); kubetune's programs, in kubetune's runtime image beside it in
the pod, do the rest with the checkpoint protocol of :mod:`kubetune.checkpoint_store`:

* **Restore** (:func:`restore`): ``python -m kubetune.runtime.checkpoint_folder``, an init container that runs to its
  end before the trial's container starts. It picks the checkpoint as a runtime trial's loop does
  (:func:`kubetune.checkpoint_store.restore_candidates`: the trial's own newest, else a PBT donor's), fills the folder
  with its files, and writes ``{"uri", "iteration"}`` as its termination message (the operator numbers a ``StdOut``
  trial's results from that iteration) and to :data:`RESTORED_FILE` in the state folder, which only kubetune's
  containers mount (the metrics sidecar numbers its results from it).
* **Save** (:class:`CheckpointFolder`, driven by :mod:`kubetune.runtime.sidecar`): the container asks for a checkpoint
  by creating the file :data:`SAVE_MARKER` in the folder once its files are written, holding the iteration they are at
  (``3``), or nothing when the metrics sidecar reads its results (then the checkpoint is at the latest result read).
  The folder, marker left out, is copied to the state folder, committed as ``checkpoint_<iteration>`` of the trial,
  reported to the operator, and only then the marker is deleted: a container that waits for it to go knows its
  checkpoint is safe. A marker still there when the container ends is saved then; with ``atEnd`` a folder changed
  since the last save is saved at the latest result the sidecar read (not for ``StdOut``, whose results the sidecar
  does not see).

Configured by :data:`kubetune.env.CHECKPOINT_FOLDER` (JSON, written by the operator's pod builder) and the storage
variables of :mod:`kubetune.env`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from kubetune.checkpoint_store import apply_retention, checkpoint_uri, commit_checkpoint, restore_candidates
from kubetune.checkpoint_store import restore_checkpoint as download_checkpoint
from kubetune.env import (
    ATTEMPT,
    CHECKPOINT_FOLDER,
    STORAGE_ENDPOINT,
    STORAGE_REGION,
    TERMINATION_MESSAGE_PATH,
    TERMINATION_MESSAGE_PATH_VAR,
)
from kubetune.storage import Storage, join_uri, open_storage

log = logging.getLogger("kubetune.checkpoint_folder")

#: The file the trial's container creates in its checkpoint folder to ask for a checkpoint.
SAVE_MARKER = ".kubetune-save"
#: What the restore wrote (``{"uri", "iteration"}``), in the state folder.
RESTORED_FILE = "restored.json"


@dataclass(frozen=True)
class FolderSpec:
    """:data:`kubetune.env.CHECKPOINT_FOLDER`, as the operator writes it (camelCase keys)."""

    path: str
    """The checkpoint folder, as the trial's container and kubetune's containers mount it."""
    trial_dir: str
    """The trial's folder in storage."""
    state: str
    """A folder only kubetune's containers mount: the restore's record and the copy being saved."""
    restore_from: str | None = None
    """The checkpoint that seeds the trial's lineage (a PBT exploit's donor, ``spec.restoreFrom``)."""
    at_end: bool = True
    keep: int = 0
    score_attribute: str = "training_iteration"

    @classmethod
    def from_json(cls, text: str) -> FolderSpec:
        """Raises: ValueError, KeyError: not the operator's JSON."""
        data = json.loads(text)
        return cls(
            path=data["path"],
            trial_dir=data["trialDir"],
            state=data["state"],
            restore_from=data.get("restoreFrom"),
            at_end=bool(data.get("atEnd", True)),
            keep=int(data.get("keep") or 0),
            score_attribute=data.get("scoreAttribute") or "training_iteration",
        )


def _empty(folder: Path) -> None:
    """Remove what ``folder`` holds (not the folder: it is a volume's mount point)."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def restore(storage: Storage, spec: FolderSpec) -> dict:
    """Fill ``spec.path`` with the trial's checkpoint: the first of
    :func:`kubetune.checkpoint_store.restore_candidates` that restores (one whose files are missing in storage is
    skipped, with a warning, for the next).

    Returns:
        ``{"uri": str | None, "iteration": int}``: what was restored; ``{"uri": None, "iteration": 0}`` without a
        checkpoint (the folder is left empty).

    Raises:
        Exception: no candidate could be restored (the first one's error).
    """
    folder = Path(spec.path)
    first_error = None
    for uri in restore_candidates(storage, spec.trial_dir, spec.restore_from):
        _empty(folder)
        try:
            metadata = download_checkpoint(storage, uri, folder)
            return {"uri": uri, "iteration": int(metadata.get("iteration") or 0)}
        except Exception as exc:  # noqa: BLE001 - the next newest checkpoint is tried
            first_error = first_error or exc
            log.warning("cannot restore %s (%s: %s); trying the next newest checkpoint", uri, type(exc).__name__, exc)
    if first_error is not None:
        raise first_error
    return {"uri": None, "iteration": 0}


def read_restored(spec: FolderSpec) -> dict:
    """What the restore recorded in the state folder (``{"uri": None, "iteration": 0}`` when it found nothing)."""
    try:
        return json.loads((Path(spec.state) / RESTORED_FILE).read_text())
    except FileNotFoundError:
        return {"uri": None, "iteration": 0}


class CheckpointFolder:
    """Saves the checkpoint folder when the container asks and at its end.

    Args:
        storage: the trial's storage.
        spec: the folder's :class:`FolderSpec`.
        attempt: the attempt (kept in each checkpoint's metadata).
        restored: what the restore recorded (:func:`read_restored`).
        announce: ``announce(uri, iteration)`` for each committed checkpoint (the sidecar's reporter).
    """

    def __init__(
        self,
        storage: Storage,
        spec: FolderSpec,
        attempt: int,
        restored: Mapping,
        announce: Callable[[str, int], object],
    ):
        self.storage, self.spec, self.attempt, self.announce = storage, spec, attempt, announce
        own = restored.get("uri") and str(restored["uri"]).startswith(join_uri(spec.trial_dir) + "/")
        self.committed = int(restored.get("iteration") or 0) if own else 0
        """The iteration of the trial's checkpoint the folder holds now (restored or saved); 0: none of its own."""
        self.saved_at: float | None = None  # the folder's newest modification time when it was last saved

    @property
    def marker(self) -> Path:
        return Path(self.spec.path) / SAVE_MARKER

    def poll(self, iteration: int | None, last_result: Mapping | None) -> str | None:
        """Save the folder if the container asked for it; return the committed checkpoint's URI, or None.

        Args:
            iteration: the latest result's ``training_iteration`` the sidecar read, or None when it reads none.
            last_result: that result (kept in the checkpoint's metadata, for ``checkpoint.keep``'s ranking).
        """
        if not self.marker.exists():
            return None
        try:
            text = self.marker.read_text().strip()
        except FileNotFoundError:
            return None
        if text:
            try:
                iteration, last_result = int(text), None
            except ValueError:
                iteration = None
        if iteration is None or iteration < 1:
            log.warning(
                "%s holds %r: it must hold the iteration the checkpoint is at (a whole number >= 1)%s; not saved",
                SAVE_MARKER,
                text,
                "" if text else " when the sidecar reads no results (StdOut)",
            )
            self.marker.unlink(missing_ok=True)
            return None
        uri = self._save(iteration, last_result, f"asked for at iteration {iteration}")
        self.marker.unlink(missing_ok=True)  # after the commit: a container may wait for the marker to go
        return uri

    def finish(self, iteration: int | None, last_result: Mapping | None) -> str | None:
        """The container ended: save what it asked for last, else, with ``atEnd``, a folder changed since its last
        save at the latest result's ``iteration`` (None: the sidecar reads no results, nothing is saved)."""
        asked = self.poll(iteration, last_result)
        if asked is not None or not self.spec.at_end or iteration is None or iteration <= self.committed:
            return asked
        newest = self._newest_change()
        if newest is None or (self.saved_at is not None and newest <= self.saved_at):
            return None
        return self._save(iteration, last_result, "at the end", newest)

    def _newest_change(self) -> float | None:
        times = [p.stat().st_mtime for p in Path(self.spec.path).rglob("*") if p.is_file() and p.name != SAVE_MARKER]
        return max(times, default=None)

    def _save(self, iteration: int, last_result: Mapping | None, why: str, newest: float | None = None) -> str:
        """Commit the folder at ``iteration``; ``newest``: its newest modification time, when the caller has it."""
        staging = Path(self.spec.state) / "staging" / f"checkpoint_{iteration:06d}"
        shutil.rmtree(staging.parent, ignore_errors=True)
        newest = self._newest_change() if newest is None else newest
        shutil.copytree(self.spec.path, staging, ignore=shutil.ignore_patterns(SAVE_MARKER), symlinks=True)
        try:
            uri = commit_checkpoint(
                self.storage,
                staging,
                checkpoint_uri(self.spec.trial_dir, iteration),
                {
                    "iteration": iteration,
                    "path": "",
                    "last_result": dict(last_result or {"training_iteration": iteration}),
                    "attempt": self.attempt,
                    "restored_from": self.spec.restore_from,  # the lineage: checkpoint_store.restore_candidates
                },
            )
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)
        self.committed, self.saved_at = iteration, newest
        log.info("checkpoint %s committed (%s)", uri, why)
        self.announce(uri, iteration)
        for deleted in apply_retention(self.storage, self.spec.trial_dir, self.spec.keep, self.spec.score_attribute):
            log.info("retention: deleted %s", deleted)
        return uri


def main(environ: Mapping[str, str] = os.environ) -> int:
    """The restore init container: restore, record it, exit 0; exit 1 with the reason as the termination message."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        spec = FolderSpec.from_json(environ[CHECKPOINT_FOLDER])
        storage = open_storage(spec.trial_dir, environ.get(STORAGE_ENDPOINT), environ.get(STORAGE_REGION))
        restored = restore(storage, spec)
    except Exception as exc:  # noqa: BLE001 - the attempt fails with the reason on its Trial
        message = f"the checkpoint folder could not be restored: {type(exc).__name__}: {exc}"[:1024]
        log.error("%s", message)
        _write_message(message, environ)
        return 1
    record = json.dumps(restored)
    (Path(spec.state) / RESTORED_FILE).write_text(record)
    _write_message(record, environ)
    log.info(
        "attempt %s: %s",
        environ.get(ATTEMPT, "?"),
        f"restored {restored['uri']} at iteration {restored['iteration']}" if restored["uri"] else "no checkpoint",
    )
    return 0


def _write_message(text: str, environ: Mapping[str, str]) -> None:
    try:
        Path(environ.get(TERMINATION_MESSAGE_PATH_VAR) or TERMINATION_MESSAGE_PATH).write_text(text)
    except OSError as exc:  # outside a pod
        log.warning("termination message not written: %s", exc)


if __name__ == "__main__":
    sys.exit(main())
