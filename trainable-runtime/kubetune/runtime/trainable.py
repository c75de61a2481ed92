"""The Ray-Tune-compatible class API: :class:`Trainable`.

Owns the template method ``train()`` and the result fields it fills in, the counters
(iterations, time, timesteps, episodes) and their round trip through checkpoints in Ray Tune's
1.x layout, and the upload of checkpoints to object storage when a
``remote_checkpoint_dir`` is given. Users subclass :class:`Trainable` and override ``setup``,
``step``, ``save_checkpoint``, ``load_checkpoint``, ``cleanup`` and ``reset_config``;
function trainables get a subclass from :func:`kubetune.runtime.function_trainable.wrap_function`.
The in-pod runtime (``kubetune.runtime``) constructs one per trial attempt and loops
``train()``; standalone use (``MyTrainable(config).train()``) needs no pod and no env.

Behaviour follows Ray Tune's ``Trainable`` of the 0.8.7–1.13 era (``ray/tune/trainable.py``),
as summarised in docs/ray-tune.md.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import pickle
import platform
import shutil
import socket
import tempfile
import time
import uuid
import warnings
from typing import Any, Callable

from kubetune import checkpoint_layout as layout

logger = logging.getLogger(__name__)

# Result keys with a meaning to the Trainable and its runner (Ray's ``ray/tune/result.py``).
DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
RESULT_DUPLICATE = "__duplicate__"
TRAINING_ITERATION = "training_iteration"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
DATE_FORMAT = "%Y-%m-%d_%H-%M-%S"
#: Trial id and name of a Trainable constructed outside a trial (Ray's value).
STANDALONE_NAME = "default"


@functools.lru_cache(maxsize=None)
def host_facts() -> tuple[str, str]:
    """Return ``(hostname, node_ip)`` of this host, computed once per process.

    The IP is the source address of a route to a public address (no packet is sent), as Ray's
    ``get_node_ip_address`` finds it; without a route it falls back to ``127.0.0.1``.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("8.8.8.8", 80))
            ip = s.getsockname()[0]
        except OSError:
            ip = "127.0.0.1"
    return platform.node(), ip


class Trainable:
    """Base class of class trainables, with Ray Tune's public contract.

    Args:
        config: hyperparameters of the trial; ``setup`` receives a deep copy. ``config["log_sys_usage"]``
            turns on system usage logging, as in Ray.
        logger_creator: ``logger_creator(config) -> logger`` with ``on_result(result)`` and optionally
            ``flush()``, ``close()`` and ``logdir`` (Ray's ``Logger``). Without one results are only returned.
        remote_checkpoint_dir: object storage URI (``s3://...`` or ``file://...``); ``save()`` then
            commits each checkpoint directory to ``<remote>/<path relative to logdir>`` and
            ``restore()`` fetches a checkpoint that is missing locally from there.
        trial_id: reported as ``trial_id``; ``"default"`` when standalone, like Ray.
        trial_name: reported as ``trial_name``; ``"default"`` when standalone.
        logdir: local directory for checkpoints (created if missing); default the logger's
            ``logdir``, else a new temp dir.
        log_sys_usage: add CPU, memory and GPU utilisation to every result under ``perf``.
        storage: a ``kubetune.storage.Storage`` for the remote URIs; default one opened from the
            URI with the pod's ``KUBETUNE_STORAGE_ENDPOINT``/``KUBETUNE_STORAGE_REGION``.
    """

    def __init__(
        self,
        config: dict | None = None,
        logger_creator: Callable[[dict], Any] | None = None,
        remote_checkpoint_dir: str | None = None,
        *,
        trial_id: str | None = None,
        trial_name: str | None = None,
        logdir: str | None = None,
        log_sys_usage: bool = False,
        storage: Any = None,
    ):
        self._start_time = time.perf_counter()
        self._experiment_id = uuid.uuid4().hex
        self.config = config if config is not None else {}
        self._trial_id = trial_id or STANDALONE_NAME
        self._trial_name = trial_name or STANDALONE_NAME
        self._result_logger = logger_creator(self.config) if logger_creator else None
        self._logdir = os.path.abspath(
            logdir
            or getattr(self._result_logger, "logdir", None)
            or tempfile.mkdtemp(prefix=f"{type(self).__name__}_{time.strftime(DATE_FORMAT)}_")
        )
        os.makedirs(self._logdir, exist_ok=True)
        self.remote_checkpoint_dir = remote_checkpoint_dir
        self._storages: dict[str, Any] = {storage.scheme: storage} if storage is not None else {}
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: float | None = None
        self._episodes_total: float | None = None
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._last_result: dict = {}
        self._warmup_time: float | None = None
        self._deprecations_shown: set[str] = set()
        self._stopped = False
        self._hostname, self._node_ip = host_facts()
        self.setup(copy.deepcopy(self.config))
        self._monitor = None
        if log_sys_usage or self.config.get("log_sys_usage", False):
            from kubetune.runtime.sysusage import SysUsageMonitor

            self._monitor = SysUsageMonitor()

    # ----------------------------------------------------------------- accessors
    @property
    def iteration(self) -> int:
        """Number of ``train()`` results so far, counting those before a restore."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        """Same as :attr:`iteration` (Ray's alias)."""
        return self._iteration

    @property
    def logdir(self) -> str:
        """Absolute local directory of this trainable's checkpoints."""
        return self._logdir

    @property
    def trial_id(self) -> str:
        """Trial id, ``"default"`` when standalone."""
        return self._trial_id

    @property
    def trial_name(self) -> str:
        """Trial name, ``"default"`` when standalone."""
        return self._trial_name

    @property
    def experiment_id(self) -> str:
        """Hex uuid4 chosen at construction and carried across restores."""
        return self._experiment_id

    def get_config(self) -> dict:
        """Return the trial's config (Ray's accessor)."""
        return self.config

    @classmethod
    def default_resource_request(cls, config: dict) -> Any:
        """Resources a trial with ``config`` needs, or None for the experiment's ``resourcesPerTrial``."""
        return None

    # ----------------------------------------------------------------- user hooks
    def _legacy(self, name: str, replacement: str) -> Callable | None:
        """Return the overridden 0.8-era method ``name``, warning once per instance, or None."""
        method = getattr(self, name, None)
        if method is not None and name not in self._deprecations_shown:
            self._deprecations_shown.add(name)
            warnings.warn(
                f"{type(self).__name__}.{name} is deprecated (Ray Tune 0.8 API); override {replacement} instead",
                DeprecationWarning,
                stacklevel=3,
            )
        return method

    def setup(self, config: dict) -> None:
        """Initialise the trainable from a deep copy of its config. Calls a legacy ``_setup``."""
        legacy = self._legacy("_setup", "setup")
        if legacy is not None:
            legacy(config)

    def step(self) -> dict:
        """Run one logical iteration and return its result dict. Calls a legacy ``_train``.

        Raises:
            NotImplementedError: neither ``step`` nor ``_train`` is overridden.
        """
        legacy = self._legacy("_train", "step")
        if legacy is None:
            raise NotImplementedError(f"{type(self).__name__} must override step()")
        return legacy()

    def save_checkpoint(self, checkpoint_dir: str) -> str | dict | None:
        """Write the state into ``checkpoint_dir``; return a path inside it, or a dict to pickle.

        Calls a legacy ``_save``.

        Raises:
            NotImplementedError: neither ``save_checkpoint`` nor ``_save`` is overridden.
        """
        legacy = self._legacy("_save", "save_checkpoint")
        if legacy is None:
            raise NotImplementedError(f"{type(self).__name__} must override save_checkpoint()")
        return legacy(checkpoint_dir)

    def load_checkpoint(self, checkpoint: str | dict) -> None:
        """Restore from the path ``save_checkpoint`` returned, or from its dict (which then also holds
        ``tune_checkpoint_path``). Calls a legacy ``_restore``.

        Raises:
            NotImplementedError: neither ``load_checkpoint`` nor ``_restore`` is overridden.
        """
        legacy = self._legacy("_restore", "load_checkpoint")
        if legacy is None:
            raise NotImplementedError(f"{type(self).__name__} must override load_checkpoint()")
        legacy(checkpoint)

    def cleanup(self) -> None:
        """Release resources when the trainable stops. Calls a legacy ``_stop``."""
        legacy = self._legacy("_stop", "cleanup")
        if legacy is not None:
            legacy()

    def reset_config(self, new_config: dict) -> bool:
        """Adopt ``new_config`` in place; return True on success (default False: cannot)."""
        return False

    def log_result(self, result: dict) -> None:
        """Hand a result to the logger. Calls a legacy ``_log_result`` instead when overridden."""
        legacy = self._legacy("_log_result", "log_result")
        if legacy is not None:
            legacy(result)
        elif self._result_logger is not None:
            self._result_logger.on_result(result)

    def _export_model(self, export_formats: list[str], export_dir: str) -> dict:
        """Export the model in each format into ``export_dir``; return ``{format: path}`` (default none)."""
        return {}

    # ----------------------------------------------------------------- training loop
    def train(self) -> dict:
        """Run ``step()`` once and return its result with Ray's auto-filled fields.

        A result holding ``__duplicate__`` is returned untouched and counts nothing.

        Raises:
            TypeError: ``step()`` returned something other than a dict.
            Exception: whatever ``step()`` raised.
        """
        start = time.perf_counter()
        if self._warmup_time is None:
            self._warmup_time = start - self._start_time
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict, got {type(result).__name__}")
        if RESULT_DUPLICATE in result:
            return result
        result = dict(result)
        time_this_iter = result.get(TIME_THIS_ITER_S)
        if time_this_iter is None:
            time_this_iter = time.perf_counter() - start
        self._iteration += 1
        self._iterations_since_restore += 1
        self._time_total += time_this_iter
        self._time_since_restore += time_this_iter
        result.setdefault(DONE, False)
        timesteps = result.get(TIMESTEPS_THIS_ITER)
        if timesteps is not None:
            self._timesteps_total = (self._timesteps_total or 0) + timesteps
            self._timesteps_since_restore += timesteps
        episodes = result.get(EPISODES_THIS_ITER)
        if episodes is not None:
            self._episodes_total = (self._episodes_total or 0) + episodes
        result.setdefault(TIMESTEPS_TOTAL, self._timesteps_total)
        result.setdefault(EPISODES_TOTAL, self._episodes_total)
        result.setdefault(TRAINING_ITERATION, self._iteration)
        mean_loss = result.get("mean_loss")
        if mean_loss:
            result.setdefault("neg_mean_loss", -mean_loss)
        now = time.time()
        result.update(
            {
                "experiment_id": self._experiment_id,
                "trial_id": self._trial_id,
                "trial_name": self._trial_name,
                "date": time.strftime(DATE_FORMAT, time.localtime(now)),
                "timestamp": int(now),
                TIME_THIS_ITER_S: time_this_iter,
                TIME_TOTAL_S: self._time_total,
                "pid": os.getpid(),
                "hostname": self._hostname,
                "node_ip": self._node_ip,
                "config": self.config,
                "time_since_restore": self._time_since_restore,
                "timesteps_since_restore": self._timesteps_since_restore,
                "iterations_since_restore": self._iterations_since_restore,
                "warmup_time": self._warmup_time,
            }
        )
        if self._monitor is not None:
            result.update(self._monitor.get_data())
        self.log_result(result)
        self._last_result = result
        return result

    def train_buffered(self, buffer_time_s: float, max_buffer_length: int = 1000) -> list[dict]:
        """Call ``train()`` for about ``buffer_time_s`` seconds and return the results (at least one).

        Stops early on ``done``, ``should_checkpoint``, a duplicate result, or ``max_buffer_length`` results.
        """
        results: list[dict] = []
        deadline = time.monotonic() + buffer_time_s
        while True:
            result = self.train()
            results.append(result)
            if (
                result.get(DONE)
                or result.get(SHOULD_CHECKPOINT)
                or result.get(RESULT_DUPLICATE)
                or len(results) >= max_buffer_length
                or time.monotonic() >= deadline
            ):
                return results

    # ----------------------------------------------------------------- checkpoints
    def get_state(self) -> dict:
        """Return the counters that a checkpoint's ``.tune_metadata`` records (Ray 1.13's keys)."""
        return {
            "experiment_id": self._experiment_id,
            "iteration": self._iteration,
            "timesteps_total": self._timesteps_total,
            "time_total": self._time_total,
            "episodes_total": self._episodes_total,
            "last_result": self._last_result,
        }

    def _save_local(self, parent: str) -> tuple[str, str, dict]:
        """Save under ``parent``; return the checkpoint path, its directory and the metadata state."""
        state = self.get_state()
        checkpoint_dir = layout.make_checkpoint_dir(parent, state["iteration"])
        path = layout.write_checkpoint(self.save_checkpoint(checkpoint_dir), checkpoint_dir, state)
        return path, checkpoint_dir, state

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Save a checkpoint into ``<checkpoint_dir or logdir>/checkpoint_<iteration:06d>/``.

        With a ``remote_checkpoint_dir`` the directory is then committed to object storage (upload,
        then the commit marker).

        Returns:
            The checkpoint path for :meth:`restore`: the path ``save_checkpoint`` returned (a
            directory gets a trailing separator) or ``<dir>/checkpoint`` for a dict.

        Raises:
            ValueError: ``save_checkpoint`` returned a path outside the directory or another type.
        """
        path, directory, state = self._save_local(checkpoint_dir or self._logdir)
        if self.remote_checkpoint_dir:
            self._commit_remote(directory, path, state)
        return path

    def restore(self, checkpoint_path: str) -> None:
        """Restore counters, ``experiment_id`` and user state from a checkpoint.

        Args:
            checkpoint_path: the path :meth:`save` returned, or its checkpoint directory, under
                any prefix (the directory may have moved); or a committed checkpoint directory URI
                (``s3://.../checkpoint_000005``). With a ``remote_checkpoint_dir``, a path under
                ``logdir`` that is missing locally is fetched from there first.

        Raises:
            FileNotFoundError: no checkpoint there (or the remote one lacks its commit marker).
        """
        path = layout.resolve_checkpoint_path(self._fetch_if_remote(os.fspath(checkpoint_path)))
        metadata = layout.read_metadata(path)
        self._experiment_id = metadata["experiment_id"]
        self._iteration = metadata["iteration"]
        self._timesteps_total = metadata["timesteps_total"]
        self._time_total = metadata["time_total"]
        self._episodes_total = metadata["episodes_total"]
        self._last_result = metadata.get("last_result") or {}
        if metadata["saved_as_dict"]:
            with open(path, "rb") as f:
                state = pickle.load(f)
            state["tune_checkpoint_path"] = path
            self.load_checkpoint(state)
        else:
            self.load_checkpoint(path)
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        logger.info("%s restored from %s at iteration %d", self._trial_name, path, self._iteration)

    def save_to_object(self) -> bytes:
        """Save a checkpoint and return all its files as bytes (nothing is uploaded)."""
        tmp = tempfile.mkdtemp(prefix=".save_to_object_", dir=self._logdir)
        try:
            return layout.pack_checkpoint(self._save_local(tmp)[0])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def restore_from_object(self, obj: bytes) -> None:
        """Restore from bytes made by :meth:`save_to_object` (the files live in a temp dir meanwhile).

        Raises:
            ValueError: ``obj`` is not such bytes.
        """
        tmp = tempfile.mkdtemp(prefix=".restore_from_object_", dir=self._logdir)
        try:
            self.restore(layout.unpack_checkpoint(obj, tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete_checkpoint(self, checkpoint_path: str) -> None:
        """Remove the checkpoint directory holding ``checkpoint_path`` (and its remote copy)."""
        try:
            checkpoint_dir = layout.find_checkpoint_dir(checkpoint_path)
        except FileNotFoundError:
            logger.warning("checkpoint %s not found; nothing to delete", checkpoint_path)
            return
        if self.remote_checkpoint_dir:
            from kubetune import checkpoint_store

            checkpoint_store.delete_checkpoint(
                self._get_storage(self.remote_checkpoint_dir), self._remote_uri(checkpoint_dir)
            )
        shutil.rmtree(checkpoint_dir)

    def export_model(self, export_formats: str | list[str], export_dir: str | None = None) -> dict:
        """Export the model via ``_export_model`` into ``export_dir`` (default ``logdir``)."""
        if isinstance(export_formats, str):
            export_formats = [export_formats]
        return self._export_model(export_formats, export_dir or self._logdir)

    # ----------------------------------------------------------------- remote checkpoints
    def _get_storage(self, uri: str):
        """Return the storage for ``uri``'s scheme, opening it on first use."""
        scheme = uri.split("://", 1)[0]
        if scheme not in self._storages:
            from kubetune.storage import open_storage

            self._storages[scheme] = open_storage(uri)  # endpoint and region from the pod's env
        return self._storages[scheme]

    def _remote_uri(self, checkpoint_dir: str) -> str:
        from kubetune.storage import join_uri

        rel = os.path.relpath(checkpoint_dir, self._logdir)
        if rel.startswith(os.pardir):
            rel = os.path.basename(checkpoint_dir)
        return join_uri(self.remote_checkpoint_dir, *rel.split(os.sep))

    def _commit_remote(self, checkpoint_dir: str, path: str, state: dict) -> None:
        """Commit ``checkpoint_dir``; the marker's metadata has the keys the runtime writes too."""
        from kubetune.checkpoint_store import commit_checkpoint

        uri = self._remote_uri(checkpoint_dir)
        last_result = {k: v for k, v in state["last_result"].items() if k != "config"}  # kept small
        commit_checkpoint(
            self._get_storage(uri),
            checkpoint_dir,
            uri,
            {
                "iteration": state["iteration"],
                "path": path[len(checkpoint_dir) + 1 :].replace(os.sep, "/"),
                "last_result": last_result,
                "experiment_id": state["experiment_id"],
            },
        )

    def _fetch_if_remote(self, path: str) -> str:
        """Return a local path for ``path``, downloading a URI or a missing local checkpoint first."""
        if "://" in path:
            uri, rest = path.rstrip("/"), ""
            local = os.path.join(self._logdir, uri.rsplit("/", 1)[-1])
        elif not os.path.exists(path) and self.remote_checkpoint_dir:
            rel = os.path.relpath(os.path.abspath(path), self._logdir)
            if rel.startswith(os.pardir):
                return path
            first, _, rest = rel.partition(os.sep)
            local = os.path.join(self._logdir, first)
            uri = self._remote_uri(local)
        else:
            return path
        from kubetune.checkpoint_store import restore_checkpoint

        shutil.rmtree(local, ignore_errors=True)
        restore_checkpoint(self._get_storage(uri), uri, local)
        return os.path.join(local, rest)

    # ----------------------------------------------------------------- lifecycle
    def reset(self, new_config: dict, logger_creator: Callable[[dict], Any] | None = None) -> bool:
        """Reuse this trainable for ``new_config`` via ``reset_config``.

        Returns:
            True when ``reset_config`` succeeded; the counters then restart at 0 (a following
            ``restore`` overwrites them).
        """
        self.config = new_config
        if logger_creator is not None:
            self._close_logger()
            self._result_logger = logger_creator(new_config)
        if not self.reset_config(new_config):
            return False
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total = None
        self._episodes_total = None
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._last_result = {}
        return True

    def _close_logger(self) -> None:
        for name in ("flush", "close"):
            method = getattr(self._result_logger, name, None)
            if method is not None:
                method()

    def stop(self) -> None:
        """Close the logger, stop system usage sampling and call ``cleanup()`` (once)."""
        if self._stopped:
            return
        self._stopped = True
        self._close_logger()
        if self._monitor is not None:
            self._monitor.stop()
        self.cleanup()
