"""``python -m kubetune.runtime.driver``: the Experiment's driver pod, where the callbacks and the searcher Ray runs in
its driver run.

Owns the driver's loop (:func:`main`), the trials as its callbacks see them (:class:`DriverTrial`), its saved place
(:class:`DriverState`), the calls it makes for each event (:func:`deliver`) and its searcher's answers
(:func:`suggest`). The operator starts it (``kubetune_operator.driver``) in the Experiment's image with
``kubetune.env.DRIVER`` and ``KUBETUNE_TOKEN``; nothing else calls it.

The loop: read the saved state (``stateURI`` in the experiment's storage) and the callbacks the SDK pickled there
(``callbacksURI``, :mod:`kubetune.shipping`), call each callback's ``setup``, then ask the operator's collector for the
journal's events after the saved place (``kubetune.env.DRIVER_EVENTS_PATH``; a request with nothing new waits there for
an entry, up to :data:`WAIT_S`), make the calls of each in order, save the state, and ask again (only a saved place is
ever named to the operator, which may then forget what came before it). When the operator says no event will follow,
call ``on_experiment_end``, save the state as ended and exit 0: the Experiment ends then. A driver started again goes on
from its saved place: an event handled after the last save is handled again (at least once), none is skipped, and
``on_experiment_end`` is not called twice. With a searcher of the user's (``searcherURI``), the operator's answer names
the new trial it wants a config for: the driver asks the searcher (``suggest``), saves its state with the answer, then
sends the answer (``kubetune.env.DRIVER_ANSWERS_PATH``) until the operator has journaled it, so a driver started again
asks the searcher once per trial and loses no answer. A callback that sets Ray's ``result[SHOULD_CHECKPOINT]`` has its
request sent the same way, once its place is saved. A callback or searcher that raises ends the driver with
``kubetune.env.DRIVER_CALLBACK_FAILED_EXIT`` and the traceback's tail as the termination message (the Experiment fails,
as Ray's run raises); a collector that does not answer, or answers 503 (the operator restarting), is asked again with
back-off.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import time
import traceback
from typing import Any
from urllib.parse import urlencode

import urllib3

from kubetune.checkpoint_store import StoredCheckpoint
from kubetune.env import DRIVER, DRIVER_ANSWERS_PATH, DRIVER_CALLBACK_FAILED_EXIT, DRIVER_EVENTS_PATH, TOKEN
from kubetune.result import SHOULD_CHECKPOINT
from kubetune.resultkeys import flatten
from kubetune.runtime.main import write_termination_message
from kubetune.search.algorithms import FINISHED
from kubetune.search.sample import Domain, is_grid
from kubetune.shipping import dumps, loads, sampled_as_json
from kubetune.storage import Storage, open_storage

log = logging.getLogger("kubetune.driver")

#: Seconds a request for events may wait at the collector for one (the long poll), then asked again.
WAIT_S = 10.0
#: Seconds between requests answered at once with nothing new (an operator that does not wait).
POLL_S = 0.5
#: Longest back-off between requests the collector did not answer, in seconds.
MAX_BACKOFF_S = 10.0


class CallbackFailed(Exception):
    """A callback's or the searcher's hook raised (or the searcher answered what no config is); the message names the
    hook and holds the traceback."""


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
    """The driver's saved place: the last journal entry handled, the trials seen, whether the run ended, and with a
    searcher of the user's (``searcherURI``) the searcher itself (pickled: what it learned), its answers the operator
    has not taken yet (``unacked``, trial -> config or ``FINISHED``) and the trials it answered that were not added
    yet (``answered``), so a driver started again neither asks it twice for a trial nor loses an answer."""

    def __init__(
        self,
        cursor: int = -1,
        trials: dict[str, DriverTrial] | None = None,
        ended: bool = False,
        searcher: Any = None,
        unacked: dict | None = None,
        answered: set | None = None,
        checkpoints: dict | None = None,
    ):
        self.cursor, self.trials, self.ended = cursor, trials or {}, ended
        self.searcher, self.unacked, self.answered = searcher, unacked or {}, answered or set()
        self.checkpoints = checkpoints or {}  # trial -> [attempt, iteration]: a callback's SHOULD_CHECKPOINT, unsent

    @classmethod
    def load(cls, storage: Storage, uri: str) -> "DriverState":
        """The state saved at ``uri``, or a new one when none is."""
        if not storage.exists(uri):
            return cls()
        saved = json.loads(storage.get_bytes(uri))
        trials = {t["trial_id"]: DriverTrial(**t) for t in saved["trials"]}
        searcher = saved.get("searcher")
        searcher = loads(base64.b64decode(searcher)) if searcher else None
        unacked, answered = saved.get("unacked") or {}, set(saved.get("answered") or ())
        return cls(saved["cursor"], trials, saved["ended"], searcher, unacked, answered, saved.get("checkpoints"))

    def save(self, storage: Storage, uri: str) -> None:
        body = {"cursor": self.cursor, "ended": self.ended, "trials": [t.as_json() for t in self.trials.values()]}
        if self.checkpoints:
            body["checkpoints"] = self.checkpoints
        if self.searcher is not None:
            body.update(
                searcher=base64.b64encode(dumps(self.searcher)).decode(),
                unacked=self.unacked,
                answered=sorted(self.answered),
            )
        storage.put_bytes(uri, json.dumps(body, default=str).encode())


def _call(callbacks: list, hook: str, *args, into: list | None = None, **kwargs) -> None:
    """Call ``hook`` of each of ``callbacks`` (a callback, or the searcher), appending what it returns to ``into``.

    Raises:
        CallbackFailed: a hook raised; the message names it and holds the traceback.
    """
    for callback in callbacks:
        try:
            returned = getattr(callback, hook)(*args, **kwargs)
            if into is not None:
                into.append(returned)
        except Exception as exc:
            raise CallbackFailed(
                f"{type(callback).__name__}.{hook} raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            ) from exc


def deliver(callbacks: list, state: DriverState, events: list[dict], storage: Storage | None = None) -> None:
    """Make the callback and searcher calls of ``events`` (``kubetune.env.DRIVER_EVENTS_PATH``'s), in order, as
    Ray's driver makes them: ``on_trial_start`` when a trial is first added, ``on_trial_result`` for each of its
    results (with its ``config``, as Ray's results carry it), ``on_checkpoint`` (with a
    :class:`kubetune.checkpoint_store.StoredCheckpoint` of ``storage``, downloaded when its ``path`` is read) then
    ``on_trial_save`` when it committed a checkpoint, ``on_trial_complete`` when it ends without an error (finished,
    or stopped by a scheduler or stopper) and ``on_trial_error`` when with one; ``iteration`` is the event's journal
    position. ``state.searcher``, when there is one, is told first, as Ray's controller tells its search algorithm
    before the callbacks: ``on_trial_result(trial_id, result)`` with each result flattened (``config/x`` keys),
    ``on_trial_complete(trial_id, result=<last result, flattened>)`` for a trial that finished or was stopped,
    ``error=True`` without a result for one that failed, or neither for one that ended before it reported.
    ``state`` follows (its trials, its cursor, the searcher's answers the operator journaled).

    Raises:
        CallbackFailed: a hook raised (the events before it are handled, ``state.cursor`` says up to where).
    """
    searcher = [state.searcher] if state.searcher is not None else []
    for event in events:
        seq, name = event["seq"], event["trial"]
        trial = state.trials.get(name)
        if event["kind"] == "suggested":
            state.unacked.pop(name, None)  # journaled: the operator has it
            state.answered.add(name)
        elif event["kind"] == "add":
            state.answered.discard(name)
            if trial is None:  # an operator killed before it created a Trial it had journaled adds it again: once
                trial = state.trials[name] = DriverTrial(name, event.get("config") or {}, event.get("path") or "")
                _call(callbacks, "on_trial_start", iteration=seq, trials=list(state.trials.values()), trial=trial)
        elif trial is None:
            log.warning("event %d names trial %s, which was never added: skipped", seq, name)
        elif event["kind"] == "results":
            for result in event["results"]:
                trial.last_result = {**result, "config": trial.config}
                _call(searcher, "on_trial_result", trial.trial_id, flatten(trial.last_result))
                _call(
                    callbacks,
                    "on_trial_result",
                    iteration=seq,
                    trials=list(state.trials.values()),
                    trial=trial,
                    result=trial.last_result,
                )
                if trial.last_result.get(SHOULD_CHECKPOINT):  # a callback asks for a checkpoint, as in Ray's driver
                    state.checkpoints[name] = [event["attempt"], result.get("training_iteration")]
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
            if failed:
                _call(searcher, "on_trial_complete", trial.trial_id, error=True)
            elif event.get("result"):  # finished, or stopped (by a scheduler, a stopper, the Experiment's end)
                _call(searcher, "on_trial_complete", trial.trial_id, result=flatten(trial.last_result))
            else:  # ended before it reported anything
                _call(searcher, "on_trial_complete", trial.trial_id)
            hook = "on_trial_error" if failed else "on_trial_complete"
            _call(callbacks, hook, iteration=seq, trials=list(state.trials.values()), trial=trial)
        state.cursor = seq


def suggest(state: DriverState, trial: str, space: Any) -> None:
    """Ask ``state.searcher`` for ``trial``'s config, as Ray's ``SearchGenerator`` does: a config is merged into
    the constants of the run's ``space`` (its ``param_space``; the searcher's values win) and kept in
    ``state.unacked`` until the operator journals it, as is ``FINISHED``; None ("not now") keeps nothing.

    Raises:
        CallbackFailed: ``suggest`` raised, or gave something other than a dict, None or ``FINISHED``, or a config
            JSON would not carry back equal (:func:`kubetune.shipping.sampled_as_json`: the operator keeps it as the
            Trial's config).
    """
    searcher = state.searcher
    name = f"{type(searcher).__name__}.suggest"
    answers: list = []
    _call([searcher], "suggest", trial, into=answers)
    (answer,) = answers
    if answer is None:
        return
    if answer != FINISHED:
        config = sampled_as_json(merge_dicts(constants(space), answer)) if isinstance(answer, dict) else None
        if config is None:
            raise CallbackFailed(
                f"{name} returned {answer!r:.200}: a config is a dict of JSON values (strings as keys, finite numbers,"
                " at most 192 KiB), None or Searcher.FINISHED"
            )
        answer = config
    state.unacked[trial] = answer
    state.answered.add(trial)


def constants(space: Any) -> Any:
    """``space`` without its domains, ``grid_search`` markers and ``sample_from`` functions: what Ray's merge of a
    suggested config into the run's config keeps of it."""
    if isinstance(space, dict):
        return {k: constants(v) for k, v in space.items() if not (isinstance(v, Domain) or is_grid(v))}
    return space


def merge_dicts(base: Any, update: dict) -> dict:
    """``update`` deep-merged into ``base`` (Ray's ``merge_dicts``: a key of both whose values are dicts merges)."""
    merged = dict(base) if isinstance(base, dict) else {}
    for key, value in update.items():
        merged[key] = (
            merge_dicts(merged[key], value) if isinstance(merged.get(key), dict) and isinstance(value, dict) else value
        )
    return merged


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
        self._answers_url = url.rstrip("/") + DRIVER_ANSWERS_PATH
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._query = {"namespace": namespace, "experiment": experiment}

    def events(self, after: int, declined: str | None = None) -> dict:
        """The events after ``after``, waiting up to :data:`WAIT_S` at the collector for one (``declined``: the
        trial the searcher answered "not now" for, which alone does not end the wait); asks again, with back-off,
        until the collector answers 200.

        Raises:
            RuntimeError: the collector refused the driver for good (401, 400, 409): the message says why.
        """
        query = {**self._query, "after": str(after), "wait": str(WAIT_S)}
        if declined is not None:
            query["declined"] = declined
        return self._request("GET", self._url + "?" + urlencode(query))

    def answers(self, suggestions: dict, checkpoints: dict) -> list[str]:
        """Send the searcher's ``suggestions`` (trial -> config or ``FINISHED``) and the callbacks' ``checkpoints``
        requests (trial -> ``[attempt, iteration]``); returns the trials whose suggestion the operator took
        (journaled), asking again with back-off until the collector answers 200 (every request then journaled or
        stale).

        Raises:
            RuntimeError: as :meth:`events`.
        """
        url = self._answers_url + "?" + urlencode(self._query)
        body = {"suggestions": suggestions, "checkpoints": checkpoints}
        return self._request("POST", url, json.dumps(body).encode())["taken"]

    def _request(self, method: str, url: str, body: bytes | None = None) -> dict:
        delay = POLL_S
        headers = {**self._headers, "Content-Type": "application/json"} if body is not None else self._headers
        while True:
            try:
                reply = self._pool.request(method, url, body=body, headers=headers)
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
    callbacks = list(loads(storage.get_bytes(described["callbacksURI"]))) if described.get("callbacksURI") else []
    space = None
    if described.get("searcherURI"):
        shipped = loads(storage.get_bytes(described["searcherURI"]))  # set_search_properties was called by the SDK
        space = shipped["paramSpace"]
        if state.searcher is None:  # a driver started again has the one it saved, with what it learned
            state.searcher = shipped["searcher"]
    client = EventsClient(described["collectorURL"], token, described["namespace"], described["experiment"])
    try:
        samples = described.get("numSamples")
        _call(callbacks, "setup", stop=described.get("stop") or None, num_samples=samples, total_num_samples=samples)
        log.info(
            "driver of %s/%s: %d callbacks%s, from entry %d",
            described["namespace"],
            described["experiment"],
            len(callbacks),
            f", searcher {type(state.searcher).__name__}" if state.searcher is not None else "",
            state.cursor + 1,
        )
        declined = None
        while True:
            asked = time.monotonic()
            reply = client.events(state.cursor, declined)
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
            wanted, declined = reply.get("suggest"), None
            if wanted and state.searcher is not None and wanted not in state.answered and wanted not in state.trials:
                suggest(state, wanted, space)
                moved = moved or wanted in state.answered
                declined = None if wanted in state.answered else wanted
            if moved:
                # before a request names the cursor (the operator may forget what came before) and before an answer
                # leaves (a driver started again must not ask its searcher for that trial twice)
                state.save(storage, state_uri)
            elif time.monotonic() - asked < POLL_S and not state.unacked:  # answered at once with nothing
                time.sleep(POLL_S)
            if state.unacked or state.checkpoints:
                for trial in client.answers(state.unacked, state.checkpoints):
                    state.unacked.pop(trial, None)
                state.checkpoints = {}  # journaled, or stale (that attempt ended): a new pod would not send them
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
