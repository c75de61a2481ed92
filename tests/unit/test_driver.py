"""The Experiment's driver pod (``spec.driver``) without a cluster: the journal keeps what the driver has not saved,
the controller creates, replaces and waits for its pod, the collector serves it only with its own token, and its
loop calls Ray's hooks in the journal's order. The restart tests run an Experiment with a driver to its end, calm
and with the operator killed at every kind of instant (and the driver losing what it had not saved): the driver
makes the same calls."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from devcluster.testkit import ConfigMaps
from kubetune.callback import Callback
from kubetune.checkpoint_store import commit_checkpoint
from kubetune.env import DRIVER, DRIVER_CALLBACK_FAILED_EXIT, DRIVER_EVENTS_PATH
from kubetune.logger import JsonLoggerCallback, LoggerCallback
from kubetune.result import SHOULD_CHECKPOINT
from kubetune.runtime.driver import CallbackFailed, DriverState, DriverTrial, deliver
from kubetune.sdk.tuner import driver_callbacks
from kubetune.storage import FileStorage
from kubetune_operator import journal
from kubetune_operator.collector import make_app
from kubetune_operator.driver import MAX_FAILURES, DriverPods, driver_subject
from kubetune_operator.plan import Plan
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.status import experiment_phase
from kubetune_operator.tokens import mint_token
from tests.unit.test_restarts import KEY, SCHEDULERS, Killed, World, killed_and_restored_from_snapshots

DRIVER_SPEC = {"callbacksPickleURI": "s3://b/p/ns/exp/sdk/functions/callbacks.pkl"}


class DriverWorld(World):
    """:class:`World` with ``spec.driver``: its driver pod runs beside the trials and, after every pass, asks
    whichever operator is up for its events, as ``kubetune.runtime.driver`` does (its saved place is the only state
    it keeps; ``forget_every``: every so many requests it dies before saving, and goes on from its saved place)."""

    def __init__(self, spec: dict, kill_at=(), forget_every: int = 0, checkpoint_at: int | None = None):
        self.calls: list[tuple] = []  # (seq, hook, trial, what): each call the driver made, in order
        self.checkpoint_at = checkpoint_at  # its callback sets result[SHOULD_CHECKPOINT] at this training_iteration
        self.saved = json.dumps({"cursor": -1, "trials": {}})  # the driver's state in storage
        self.requests, self.forget_every, self.driver_pods = 0, forget_every, 0
        super().__init__({**spec, "driver": DRIVER_SPEC}, kill_at)

    def boot(self):
        super().boot()
        plan = self.ctl.plan

        def without_the_driver(pods, now=None):  # World's trial pods; the driver pod is this class's
            out = plan(pods, now)
            for manifest in [m for m in out.create_pods if m["metadata"]["labels"]["kubetune.io/trial"] == ""]:
                out.create_pods.remove(manifest)
                secret = out.token_secrets.pop(manifest["metadata"]["name"])
                assert set(secret["stringData"]) == {"token"}
                name = manifest["metadata"]["name"]
                self.pods.setdefault(name, PodView(name, "", int(name.rsplit("-", 1)[1]), "Running"))
                self.driver_pods += 1
            return out

        self.ctl.plan = without_the_driver

    def reconcile(self):
        super().reconcile()
        driver = next((p for p in self.pods.values() if p.trial == ""), None)
        if driver is None or driver.phase != "Running" or not self.ctl.adopted:
            return
        state = DriverState(**json.loads(self.saved))  # the pod's memory: what it saved
        state.trials = {name: DriverTrial(**t) for name, t in state.trials.items()}
        reply = self.ctl.driver_events(state.cursor)
        self.requests += 1
        calls = Calls(self.checkpoint_at)
        deliver([calls], state, reply["events"])
        if self.forget_every and self.requests % self.forget_every == 0 and calls.calls:
            return  # the driver died before it saved: the next one asks from its saved place again
        self.calls += calls.calls
        state.cursor = reply["next"]
        trials = {n: t.as_json() for n, t in state.trials.items()}
        self.saved = json.dumps({"cursor": state.cursor, "trials": trials, "checkpoints": state.checkpoints})
        for trial, ask in state.checkpoints.items():  # sent once saved, as the pod does
            self.answer(lambda: self.ctl.driver_checkpoint(trial, ask))
        if reply["finished"]:
            self.calls.append(("on_experiment_end",))
            driver.phase = "Succeeded"

    def answer(self, send) -> None:
        """``send()`` the driver's answer to whichever operator is up, committing what it journaled (True), until an
        operator answered; the operator may die before the commit."""
        while True:
            try:
                if send():
                    self.maybe_kill(0)
                    self.commit()
                return
            except Killed:
                self.kills += 1
                self.boot()


class Calls(Callback):
    """Records the hooks the driver calls: ``(seq, hook, trial, what)``; with ``checkpoint_at``, sets Ray's
    ``result[SHOULD_CHECKPOINT]`` on each trial's result at that ``training_iteration``."""

    def __init__(self, checkpoint_at: int | None = None):
        self.calls, self.checkpoint_at = [], checkpoint_at

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append((iteration, "start", trial.trial_id, json.dumps(trial.config, sort_keys=True)))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append((iteration, "result", trial.trial_id, json.dumps(result, sort_keys=True)))
        if result.get("training_iteration") == self.checkpoint_at:
            result[SHOULD_CHECKPOINT] = True

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.calls.append((iteration, "complete", trial.trial_id, trial.last_result.get("training_iteration")))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.calls.append((iteration, "error", trial.trial_id, trial.last_result.get("training_iteration")))


def per_trial(calls: list[tuple]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for call in calls[:-1]:
        out.setdefault(call[2], []).append(call[1:])
    return out


@pytest.mark.parametrize("scheduler", ["fifo", "asha", "pbt"])
def test_the_driver_makes_the_same_calls_with_the_operator_killed_at_any_instant(scheduler, monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 2000)  # snapshots delete what they cover
    calm, stormy, expected = killed_and_restored_from_snapshots({"scheduler": SCHEDULERS[scheduler]}, DriverWorld)
    # each trial's start, results and end reach the callbacks once and in order, whatever the kills (the journal may
    # interleave trials otherwise: a pass replanned after a kill creates a trial before or after another's result)
    assert per_trial(stormy.calls) == per_trial(calm.calls) and calm.calls[-1] == stormy.calls[-1] == (
        "on_experiment_end",
    )
    seqs = [call[0] for call in stormy.calls[:-1]]
    assert seqs == sorted(seqs) and len(set(stormy.calls)) == len(stormy.calls)  # the journal's order, each call once
    hooks = [call[1] for call in calm.calls[:-1]]
    assert hooks.count("start") == len(expected) == hooks.count("complete")  # each trial started and ended once
    ends = {call[2]: call[3] for call in calm.calls[:-1] if call[1] == "complete"}
    assert ends == {name: trial["iteration"] for name, trial in expected.items()}
    assert calm.driver_pods == 1 and stormy.driver_pods >= 1


def test_a_callbacks_should_checkpoint_is_the_trials_next_answer_with_the_operator_killed_at_any_instant(monkeypatch):
    """Ray's ``result[SHOULD_CHECKPOINT] = True`` in a driver pod's callback: the trial's attempt gets ``checkpoint``
    for its next batch (its pod saves a checkpoint then), once per ask, killed or not."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 2000)
    spec = {"scheduler": SCHEDULERS["fifo"]}
    calm = DriverWorld(spec, checkpoint_at=3)
    expected = calm.run()
    stormy = DriverWorld(spec, kill_at=range(2, 10_000, 3), checkpoint_at=3)
    assert stormy.run() == expected and stormy.kills >= 5
    assert stormy.decisions == calm.decisions
    asked = {key: d for key, d in calm.decisions.items() if d == "checkpoint"}
    assert {trial for trial, _, _ in asked} == set(expected)  # each trial was told once, after its third result
    assert len(asked) == len(expected) and all(iteration > 3 for _, _, iteration in asked)
    plain = DriverWorld(spec)
    plain.run()
    assert "checkpoint" not in plain.decisions.values()


def test_a_driver_that_dies_before_saving_gets_the_events_again_and_misses_none():
    calm = DriverWorld({"scheduler": SCHEDULERS["asha"]})
    calm.run()
    forgetful = DriverWorld({"scheduler": SCHEDULERS["asha"]}, forget_every=3)
    forgetful.run()
    assert forgetful.calls == calm.calls  # what it lost was asked for again, from its saved place


def test_the_experiment_ends_only_once_the_driver_pod_exited_0():
    world = DriverWorld({})
    world.reconcile = lambda: World.reconcile(world)  # a driver that never asks for its events
    with pytest.raises(AssertionError, match="did not finish"):
        world.run(rounds=60)
    assert world.ctl.exp_status["phase"] == "Running"
    assert "waiting for the driver pod's on_experiment_end" in next(
        c["message"] for c in world.ctl.exp_status["conditions"] if c["type"] == "Running"
    )


def test_entries_the_driver_has_not_saved_outlive_a_snapshot(monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 1)
    store, j = ConfigMaps(), journal.Journal("ns", "exp", "uid-12345678")
    j.keep_for_driver()

    def commit():
        asyncio.run(journal.commit(j, lambda write: store.write("ns", write), lambda: {}))

    for i in range(6):
        j.record(["add", f"exp-{i:05d}"])
        commit()  # each commit takes a snapshot that covers every entry before it
    assert [seq for seq, _ in j.feed_after(-1, 100)] == list(range(6))
    reloaded = journal.Journal("ns", "exp", "uid-12345678")
    reloaded.keep_for_driver()
    snapshot, replay = journal.load(reloaded, store.list())
    assert snapshot is not None and replay == []  # the operator replays from the snapshot ...
    assert [entry for _, entry in reloaded.feed_after(1, 100)] == [["add", f"exp-{i:05d}"] for i in range(2, 6)]
    j.delivered(3)  # ... and the driver, from what it saved
    j.record(["add", "exp-00006"])
    commit()
    stored = sorted(
        k
        for cm in store.items.values()
        for k in cm["data"]
        if cm["metadata"]["labels"]["kubetune.io/state"] == "journal"
    )
    assert int(stored[0]) >= 4 - 1 and j.feed_start == 4
    with pytest.raises(LookupError, match="not kept"):
        j.feed_after(2, 10)


def pod(attempt, phase, exit_code=None, message=None, disruption=None, gone=False):
    return PodView(
        f"exp-driver-{attempt}",
        "",
        attempt,
        phase,
        exit_code=exit_code,
        message=message,
        disruption=disruption,
        gone=gone,
    )


def observed(*pods):
    driver = DriverPods()
    driver.observe({p.name: p for p in pods})
    return driver


def test_a_driver_pod_is_replaced_when_it_fails_or_goes_and_the_experiment_fails_when_a_callback_raised():
    assert observed().next_attempt == 0
    assert observed(pod(0, "Running")).next_attempt is None
    pulling = pod(0, "Pending")
    pulling.waiting = ("ImagePullBackOff", "Back-off pulling image my/img")
    assert observed(pulling).waiting == "exp-driver-0: ImagePullBackOff: Back-off pulling image my/img"
    assert observed(pod(0, "Failed", exit_code=1)).next_attempt == 1
    assert observed(pod(0, "Running", gone=True)).next_attempt == 1
    assert observed(pod(0, "Succeeded", exit_code=0)).done
    message = "Broken.on_trial_result raised ValueError: no\nTraceback ...\nValueError: no"
    raised = observed(pod(0, "Failed", exit_code=DRIVER_CALLBACK_FAILED_EXIT, message=message))
    assert (
        raised.failure == "a callback raised in driver pod exp-driver-0: Broken.on_trial_result raised ValueError: no"
    )
    failures = [pod(i, "Failed", exit_code=1, message="OSError: disk") for i in range(MAX_FAILURES)]
    assert "3 driver pods failed, the last (exp-driver-2, exit code 1): OSError: disk" == observed(*failures).failure
    evicted = [pod(i, "Failed", exit_code=137, disruption="EvictionByEvictionAPI") for i in range(5)]
    assert observed(*evicted).failure is None and observed(*evicted).next_attempt == 5


def test_a_driver_pod_is_asked_for_once_until_it_is_seen(registry_and_controller):
    _, ctl = registry_and_controller
    driver = DriverPods()
    driver.observe({})
    plan = Plan()
    driver.plan(plan, ctl.experiment, ctl.settings, KEY)
    (manifest,) = plan.create_pods
    name = manifest["metadata"]["name"]
    assert name == "exp-driver-0" and manifest["metadata"]["ownerReferences"][0]["kind"] == "Experiment"
    spec = manifest["spec"]
    container = spec["containers"][0]
    assert container["command"] == ["python", "-m", "kubetune.runtime.driver"]
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"]
    assert container["securityContext"]["readOnlyRootFilesystem"] and spec["restartPolicy"] == "Never"
    described = json.loads(next(e["value"] for e in container["env"] if e["name"] == DRIVER))
    assert described["callbacksURI"] == DRIVER_SPEC["callbacksPickleURI"]
    assert described["stateURI"] == "s3://b/p/ns/exp/sdk/driver-01234567.json"
    assert plan.events[-1][2] == "DriverPodCreated"
    again = Plan()
    driver.observe({})
    driver.plan(again, ctl.experiment, ctl.settings, KEY)
    assert again.create_pods == []  # asked for, not seen yet
    driver.not_created(name)
    driver.plan(again, ctl.experiment, ctl.settings, KEY)
    assert [m["metadata"]["name"] for m in again.create_pods] == [name]


def test_a_driver_holds_the_end_and_its_failure_fails_the_experiment():
    counts = {"pending": 0, "running": 0, "paused": 0, "succeeded": 2, "failed": 0, "total": 2}
    ended = experiment_phase(counts, search_finished=True)
    held = experiment_phase(counts, search_finished=True, driver_pending=True)
    assert ended.phase == "Succeeded" and held.phase == "Running" and held.reason == ended.reason
    waiting = experiment_phase(
        counts, search_finished=True, driver_pending=True, driver_waiting="d-0: ErrImagePull: no"
    )
    assert waiting.message.endswith(
        "waiting for the driver pod's on_experiment_end (it cannot start: d-0: ErrImagePull: no)"
    )
    failed = experiment_phase(counts, search_finished=True, driver_failure="a callback raised", driver_pending=True)
    assert (failed.phase, failed.reason, failed.message) == ("Failed", "DriverFailed", "a callback raised")
    running = dict(counts, running=1)
    stopping = experiment_phase(running, driver_failure="a callback raised")
    assert stopping.phase == "Running" and stopping.stop_remaining and "stopping 1 trials" in stopping.message


@pytest.fixture
def registry_and_controller():
    from devcluster.testkit import experiment_object

    reg = Registry(Settings(), KEY, ConfigMaps().write)
    ctl = reg.load(
        experiment_object(
            uid="0123456789-uid",
            config={"x": {"grid_search": [1, 2]}},
            metric="acc",
            mode="max",
            storage={"uri": "s3://b/p"},
            driver=DRIVER_SPEC,
        )
    )
    ctl.adopted = True
    return reg, ctl


def get(registry, token, after="-1", experiment="exp"):
    async def go():
        server = TestServer(make_app(registry))
        await server.start_server()
        try:
            async with ClientSession() as session:
                query = {"namespace": "ns", "experiment": experiment, "after": after}
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(server.make_url(DRIVER_EVENTS_PATH), params=query, headers=headers) as r:
                    return r.status, await r.json()
        finally:
            await server.close()

    return asyncio.run(go())


@pytest.fixture
def trials_added(registry_and_controller):
    """The registry and controller once the first pass has added the Experiment's two trials (committed), and the
    driver's token."""
    registry, ctl = registry_and_controller
    plan = ctl.plan({}, 0.0)
    for manifest in plan.create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    asyncio.run(registry.commit(ctl))
    driver = mint_token(KEY, "ns", driver_subject("exp"), 0, "0123456789-uid")
    return registry, ctl, driver


def test_the_collector_serves_the_driver_its_events_with_its_own_token_only(trials_added):
    registry, _, driver = trials_added
    status, reply = get(registry, driver)
    assert status == 200 and [e["kind"] for e in reply["events"]] == ["add", "add"]
    assert reply["events"][0]["config"] == {"x": 1} and reply["events"][0]["path"].endswith("/exp-00000")
    assert reply["finished"] is False and reply["next"] >= reply["events"][-1]["seq"]
    trial_token = mint_token(KEY, "ns", "exp-00000", 0, "uid-exp-00000")
    assert get(registry, trial_token)[0] == 401
    assert get(registry, mint_token(KEY, "ns", driver_subject("exp"), 0, "another-uid"))[0] == 401
    assert get(registry, driver, after="x")[0] == 400
    assert get(registry, mint_token(KEY, "ns", driver_subject("other"), 0, "u"), experiment="other")[0] == 503


def test_a_driver_request_with_wait_is_answered_when_an_entry_is_committed_or_when_the_wait_is_over(trials_added):
    """The long poll: a driver that has every entry asks with ``wait``; its request is answered once a new entry is
    committed (the trials' results reach its callbacks at once, not at its next request), else after ``wait`` with no
    event; a ``wait`` that is not a number (NaN too) is refused."""
    registry, ctl, driver = trials_added
    headers = {"Authorization": f"Bearer {driver}"}

    async def go():
        server = TestServer(make_app(registry))
        await server.start_server()
        try:
            async with ClientSession() as session:

                async def ask(after, wait):
                    query = {"namespace": "ns", "experiment": "exp", "after": str(after), "wait": wait}
                    started = time.monotonic()
                    async with session.get(server.make_url(DRIVER_EVENTS_PATH), params=query, headers=headers) as r:
                        return r.status, await r.json(), time.monotonic() - started

                _, first, _ = await ask(-1, "0")
                last = first["next"]
                _, idle, idle_s = await ask(last, "0.6")
                waiting = asyncio.ensure_future(ask(last, "10"))
                await asyncio.sleep(0.3)
                ctl.record_results("exp-00000", 0, [{"acc": 0.5, "training_iteration": 1}], None)
                committed = time.monotonic()
                await registry.commit(ctl)
                _, woken, _ = await waiting
                bad = [(await ask(last, wait))[0] for wait in ("soon", "nan")]
                return idle, idle_s, woken, time.monotonic() - committed, bad
        finally:
            await server.close()

    idle, idle_s, woken, woken_s, bad = asyncio.run(go())
    assert idle["events"] == [] and 0.5 <= idle_s < 5
    assert [(e["kind"], e["trial"]) for e in woken["events"]] == [("results", "exp-00000")] and woken_s < 5
    assert bad == [400, 400]


class Recorder(LoggerCallback):
    def __init__(self):
        self.calls = []

    def log_trial_start(self, trial):
        self.calls.append(("start", str(trial), dict(trial.config)))

    def log_trial_result(self, iteration, trial, result):
        self.calls.append(("result", str(trial), result["training_iteration"], result["config"]))

    def log_trial_end(self, trial, failed=False):
        self.calls.append(("end", str(trial), failed, trial.status))


EVENTS = [
    {"seq": 0, "kind": "add", "trial": "exp-00000", "config": {"x": 1}, "path": "s3://b/exp-00000"},
    {"seq": 2, "kind": "results", "trial": "exp-00000", "attempt": 0, "results": [{"training_iteration": 1}]},
    {"seq": 3, "kind": "add", "trial": "exp-00001", "config": {"x": 2}, "path": "s3://b/exp-00001"},
    {"seq": 4, "kind": "end", "trial": "exp-00000", "how": "remove", "result": {"training_iteration": 1}},
    {"seq": 5, "kind": "end", "trial": "exp-00001", "how": "error", "result": None},
]


def test_the_driver_calls_rays_hooks_in_the_journals_order_and_saves_its_place(tmp_path):
    recorder, state = Recorder(), DriverState()
    deliver([recorder, JsonLoggerCallback()], state, EVENTS)
    assert recorder.calls == [
        ("start", "exp-00000", {"x": 1}),
        ("result", "exp-00000", 1, {"x": 1}),
        ("start", "exp-00001", {"x": 2}),
        ("end", "exp-00000", False, "TERMINATED"),  # stopped by a scheduler: Ray's on_trial_complete
        ("end", "exp-00001", True, "ERROR"),
    ]
    assert state.cursor == 5
    uri = f"file://{tmp_path}/driver.json"
    state.save(FileStorage(), uri)
    again = DriverState.load(FileStorage(), uri)
    assert again.cursor == 5 and again.trials["exp-00001"].status == "ERROR" and not again.ended
    assert again.trials["exp-00000"].last_result == {"training_iteration": 1, "config": {"x": 1}}


def test_a_committed_checkpoint_reaches_on_checkpoint_then_on_trial_save_once_as_a_stored_checkpoint(
    trials_added, tmp_path
):
    """A checkpoint a trial's batch carries is journaled once for the driver (a batch sent again carries it again);
    the driver calls ``on_checkpoint`` with a handle that downloads it, then ``on_trial_save`` (a LoggerCallback's
    ``log_trial_save``), as Ray's controller does after a trial's save."""
    registry, ctl, _ = trials_added
    local = tmp_path / "checkpoint_000001"
    local.mkdir()
    (local / "weights.txt").write_text("w=1")
    uri = commit_checkpoint(FileStorage(), local, f"file://{tmp_path}/exp-00000/checkpoint_000001", {"iteration": 1})
    batch = [{"acc": 0.5, "training_iteration": 1}]
    for _ in range(2):  # the same batch twice: a runtime that did not hear the first answer
        ctl.record_results("exp-00000", 0, batch, {"uri": uri, "iteration": 1})
    asyncio.run(registry.commit(ctl))
    events = ctl.driver_events(-1)["events"]
    assert [(e["kind"], e.get("uri")) for e in events] == [
        ("add", None),
        ("add", None),
        ("results", None),
        ("checkpoint", uri),
    ]
    assert events[-1]["iteration"] == 1 and events[-1]["attempt"] == 0

    class Saves(LoggerCallback):
        def __init__(self):
            self.calls = []

        def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
            self.calls.append(("checkpoint", trial.trial_id, (Path(checkpoint.path) / "weights.txt").read_text()))

        def log_trial_save(self, trial):
            self.calls.append(("save", trial.trial_id))

    saves = Saves()
    deliver([saves], DriverState(), events, FileStorage())
    assert saves.calls == [("checkpoint", "exp-00000", "w=1"), ("save", "exp-00000")]


def test_a_callback_that_raises_is_named_and_stops_the_calls():
    class Broken(Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            raise ValueError("no metric")

    recorder, state = Recorder(), DriverState()
    with pytest.raises(CallbackFailed, match="Broken.on_trial_result raised ValueError: no metric"):
        deliver([recorder, Broken()], state, EVENTS)
    assert state.cursor == 0 and len(recorder.calls) == 2  # what came before it was handled


def test_the_sdk_ships_callbacks_and_refuses_what_is_not_one():
    recorder = Recorder()
    assert driver_callbacks([JsonLoggerCallback(), recorder]) == [recorder]  # the pods write result.json anyway
    assert driver_callbacks(None) == []
    with pytest.raises(ValueError, match="callbacks: object is not supported by kubetune: a callback must be a tune"):
        driver_callbacks([object()])
