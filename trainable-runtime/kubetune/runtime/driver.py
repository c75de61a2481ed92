"""``python -m kubetune.runtime.driver``: the Experiment's driver pod, where the callbacks Ray runs in its driver run.

Owns the driver's loop (:func:`main`), the trials as its callbacks see them (:class:`DriverTrial`), its saved place
(:class:`DriverState`) and the calls it makes for each event (:func:`deliver`). The operator starts it
(``kubetune_operator.driver``) in the Experiment's image with ``kubetune.env.DRIVER`` and ``KUBETUNE_TOKEN``;
nothing else calls it.

The loop: read the saved state (``stateURI`` in the experiment's storage) and the callbacks the SDK pickled there
(``callbacksURI``, :mod:`kubetune.shipping`), call each callback's ``setup``, then ask the operator's collector for the
journal's events after the saved place (``kubetune.env.DRIVER_EVENTS_PATH``; a request with nothing new waits there for
an entry, up to :data:`WAIT_S`), make the calls of each in order, save the state, and ask again (only a saved place is
ever named to the operator, which may then forget what came before it). When the operator says no event will follow,
call ``on_experiment_end``, save the state as ended and exit 0: the Experiment ends then. A driver started again goes on
from its saved place: an event handled after the last save is handled again (at least once), none is skipped, and
``on_experiment_end`` is not called twice. A callback that raises ends the driver with
``kubetune.env.DRIVER_CALLBACK_FAILED_EXIT`` and the traceback's tail as the termination message (the Experiment fails,
as Ray's run raises); a collector that does not answer, or answers 503 (the operator restarting), is asked again with
back-off.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback

import urllib3

from kubetune.checkpoint_store import StoredCheckpoint
from kubetune.env import DRIVER, DRIVER_CALLBACK_FAILED_EXIT, DRIVER_EVENTS_PATH, TOKEN
from kubetune.runtime.main import write_termination_message
from kubetune.shipping import loads
from kubetune.storage import Storage, open_storage

log = logging.getLogger("kubetune.driver")

#: Seconds a request for events may wait at the collector for one (the long poll), then asked again.
WAIT_S = 10.0
#: Seconds between requests answered at once with nothing new (an operator that does not wait).
POLL_S = 0.5
#: Longest back-off between requests the collector did not answer, in seconds.
MAX_BACKOFF_S = 10.0


class CallbackFailed(Exception):
    """A callback's hook raised; the message names it and holds the traceback."""


class DriverTrial:
    """A trial as the driver's callbacks see it: the attributes of Ray's ``Trial`` that callbacks read.

    Attributes:
        trial_id: the Trial's name (``<experiment>-<index:05d>``); ``str(trial)`` is it.
        config: the trial's config.
        path: URI of the trial's folder in the experiment's storage (``logdir`` and ``local_path`` too).
        status: Ray's ``RUNNING``, ``TERMINATED`` or ``ERROR``.
        last_result: the trial's last result ({} before the first).
    """

    __slots__ = ("trial_id", "config", "path", "status", "last_result")

    def __init__(self, trial_id: str, config: dict, path: str, status: str = "RUNNING", last_result=None):
        self.trial_id, self.config, self.path, self.status = trial_id, config, path, status
        self.last_result = last_result or {}

    @property
    def logdir(self) -> str:
        return self.path

    @property
    def local_path(self) -> str:
        return self.path

    @property
    def experiment_dir_name(self) -> str:
        """The Experiment's name, as Ray names the experiment's folder: read off ``path``, which is
        ``<storage>/<namespace>/<experiment>/<uid[:8]>/<trial>`` (docs/architecture.md, "Object storage layout")."""
        parts = self.path.rstrip("/").split("/")
        return parts[-3] if len(parts) >= 3 else ""

    def __str__(self) -> str:
        return self.trial_id

    def __repr__(self) -> str:
        return f"DriverTrial({self.trial_id!r}, status={self.status})"

    def as_json(self) -> dict:
        return {slot: getattr(self, slot) for slot in self.__slots__}


class DriverState:
    """The driver's saved place: the last journal entry handled, the trials seen, whether the run ended."""

    def __init__(self, cursor: int = -1, trials: dict[str, DriverTrial] | None = None, ended: bool = False):
        self.cursor, self.trials, self.ended = cursor, trials or {}, ended

    @classmethod
    def load(cls, storage: Storage, uri: str) -> "DriverState":
        """The state saved at ``uri``, or a new one when none is."""
        if not storage.exists(uri):
            return cls()
        saved = json.loads(storage.get_bytes(uri))
        trials = {t["trial_id"]: DriverTrial(**t) for t in saved["trials"]}
        return cls(saved["cursor"], trials, saved["ended"])

    def save(self, storage: Storage, uri: str) -> None:
        body = {"cursor": self.cursor, "ended": self.ended, "trials": [t.as_json() for t in self.trials.values()]}
        storage.put_bytes(uri, json.dumps(body, default=str).encode())


def _call(callbacks: list, hook: str, *args, **kwargs) -> None:
    for callback in callbacks:
        try:
            getattr(callback, hook)(*args, **kwargs)
        except Exception as exc:
            raise CallbackFailed(
                f"{type(callback).__name__}.{hook} raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            ) from exc


def deliver(callbacks: list, state: DriverState, events: list[dict], storage: Storage | None = None) -> None:
    """Make the callback calls of ``events`` (``kubetune.env.DRIVER_EVENTS_PATH``'s), in order, as Ray's driver
    makes them: ``on_trial_start`` when a trial is first added, ``on_trial_result`` for each of its results (with its
    ``config``, as Ray's results carry it), ``on_checkpoint`` (with a
    :class:`kubetune.checkpoint_store.StoredCheckpoint` of ``storage``, downloaded when its ``path`` is read) then
    ``on_trial_save`` when it committed a checkpoint, ``on_trial_complete`` when it ends without an error (finished,
    or stopped by a scheduler or stopper) and ``on_trial_error`` when with one; ``iteration`` is the event's journal
    position. ``state`` follows (its trials, its cursor).

    Raises:
        CallbackFailed: a hook raised (the events before it are handled, ``state.cursor`` says up to where).
    """
    for event in events:
        seq, name = event["seq"], event["trial"]
        trial = state.trials.get(name)
        if event["kind"] == "add":
            if trial is None:  # an operator killed before it created a Trial it had journaled adds it again: once
                trial = state.trials[name] = DriverTrial(name, event.get("config") or {}, event.get("path") or "")
                _call(callbacks, "on_trial_start", iteration=seq, trials=list(state.trials.values()), trial=trial)
        elif trial is None:
            log.warning("event %d names trial %s, which was never added: skipped", seq, name)
        elif event["kind"] == "results":
            for result in event["results"]:
                trial.last_result = {**result, "config": trial.config}
                _call(
                    callbacks,
                    "on_trial_result",
                    iteration=seq,
                    trials=list(state.trials.values()),
                    trial=trial,
                    result=trial.last_result,
                )
        elif event["kind"] == "checkpoint":
            checkpoint = StoredCheckpoint(storage, event["uri"]) if storage is not None else None
            trials = list(state.trials.values())
            _call(callbacks, "on_checkpoint", iteration=seq, trials=trials, trial=trial, checkpoint=checkpoint)
            _call(callbacks, "on_trial_save", iteration=seq, trials=trials, trial=trial)
        elif event["kind"] == "end":
            if event.get("result"):
                trial.last_result = {**event["result"], "config": trial.config}
            failed = event.get("how") == "error"
            trial.status = "ERROR" if failed else "TERMINATED"
            hook = "on_trial_error" if failed else "on_trial_complete"
            _call(callbacks, hook, iteration=seq, trials=list(state.trials.values()), trial=trial)
        state.cursor = seq


class EventsClient:
    """Asks the operator's collector for the driver's events.

    Args:
        url: the collector's base URL (``http://`` or ``https://``).
        token: the driver's bearer token.
        namespace, experiment: the Experiment's.
    """

    def __init__(self, url: str, token: str | None, namespace: str, experiment: str):
        self._pool = urllib3.PoolManager(timeout=urllib3.Timeout(total=WAIT_S + 20.0), retries=False)
        self._url = url.rstrip("/") + DRIVER_EVENTS_PATH
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._query = {"namespace": namespace, "experiment": experiment}

    def events(self, after: int) -> dict:
        """The events after ``after``, waiting up to :data:`WAIT_S` at the collector for one; asks again, with
        back-off, until the collector answers 200.

        Raises:
            RuntimeError: the collector refused the driver for good (401, 400, 409): the message says why.
        """
        delay = POLL_S
        while True:
            try:
                reply = self._pool.request(
                    "GET",
                    self._url,
                    fields={**self._query, "after": str(after), "wait": str(WAIT_S)},
                    headers=self._headers,
                )
            except urllib3.exceptions.HTTPError as exc:
                log.warning("collector unreachable (%s); asking again in %.1f s", exc, delay)
            else:
                if reply.status == 200:
                    return json.loads(reply.data)
                if reply.status in (400, 401, 409):
                    raise RuntimeError(f"the collector refused the driver ({reply.status}): {reply.data[:500]!r}")
                log.warning("collector answered %d; asking again in %.1f s", reply.status, delay)
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)


def run(described: dict, token: str | None, storage: Storage | None = None) -> int:
    """Run the driver ``described`` (``kubetune.env.DRIVER``'s JSON) to its end; returns the exit code."""
    storage = storage or open_storage(
        described["stateURI"], described.get("storageEndpoint"), described.get("storageRegion")
    )
    state_uri = described["stateURI"]
    state = DriverState.load(storage, state_uri)
    if state.ended:
        log.info("the run ended already (on_experiment_end was called): nothing to do")
        return 0
    callbacks = list(loads(storage.get_bytes(described["callbacksURI"])))
    client = EventsClient(described["collectorURL"], token, described["namespace"], described["experiment"])
    try:
        samples = described.get("numSamples")
        _call(callbacks, "setup", stop=described.get("stop") or None, num_samples=samples, total_num_samples=samples)
        log.info(
            "driver of %s/%s: %d callbacks, from entry %d",
            described["namespace"],
            described["experiment"],
            len(callbacks),
            state.cursor + 1,
        )
        while True:
            asked = time.monotonic()
            reply = client.events(state.cursor)
            if reply["events"]:
                trials = list(state.trials.values())
                _call(callbacks, "on_step_begin", iteration=reply["events"][0]["seq"], trials=trials)
                deliver(callbacks, state, reply["events"], storage)
                _call(callbacks, "on_step_end", iteration=state.cursor, trials=list(state.trials.values()))
            moved = reply["next"] != state.cursor or reply["events"]
            state.cursor = reply["next"]
            if reply["finished"]:
                _call(callbacks, "on_experiment_end", trials=list(state.trials.values()))
                state.ended = True
                state.save(storage, state_uri)
                log.info("on_experiment_end returned: the driver's work is done")
                return 0
            if moved:
                state.save(storage, state_uri)  # before a request names it: the operator may forget what came before
            elif time.monotonic() - asked < POLL_S:  # answered at once with nothing: not a long poll
                time.sleep(POLL_S)
    except CallbackFailed as exc:
        log.error("%s", exc)
        summary, _, trace = str(exc).partition("\n")  # the operator shows the first line: keep it whole
        write_termination_message(f"{summary[:500]}\n{trace[-3000:]}")
        return DRIVER_CALLBACK_FAILED_EXIT


def main() -> int:
    """Entry point: the driver of the environment's ``kubetune.env.DRIVER``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(json.loads(os.environ[DRIVER]), os.environ.get(TOKEN))
    except Exception as exc:  # noqa: BLE001 - the pod's termination message says why; a new pod goes on
        log.exception("the driver failed")
        write_termination_message(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
