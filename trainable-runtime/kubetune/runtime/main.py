"""Process entry of the trial pod (``python -m kubetune.runtime``): threads, signals, exit codes.

The operator's pod builder runs this as the trial container's command. :func:`main` reads the trial
environment (``kubetune.env``), opens storage and the collector reporter, and runs
:class:`kubetune.runtime.loop.TrialRunner` (on a gang's workers, rank above 0:
:class:`kubetune.runtime.worker.WorkerRunner`, without a reporter) in a worker thread while the main
thread waits for it and handles SIGTERM/SIGINT (a gang's member leaves with ``os._exit`` once its attempt
is written, skipping the exit handlers of libraries that would wait for its peers):

* on the signal the loop ends after the current ``train()`` and checkpoints (exit 0);
* if ``train()`` is still running ``grace/2`` seconds later (a long ``step()``), the main thread
  checkpoints the state as it stands (``get_state()``/``save_checkpoint``, iteration of the last
  finished step), delivers the final batch and exits 0 without waiting for the step;
* ``grace`` is the pod's ``terminationGracePeriodSeconds`` (``kubetune.env.GRACE_PERIOD``, default 30).

Storage that stops answering stalls the attempt (each operation retries for up to 10 minutes); after
``kubetune.storage.UNREACHABLE_AFTER_S`` seconds of failed requests the reporter tells the collector
(``StorageUnreachable``), so the Trial and the Experiment show it, and again once storage answers.

Exit codes: 0 when the trial ends (done, stop criteria, ``stop``/``pause`` decision, SIGTERM), with the
outcome as JSON in the termination message (``kubetune.env.OUTCOME_*``), 1 when
user code or the runtime fails, 2 when the environment is invalid. On failure the tail of the
traceback (last 4 KiB, Kubernetes' limit) goes to the termination message file
(``KUBETUNE_TERMINATION_MESSAGE_PATH``, default ``/dev/termination-log``) and the traceback to
``error.txt`` in the trial dir (Ray's file). Logs go to stdout; the token and credentials never do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from kubetune import env as trial_env
from kubetune.runtime.attempt_end import attempt_ended
from kubetune.runtime.loop import DONE, FENCED, PAUSE, STOP, STOP_CRITERIA, TERMINATED, Abandoned, TrialRunner
from kubetune.runtime.reporter import Reporter
from kubetune.runtime.worker import WorkerRunner
from kubetune.storage import S3Storage, join_uri, open_storage

log = logging.getLogger("kubetune.runtime")
STORAGE_UNREACHABLE = trial_env.STALL_REASONS[0]

#: Override for runs outside a pod (tests, local debugging); the operator does not set it.
WORKDIR_VAR = "KUBETUNE_WORKDIR"
#: Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_BYTES = 4096
_ERROR_TXT_BYTES = 64 << 10
#: How each way of ending reads in the termination message.
OUTCOMES = {
    DONE: trial_env.OUTCOME_COMPLETED,
    STOP_CRITERIA: trial_env.OUTCOME_COMPLETED,
    STOP: trial_env.OUTCOME_STOPPED,
    PAUSE: trial_env.OUTCOME_PAUSED,
    TERMINATED: trial_env.OUTCOME_TERMINATED,
    FENCED: trial_env.OUTCOME_FENCED,
}


#: Bytes of the last result kept in the termination message (the rest of the message fits in 1 KiB).
RESULT_BYTES = 3072


def tail_bytes(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` in UTF-8, cut at a character boundary."""
    data = text.encode()
    return data[-limit:].decode(errors="ignore") if len(data) > limit else text


def write_termination_message(message: str) -> None:
    """Write the tail of ``message`` to the termination message file; log (not raise) when impossible."""
    path = os.environ.get(trial_env.TERMINATION_MESSAGE_PATH_VAR) or trial_env.TERMINATION_MESSAGE_PATH
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(tail_bytes(message, TERMINATION_MESSAGE_BYTES))
    except OSError as exc:
        log.warning("could not write the termination message to %s: %s", path, exc)


class Supervisor:
    """Runs a :class:`TrialRunner` in a worker thread; the calling (main) thread handles signals.

    Args:
        runner: the trial attempt.
        grace_period_s: seconds between SIGTERM and SIGKILL.
    """

    def __init__(self, runner: TrialRunner, grace_period_s: float):
        self.runner = runner
        self.grace_period_s = grace_period_s
        self.exit_code = 1
        self.abandoned = False
        self._signal_at: float | None = None
        self._done = threading.Event()

    def run(self) -> int:
        """Run the attempt; return the exit code (``abandoned`` says a step was left running)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        worker = threading.Thread(target=self._work, name="kubetune-trial", daemon=True)
        worker.start()
        while not self._done.wait(0.1):
            if self._signal_at is None or time.monotonic() - self._signal_at < self.grace_period_s / 2:
                continue
            if self.runner.abandon_step():
                self.abandoned = True
                return self._take_over()
        return self.exit_code

    def _on_signal(self, signum, _frame) -> None:
        if self._signal_at is None:
            self._signal_at = time.monotonic()
            log.info("received %s: checkpointing and exiting", signal.Signals(signum).name)
            self.runner.request_termination()

    def _deadline_left(self) -> float:
        assert self._signal_at is not None
        return max(1.0, self._signal_at + self.grace_period_s - 2.0 - time.monotonic())

    def _work(self) -> None:
        try:
            self.runner.setup()
            reason = self.runner.run()
            timeout = self._deadline_left() if reason == TERMINATED and self._signal_at else 10.0
            self.runner.finish(reason, reporter_timeout_s=timeout)
            self._succeed(reason)
            self.exit_code = 0
        except Abandoned:
            return  # the main thread has ended the attempt
        except BaseException:  # noqa: BLE001 - user code may raise anything; reported, exit 1
            self.exit_code = 1
            self._fail(traceback.format_exc())
        self._done.set()

    def _take_over(self) -> int:
        """SIGTERM during a long ``train()``: checkpoint and end from the main thread."""
        log.warning(
            "train() still running %.0f s after the signal; checkpointing without waiting for it",
            self.grace_period_s / 2,
        )
        try:
            self.runner.finish(TERMINATED, stop_trainable=False, reporter_timeout_s=self._deadline_left())
            self._succeed(TERMINATED)
            return 0
        except Exception:  # noqa: BLE001 - reported, exit 1
            self._fail(traceback.format_exc())
            return 1

    def _succeed(self, reason: str) -> None:
        """Tell the operator how the attempt ended: the outcome JSON in the termination message, with the
        last result (compacted), so nothing completed is lost when the operator was down at the end."""
        runner = self.runner
        write_termination_message(
            json.dumps(
                {
                    "outcome": OUTCOMES[reason],
                    "iteration": runner.trainable.iteration if runner.trainable else 0,
                    "checkpoint": runner.checkpoint_uri,
                    "result": trial_env.compact_result(runner.last_result, runner.env.metric, RESULT_BYTES)
                    if runner.last_result
                    else None,
                }
            )
        )
        attempt_ended(failed=False)  # after the outcome is written: a tracker that does not answer delays only this

    def _fail(self, text: str) -> None:
        log.error("trial failed:\n%s", text)
        write_termination_message(text)
        attempt_ended(failed=True)
        runner = self.runner
        if isinstance(runner, WorkerRunner):  # a worker writes nothing to the trial's folder
            return
        try:
            header = f"Failure in attempt {runner.env.attempt} of trial {runner.env.trial} at {time.ctime()}:\n"
            runner.storage.put_bytes(
                join_uri(runner.env.trial_dir_uri, "error.txt"), (header + tail_bytes(text, _ERROR_TXT_BYTES)).encode()
            )
            runner.results.sync()
        except Exception as exc:  # noqa: BLE001 - the pod is failing already; keep the first error
            log.warning("could not upload error.txt or the result log: %s", type(exc).__name__)
        if runner.trainable is not None:
            try:
                runner.trainable.stop()
            except Exception:  # noqa: BLE001
                log.warning("trainable.stop() failed too", exc_info=True)
        if runner.reporter is not None:
            runner.reporter.close(10.0)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main() -> int:
    """Run the trial attempt described by the environment; return the process exit code."""
    _configure_logging()
    try:
        env = trial_env.read_trial_env()
        grace = env.grace_period_s
        storage = open_storage(env.trial_dir_uri, env.storage_endpoint, env.storage_region)
        reporter = None
        if env.collector_url and env.rank == 0:
            reporter = Reporter(
                env.collector_url,
                env.token,
                namespace=env.namespace,
                experiment=env.experiment,
                trial=env.trial,
                attempt=env.attempt,
            )
            if isinstance(storage, S3Storage):  # a store that does not answer is reported, not only logged
                storage.watch_reachability(lambda message: reporter.set_stall(STORAGE_UNREACHABLE, message))
    except (KeyError, ValueError) as exc:
        message = f"invalid trial environment: {type(exc).__name__}: {exc}"
        log.error(message)
        write_termination_message(message)
        return 2
    log.info(
        "trial %s/%s/%s attempt %d%s, storage %s",
        env.namespace,
        env.experiment,
        env.trial,
        env.attempt,
        f" rank {env.rank} of {env.world_size}" if env.world_size > 1 else "",
        env.trial_dir_uri,
    )
    base = os.environ.get(WORKDIR_VAR) or None
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"kubetune-{env.trial}-", dir=base))
    runner_class = WorkerRunner if env.rank > 0 else TrialRunner
    supervisor = Supervisor(runner_class(env, storage, workdir=workdir, reporter=reporter), grace)
    code = supervisor.run()
    # A step still running in the worker thread is not waited for; nor, in a gang, are the exit handlers of the
    # user's libraries: jax.distributed's shutdown waits for every process at a barrier that a peer blocked in a
    # collective (its partner gone) never reaches. Everything of the attempt is written by now.
    shutil.rmtree(workdir, ignore_errors=True)
    if supervisor.abandoned or env.world_size > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
