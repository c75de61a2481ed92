"""The training loop of one trial attempt: restore, ``train()``, stop criteria, decisions, checkpoints.

:class:`TrialRunner` is driven by :mod:`kubetune.runtime.main` from a worker thread (so the main
thread stays free to react to SIGTERM during a long ``step()``), and by ``bench/bench_runtime.py``.
It follows Ray Tune's trial runner for a single trial:

* **Stop**: a result with ``done: True`` or meeting ``spec.stop`` (``kubetune.stop_criteria.should_stop``)
  ends the trial; so do the collector's ``stop`` and ``pause`` decisions and SIGTERM. With
  ``decision_wait_s`` the loop waits for the collector's answer to each result before the next
  ``train()``, so a stop or pause applies at the result it is about, as in Ray.
* **Checkpoint** after a result when ``checkpoint.frequency`` divides the iteration, when the result
  has ``should_checkpoint``, or when the collector replied ``checkpoint``; at the end when
  ``checkpoint.atEnd`` (done, stop criteria, ``stop``), and always on ``pause`` and SIGTERM. Each
  checkpoint is saved locally, the result log is synced, the directory is committed
  (``kubetune.checkpoint_store.commit_checkpoint``: files, then the marker), retention runs, and the
  collector hears of it on the next batch. A checkpoint whose iteration is already committed is not
  taken again.
* **Restore**: ``restoreFrom`` when set, else the trial's latest committed checkpoint. The trial's
  committed checkpoints newer than the restored iteration belong to a discarded lineage (a rollback,
  or PBT cloning a trial that was behind) and are deleted, like their lines in ``result.json``
  (:mod:`kubetune.runtime.results`), so that a retry resumes from this lineage.

The checkpoint's iteration is the one ``Trainable.get_state()`` records (for function trainables,
the iteration of the function's newest checkpoint), so a checkpoint always names what it restores to.
A trainable that does not implement ``save_checkpoint`` (``NotImplementedError``) runs without
checkpoints after one warning: ``atEnd`` defaults to true in kubetune (Ray's ``checkpoint_at_end``
defaults to false), and a trial that trained to its end must not fail for it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from kubetune.checkpoint_layout import find_checkpoint_dir
from kubetune.checkpoint_store import (
    apply_retention,
    commit_checkpoint,
    restore_candidates,
    restore_checkpoint,
)
from kubetune.env import TrialEnv
from kubetune.limits import MAX_FIELD_BYTES
from kubetune.resultkeys import flatten, lookup
from kubetune.runtime import gang_config
from kubetune.runtime.loader import load_trainable_class
from kubetune.runtime.pbt_explore import explore_in_pod
from kubetune.runtime.reporter import FENCED, Reporter, json_default
from kubetune.runtime.results import ResultLog
from kubetune.runtime.trial_name import TrialInfo, create_display_name
from kubetune.shipping import resolve_config, sampled_as_json
from kubetune.stop_criteria import should_stop
from kubetune.storage import Storage, join_uri

log = logging.getLogger(__name__)

#: Reasons a trial attempt ends normally (all exit 0).
DONE, STOP_CRITERIA, STOP, PAUSE, TERMINATED = "done", "stop criteria", "stop", "pause", "terminated"
_ALWAYS_CHECKPOINT = (PAUSE, TERMINATED)


class Abandoned(Exception):
    """The step finished after the main thread had already checkpointed and ended the attempt."""


class TrialRunner:
    """Runs one trial attempt in this process.

    Args:
        env: the trial environment (``kubetune.env.read_trial_env``).
        storage: storage of ``env.trial_dir_uri``.
        workdir: local scratch directory for the trainable's logdir, saves and restores.
        reporter: the collector reporter (started by :meth:`setup`), or None without a collector.
        sync_period_s: how often the result log is uploaded in the background, in seconds.
        progress_every_s: how often a progress line is logged, in seconds (the first result always is).
    """

    def __init__(
        self,
        env: TrialEnv,
        storage: Storage,
        *,
        workdir: Path,
        reporter: Reporter | None,
        sync_period_s: float = 10.0,
        progress_every_s: float = 5.0,
    ):
        self.env = env
        self.storage = storage
        self.workdir = Path(workdir)
        self.reporter = reporter
        self.results = ResultLog(storage, env.trial_dir_uri, self.workdir / "results", sync_period_s)
        self.progress_every_s = progress_every_s
        self._stop_keys = list(flatten(env.stop)) if env.stop else []
        self.trainable = None
        self.committed_iteration = 0
        self.checkpoint_uri: str | None = None
        self.last_result: dict | None = None  # of this attempt; the termination message carries it
        self.restored_result: dict | None = None  # the last result of the trial's own restored checkpoint
        self._last_progress = float("-inf")
        self._checkpoint_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._in_train = False
        self._abandoned = False
        self._terminate = threading.Event()
        self._can_checkpoint = True

    # -- setup -----------------------------------------------------------------------------------

    def setup(self) -> None:
        """Load the trainable, resolve the config's ``sample_from`` values, call a PBT exploit's user functions
        (:mod:`kubetune.runtime.pbt_explore`, reported to the operator), call the ``trial_name_creator`` of a trial
        not named yet (:mod:`kubetune.runtime.trial_name`, reported), publish that config to a gang's workers
        (:mod:`kubetune.runtime.gang_config`), construct and restore the trainable,
        resume the result log, write ``params.json`` (the resolved config).

        Raises:
            Exception: loading, constructing (``setup()``) or restoring failed.
        """
        env = self.env
        if self.reporter is not None:
            self.reporter.start()  # first, so that even a failing setup ends with a done batch
        cls = load_trainable_class(env, self.storage)
        config = resolve_config(env.config, self.storage)  # sample_from values, computed here
        if env.pbt_explore:  # a PBT exploit's user functions, called here before the donor's checkpoint is loaded
            config = explore_in_pod(config, env.pbt_explore, self.storage)
            if self.reporter is not None:
                self.reporter.set_explored(config)  # the operator journals it before any result of this attempt
            if env.pbt_policy:
                env.pbt_policy[5] = config
        elif config is not env.config and self.reporter is not None:
            self._report_sampled(config)
        display_name = env.display_name
        if env.name_creator:  # the trial has no display name yet: its creator is called here, as Ray's driver does
            info = TrialInfo(cls.__name__, env.trial, config, env.tag or "", env.trial_dir_uri)
            display_name = create_display_name(env.name_creator, self.storage, info)
            if display_name is not None and self.reporter is not None:
                self.reporter.set_display_name(display_name)  # the operator keeps it: later attempts call nothing
        gang_config.publish(self.storage, env, config, display_name)  # a gang's workers run with these, not their own
        self.trainable = cls(  # trial_name is Ray's str(trial): the display name when the trial has one
            config=config, trial_id=env.trial, trial_name=display_name or env.trial, logdir=str(self.workdir / "logdir")
        )
        restored = self._restore()
        kept, dropped = self.results.resume(restored)
        if kept or dropped:
            log.info(
                "result.json: kept %d results up to iteration %d, dropped %d written after it", kept, restored, dropped
            )
        if env.pbt_policy:
            self._write_pbt_policy(env.pbt_policy)
        params = json.dumps(config, indent=2, sort_keys=True, default=json_default).encode()
        self.storage.put_bytes(join_uri(env.trial_dir_uri, "params.json"), params)
        self.results.start_background_sync()

    def _report_sampled(self, config: dict) -> None:
        """Report the values this attempt drew for the config's ``sample_from`` functions: the operator journals
        them before any result and gives them to the trial's later attempts (Ray draws them once per trial). A
        config that is not plain JSON stays unreported, and each attempt draws its own (logged)."""
        sampled = sampled_as_json(config)
        if sampled is None:
            log.warning(
                "the sample_from values of this trial are not plain JSON (an object, a tuple, an array, NaN, "
                "or over %d bytes): a retried attempt of the trial draws them again",
                MAX_FIELD_BYTES,
            )
        else:
            self.reporter.set_explored(sampled)

    def _write_pbt_policy(self, line: list) -> None:
        """Write the trial's PBT policy as Ray does: ``pbt_policy_<trial>.txt`` next to the trial folders is
        the donor's policy file, then ``line`` (``[trial, donor, trial iteration, donor iteration, donor
        config, new config]``, one JSON list per line), and ``line`` is appended to the experiment's
        ``pbt_global.txt``. A retry of the attempt finds both written."""
        experiment_dir = self.env.trial_dir_uri.rsplit("/", 1)[0]
        own, text = join_uri(experiment_dir, f"pbt_policy_{line[0]}.txt"), json.dumps(line) + "\n"
        try:
            written = self.storage.get_bytes(own).decode().endswith(text)
        except FileNotFoundError:
            written = False
        if not written:
            try:
                donor = self.storage.get_bytes(join_uri(experiment_dir, f"pbt_policy_{line[1]}.txt")).decode()
            except FileNotFoundError:
                donor = ""
            self.storage.put_bytes(own, (donor + text).encode())
        try:  # a log for people: the trial goes on without it
            self.storage.append_line(join_uri(experiment_dir, "pbt_global.txt"), text[:-1])
        except Exception as exc:  # noqa: BLE001 - e.g. a store that refuses conditional writes
            log.warning("pbt_global.txt: this exploit's line is not written: %s: %s", type(exc).__name__, exc)

    def _restore(self) -> int:
        """Restore the first of the trial's checkpoints that :func:`kubetune.checkpoint_store.restore_candidates`
        offers (its own lineage's newest, else ``restoreFrom``); return the iteration. A committed checkpoint that
        cannot be restored (files missing or cut short in storage, or ``load_checkpoint`` failing on it) is
        skipped with a warning for the next newest one, so one corrupt checkpoint does not fail every retry.

        Raises:
            Exception: no checkpoint could be restored (the newest one's error).
        """
        candidates = restore_candidates(self.storage, self.env.trial_dir_uri, self.env.restore_from)
        if not candidates:
            log.info("no committed checkpoint; starting at iteration 0")
            return 0
        first_error = None
        for uri in candidates:
            try:
                return self._restore_from(uri)
            except Exception as exc:  # noqa: BLE001 - the next newest checkpoint is tried
                first_error = first_error or exc
                log.warning(
                    "cannot restore %s (%s: %s); trying the next newest checkpoint", uri, type(exc).__name__, exc
                )
        raise first_error

    def _restore_from(self, uri: str) -> int:
        local = self.workdir / "restore" / uri.rsplit("/", 1)[-1]
        shutil.rmtree(local, ignore_errors=True)
        metadata = restore_checkpoint(self.storage, uri, local)
        self.trainable.restore(os.path.join(local, metadata.get("path", "")))
        shutil.rmtree(local, ignore_errors=True)
        iteration = self.trainable.iteration
        if uri.startswith(join_uri(self.env.trial_dir_uri) + "/"):
            self.committed_iteration, self.checkpoint_uri = iteration, uri
            self.restored_result = metadata.get("last_result") or None
        log.info("restored %s at iteration %d", uri, iteration)
        return iteration

    # -- the loop --------------------------------------------------------------------------------

    def request_termination(self) -> None:
        """Ask the loop to end after the current ``train()`` (SIGTERM)."""
        self._terminate.set()

    def run(self) -> str:
        """Call :meth:`iterate` until the trial ends; return the reason.

        A trial restored from its own checkpoint whose last result already ended it (``done``, or the
        stop criteria) ends at once, without another ``step()``.
        """
        last = self.restored_result
        if last and last.get("done"):
            return DONE
        if last and self._stop_keys and should_stop(self._stop_view(last), self.env.stop)[0]:
            log.info("the restored checkpoint's result already meets the stop criteria")
            return STOP_CRITERIA
        while True:
            reason = self.iterate()
            if reason is not None:
                return reason

    def train_once(self) -> dict | None:
        """One ``train()``, unless termination was asked for (then None); the main thread sees it running.

        Raises:
            Abandoned: the main thread took over while ``train()`` ran.
        """
        with self._state_lock:
            if self._terminate.is_set():
                return None
            self._in_train = True
        try:
            return self.trainable.train()
        finally:
            with self._state_lock:
                self._in_train = False
                if self._abandoned:
                    raise Abandoned()

    def iterate(self) -> str | None:
        """Run one ``train()`` and act on its result; return why the trial ends, or None to go on.

        Raises:
            Abandoned: the main thread took over while ``train()`` ran.
            Exception: whatever the user's code or a checkpoint commit raised.
        """
        result = self.train_once()
        if result is None:
            return TERMINATED
        if result.get("__duplicate__"):  # a function trainable returned: its last result is logged already
            if result.get("should_checkpoint"):
                self.checkpoint("final function checkpoint", force=True)
            return DONE
        self.results.append(result)
        self.last_result = result
        if self.reporter is not None:
            seq = self.reporter.report(result)
            wait = self.env.decision_wait_s
            if wait > 0 and not self.reporter.wait_answered(seq, wait):  # the scheduler's answer, before the next step
                log.warning(
                    "no answer from the operator to the result of iteration %s within %g s%s: training on, so a "
                    "decision on it (stop, pause) applies at a later iteration than Ray's would",
                    result.get("training_iteration"),
                    wait,
                    " (collector unreachable)" if self.reporter.unreachable else "",
                )
        self._log_progress(result)
        decision = self.reporter.take_decision() if self.reporter is not None else None
        if decision == FENCED:
            return FENCED  # before any checkpoint: the trial folder is no longer this attempt's
        frequency = self.env.checkpoint.frequency
        if result.get("should_checkpoint"):
            self.checkpoint("should_checkpoint")
        elif frequency and self.trainable.iteration % frequency == 0:
            self.checkpoint("frequency")
        elif decision == "checkpoint":
            self.checkpoint("collector decision")
        if result.get("done"):
            return DONE
        stop, key = should_stop(self._stop_view(result), self.env.stop) if self._stop_keys else (False, None)
        if stop:
            log.info("stop criterion %s reached: %s", key, self._stop_view(result).get(key))
            return STOP_CRITERIA
        if decision in (STOP, PAUSE):
            return decision
        if self._terminate.is_set():
            return TERMINATED
        return None

    def _stop_view(self, result: dict) -> dict:
        """The values of the stop keys in ``result``, by flattened key (flattening whole results is slow)."""
        return {key: value for key in self._stop_keys if (value := lookup(result, key)) is not None}

    def _log_progress(self, result: dict) -> None:
        now = time.monotonic()
        if now - self._last_progress < self.progress_every_s:
            return
        self._last_progress = now
        metric = self.env.metric
        metrics = metric if isinstance(metric, list) else [metric] if metric else []
        shown = "".join(f", {m}={result[m]}" for m in metrics if m in result)
        log.info(
            "iteration %s, time_total_s %.1f%s",
            result.get("training_iteration"),
            result.get("time_total_s") or 0.0,
            shown,
        )

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint(self, why: str, force: bool = False) -> str | None:
        """Save, commit and announce a checkpoint; return its URI, or None when there was nothing new.

        Safe to call from the main thread while ``train()`` runs in the worker (SIGTERM during a long
        step): the saved state is the one ``get_state()`` and ``save_checkpoint`` see at that moment.

        Args:
            why: logged.
            force: commit even when this iteration is committed already (the function trainable's
                final checkpoint may replace one of the same iteration).
        """
        with self._checkpoint_lock:
            if self.reporter is not None and self.reporter.fenced.is_set():
                return None
            state = self.trainable.get_state()
            iteration = state["iteration"]
            if not self._can_checkpoint or iteration == 0 or (iteration == self.committed_iteration and not force):
                return None
            save_root = self.workdir / "save"
            shutil.rmtree(save_root, ignore_errors=True)
            try:
                try:
                    path = self.trainable.save(str(save_root))
                except NotImplementedError as exc:
                    self._can_checkpoint = False
                    log.warning("no checkpoints for this trial: %s", exc)
                    return None
                local_dir = find_checkpoint_dir(path)
                self.results.sync()  # every result up to this checkpoint is in storage before it exists
                uri = join_uri(self.env.trial_dir_uri, Path(local_dir).name)
                last_result = {k: v for k, v in (state.get("last_result") or {}).items() if k != "config"}
                uri = commit_checkpoint(
                    self.storage,
                    local_dir,
                    uri,
                    {
                        "iteration": iteration,
                        "path": path[len(local_dir) + 1 :].replace(os.sep, "/"),
                        "last_result": json.loads(json.dumps(last_result, default=json_default)),
                        "experiment_id": state.get("experiment_id"),
                        "attempt": self.env.attempt,
                        "restored_from": self.env.restore_from,  # the lineage: see _restore
                    },
                )
            finally:
                shutil.rmtree(save_root, ignore_errors=True)
            self.committed_iteration, self.checkpoint_uri = iteration, uri
            log.info("checkpoint %s committed (%s)", uri, why)
            if self.reporter is not None:
                self.reporter.set_checkpoint(uri, iteration)
            policy = self.env.checkpoint
            for deleted in apply_retention(self.storage, self.env.trial_dir_uri, policy.keep, policy.scoreAttribute):
                log.info("retention: deleted %s", deleted)
            return uri

    # -- the end ---------------------------------------------------------------------------------

    def abandon_step(self) -> bool:
        """Called by the main thread: if ``train()`` is still running, mark it abandoned and return True."""
        with self._state_lock:
            if self._in_train:
                self._abandoned = True
            return self._abandoned

    def finish(self, reason: str, *, stop_trainable: bool = True, reporter_timeout_s: float = 10.0) -> None:
        """End the attempt: final checkpoint as the policy says, last result sync, final batch.

        Raises:
            Exception: the final checkpoint or result upload failed.
        """
        log.info("trial ends: %s at iteration %d", reason, self.trainable.iteration if self.trainable else 0)
        if reason == FENCED:  # write nothing more: no checkpoint, no result upload, no final batch
            self.results.close()
            if stop_trainable and self.trainable is not None:
                self.trainable.stop()
            return
        if self.trainable is not None and (reason in _ALWAYS_CHECKPOINT or self.env.checkpoint.atEnd):
            self.checkpoint(f"end: {reason}")
        self.results.sync(final=True)
        self.results.close()
        if stop_trainable and self.trainable is not None:
            self.trainable.stop()
        if self.reporter is not None:
            self.reporter.close(reporter_timeout_s)
