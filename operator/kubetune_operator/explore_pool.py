"""PB2's explore steps, computed in a worker process so that no Gaussian-process fit holds the event loop.

Owns the worker pool (one process, spawned on first use, so it shares no thread or lock with the operator)
and the job in flight of each Experiment. :func:`step` is called by ``handlers._pass`` before each plan: it
hands a finished job's outcome to the controller (which journals it as an ``explored`` entry; the
exploited trial starts in that pass), then submits the controller's next job, if any. A job's outcome wakes
the Experiment's daemon. Jobs are pure functions of their input
(:func:`kubetune_operator.schedulers.pb2_gp.select`), so one lost with a restarted operator is computed
again with the same outcome. A job that raises, or a worker that dies, gives ``{"error": ...}``: the trial
continues with its donor's config, and the controller posts an ``ExploreFailed`` event.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

__all__ = ["forget", "shutdown", "step"]

_pool: concurrent.futures.ProcessPoolExecutor | None = None
#: (namespace, name) -> (job, future) of the job in flight
_running: dict[tuple[str, str], tuple[dict, asyncio.Future]] = {}


def _select(job: dict) -> dict:
    from kubetune_operator.schedulers.pb2_gp import select  # in the worker: scikit-learn loads there only

    return select(job)


def _exit_with(parent: int) -> None:
    """In the worker: exit once the operator that started it is gone (SIGKILLed operators leave no workers)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_pool() -> concurrent.futures.ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with,
            initargs=(os.getpid(),),
        )
    return _pool


def step(ctl, wake: Callable[[], None]) -> None:
    """Take the finished job of ``ctl``'s Experiment, if any, and submit its next one.

    Args:
        ctl: the Experiment's :class:`~kubetune_operator.controller.ExperimentController`.
        wake: called (on the event loop) when a submitted job ends.
    """
    global _pool
    key = (ctl.namespace, ctl.name)
    running = _running.get(key)
    if running is not None:
        job, future = running
        if not future.done():
            return
        del _running[key]
        wanted = ctl.exploration()
        # a controller loaded again since (a restart of the daemon) may want another job: this outcome is not its
        if wanted is not None and (wanted["trial"], wanted["seed"]) == (job["trial"], job["seed"]):
            try:
                outcome = future.result()
            except BrokenProcessPool as exc:
                _pool = None  # the worker died (out of memory?): the next job starts a new one
                outcome = {"error": f"the explore worker process died: {exc}"}
            except Exception as exc:  # noqa: BLE001 - any failure of the fit ends in the trial's event
                outcome = {"error": f"{type(exc).__name__}: {exc}"}
            ctl.explored(job["trial"], outcome)
    job = ctl.exploration()
    if job is None:
        return
    try:
        future = asyncio.get_running_loop().run_in_executor(_worker_pool(), _select, job)
    except BrokenProcessPool:
        _pool = None
        future = asyncio.get_running_loop().run_in_executor(_worker_pool(), _select, job)
    future.add_done_callback(lambda _: wake())
    _running[key] = (job, future)


def forget(namespace: str, name: str) -> None:
    """Drop the Experiment's job in flight (it was deleted, or it ended)."""
    _running.pop((namespace, name), None)


def shutdown() -> None:
    """Stop the worker (the operator is exiting); a job in flight is computed again by the next operator."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None
