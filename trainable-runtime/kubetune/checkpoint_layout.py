"""Checkpoint directories on local disk: Ray Tune's 1.x layout and the ``Checkpoint`` handle.

Owns the files a checkpoint consists of on the trial's local disk: the
``checkpoint_<iteration:06d>/`` directory with its ``.is_checkpoint`` marker, the
pickled dict of dict checkpoints, the pickled ``<path>.tune_metadata``, the
byte form of ``save_to_object``, and the small :class:`Checkpoint` that function
trainables pass to :func:`kubetune.report`. Called by :class:`kubetune.Trainable`
(save/restore) and by the function API; object storage is not touched here
(``kubetune.checkpoint_store`` commits uploads).

Layout facts come from Ray Tune 1.13 (``TrainableUtil``); the byte format of
:func:`pack_checkpoint` is kubetune's own.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from typing import Any, Iterator

#: Marker file that identifies a checkpoint directory (Ray's name).
CHECKPOINT_MARKER = ".is_checkpoint"
#: Suffix of the pickled metadata written next to the path ``save_checkpoint`` returned.
METADATA_SUFFIX = ".tune_metadata"
#: File that holds a pickled dict checkpoint inside its checkpoint directory (Ray's name).
DICT_CHECKPOINT_FILE = "checkpoint"
_OBJECT_FORMAT = "kubetune.checkpoint/1"  # a stored format name: kept through the module rename


#: The file of a :meth:`Checkpoint.from_dict` checkpoint (Ray AIR's name for it).
FROM_DICT_FILE = "dict_checkpoint.pkl"


class Checkpoint:
    """A checkpoint directory, as the modern function API passes it around.

    Matches the directory part of Ray's ``ray.train.Checkpoint``:
    ``report(metrics, checkpoint=Checkpoint.from_directory(d))`` and
    ``get_checkpoint()``. The directory is copied when it is reported, so the caller may
    delete ``d`` as soon as ``report`` returns.

    Attributes:
        path: absolute path of the directory.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        """Return a handle on the existing directory ``path``.

        Raises:
            NotADirectoryError: ``path`` is not an existing directory.
        """
        if not os.path.isdir(path):
            raise NotADirectoryError(f"checkpoint directory {os.fspath(path)!r} does not exist")
        return cls(path)

    @classmethod
    def from_dict(cls, data: dict) -> "Checkpoint":
        """Return a checkpoint holding ``data`` (Ray 2.0-2.6 AIR's ``Checkpoint.from_dict``): a new
        temporary directory with the dict pickled to :data:`FROM_DICT_FILE` (Ray's file name).

        Raises:
            TypeError: ``data`` is not a dict.
        """
        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict takes a dict, got {type(data).__name__}")
        path = tempfile.mkdtemp(prefix="checkpoint_")
        with open(os.path.join(path, FROM_DICT_FILE), "wb") as f:
            pickle.dump(data, f)
        return cls(path)

    def to_dict(self) -> dict:
        """The dict a :meth:`from_dict` checkpoint holds.

        Raises:
            ValueError: the checkpoint is a directory of other files (read it with :meth:`to_directory`).
        """
        file = os.path.join(self.path, FROM_DICT_FILE)
        if not os.path.isfile(file):
            raise ValueError(f"{self!r} holds files, not a dict from Checkpoint.from_dict: use to_directory()")
        with open(file, "rb") as f:
            return pickle.load(f)

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copy the checkpoint's files into ``path`` (created if missing; default a new temp dir).

        Returns:
            The directory the files were copied into.
        """
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="checkpoint_")
        copy_tree(self.path, dest)
        return dest

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory holding the checkpoint (the directory itself; do not modify it)."""
        yield self.path

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


def copy_tree(src: str, dest: str, *, skip_top: tuple[str, ...] = ()) -> None:
    """Copy the files under ``src`` into ``dest`` (merging), leaving out top-level names in ``skip_top``."""
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(src):
        if name in skip_top:
            continue
        source, target = os.path.join(src, name), os.path.join(dest, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)


def make_checkpoint_dir(parent: str, iteration: int) -> str:
    """Create ``<parent>/checkpoint_<iteration:06d>/`` with its marker and return its path (Ray 1.x)."""
    path = os.path.join(parent, f"checkpoint_{iteration:06d}")
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, CHECKPOINT_MARKER), "a").close()
    return path


def write_checkpoint(returned: Any, checkpoint_dir: str, state: dict) -> str:
    """Finish a checkpoint after ``save_checkpoint(checkpoint_dir)`` returned ``returned``.

    A dict is pickled to ``<checkpoint_dir>/checkpoint``; a path must lie inside
    ``checkpoint_dir`` (a directory path gets a trailing separator, so its metadata lands
    inside it); None means the directory itself (Ray 2.x's reading). The metadata ``state``
    plus ``saved_as_dict`` is pickled to ``<checkpoint path>.tune_metadata``.

    Returns:
        The checkpoint path that ``restore`` takes.

    Raises:
        ValueError: ``returned`` is a path outside ``checkpoint_dir``, or neither a str, a dict nor None.
    """
    saved_as_dict = isinstance(returned, dict)
    if saved_as_dict:
        path = os.path.join(checkpoint_dir, DICT_CHECKPOINT_FILE)
        with open(path, "wb") as f:
            pickle.dump(returned, f)
    elif returned is None or isinstance(returned, (str, os.PathLike)):
        path = checkpoint_dir if returned is None else os.fspath(returned)
        top = os.path.abspath(checkpoint_dir)
        if os.path.commonpath([top, os.path.abspath(path)]) != top:
            raise ValueError(f"save_checkpoint must return a path inside {checkpoint_dir!r}, got {path!r}")
        if os.path.isdir(path):
            path = os.path.join(path, "")
    else:
        raise ValueError(
            f"save_checkpoint returned {type(returned).__name__}; expected a path inside {checkpoint_dir!r} or a dict"
        )
    with open(path + METADATA_SUFFIX, "wb") as f:
        pickle.dump({**state, "saved_as_dict": saved_as_dict}, f)
    return path


def find_checkpoint_dir(path: str) -> str:
    """Return the checkpoint directory (the nearest one with a marker) that holds ``path``.

    Raises:
        FileNotFoundError: no directory from ``path`` up to the root has the marker.
    """
    current = os.path.normpath(path)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while True:
        if os.path.isfile(os.path.join(current, CHECKPOINT_MARKER)):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            raise FileNotFoundError(f"{path!r} is not inside a checkpoint directory")
        current = parent


def resolve_checkpoint_path(path: str) -> str:
    """Turn what a user passes to ``restore`` into the checkpoint path that has metadata.

    ``path`` is either the path ``save`` returned (possibly moved under another prefix)
    or a checkpoint directory; in the latter case the shallowest ``*.tune_metadata`` file
    under it names the checkpoint path (user files deeper down may carry that suffix too).

    Raises:
        FileNotFoundError: neither ``path`` nor anything under it has metadata.
        ValueError: the shallowest level holds several metadata files.
    """
    if os.path.exists(path + METADATA_SUFFIX):
        return path
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint at {path!r} (missing {path + METADATA_SUFFIX!r})")
    for root, _, names in os.walk(path):  # top-down: the first level with metadata wins
        found = sorted(name for name in names if name.endswith(METADATA_SUFFIX))
        if len(found) > 1:
            raise ValueError(f"checkpoint directory {root!r} holds several checkpoints: {found}")
        if found:
            return os.path.join(root, found[0])[: -len(METADATA_SUFFIX)]
    raise FileNotFoundError(f"no {METADATA_SUFFIX} file under checkpoint directory {path!r}")


def read_metadata(path: str) -> dict:
    """Return the unpickled ``<path>.tune_metadata`` of a resolved checkpoint path."""
    with open(path + METADATA_SUFFIX, "rb") as f:
        return pickle.load(f)


def pack_checkpoint(path: str) -> bytes:
    """Return every file of the checkpoint holding ``path`` as bytes (``save_to_object``)."""
    top = find_checkpoint_dir(path)
    files, dirs = {}, []
    for root, subdirs, names in os.walk(top):
        rel_root = os.path.relpath(root, top)
        dirs.extend(os.path.normpath(os.path.join(rel_root, d)) for d in subdirs)
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                files[os.path.normpath(os.path.join(rel_root, name))] = f.read()
    inner = path[len(top) :].lstrip(os.sep) if path.startswith(top) else os.path.relpath(path, top)
    return pickle.dumps(
        {"format": _OBJECT_FORMAT, "name": os.path.basename(top), "path": inner, "dirs": dirs, "files": files}
    )


def unpack_checkpoint(data: bytes, parent: str) -> str:
    """Recreate the checkpoint packed in ``data`` under ``parent`` and return its checkpoint path.

    Raises:
        ValueError: ``data`` was not made by :func:`pack_checkpoint`.
    """
    obj = pickle.loads(data)
    if not isinstance(obj, dict) or obj.get("format") != _OBJECT_FORMAT:
        raise ValueError("not a checkpoint object made by Trainable.save_to_object")
    top = os.path.join(parent, obj["name"])
    os.makedirs(top, exist_ok=True)
    for rel in obj["dirs"]:
        os.makedirs(os.path.join(top, rel), exist_ok=True)
    for rel, content in obj["files"].items():
        with open(os.path.join(top, rel), "wb") as f:
            f.write(content)
    return os.path.join(top, obj["path"])
