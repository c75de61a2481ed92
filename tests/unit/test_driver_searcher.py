"""A searcher of the user's in the Experiment's driver pod (``spec.searchAlgorithm.name: driver``) without a cluster:
the operator asks the pod for each new trial's config and journals each answer before it creates the Trial; the pod
(the real loop's functions: :func:`kubetune.runtime.driver.deliver` and :func:`kubetune.runtime.driver.suggest`,
its state saved in storage) tells the searcher every result and end in the journal's order. Killed at every kind of
instant, the operator, and the driver pod dying before or after it saved, give the configs, trials and searcher state
of an uninterrupted run; the collector takes only the answer it asked for."""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

import kubetune as tune
from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.env import DRIVER, DRIVER_ANSWERS_PATH, DRIVER_EVENTS_PATH
from kubetune.runtime.driver import CallbackFailed, DriverState, deliver, suggest
from kubetune.sdk.tuner import build_experiment, driver_searcher
from kubetune.search import Searcher
from kubetune.shipping import dumps, loads
from kubetune.storage import FileStorage
from kubetune_operator import journal
from kubetune_operator.collector import make_app
from kubetune_operator.driver import DriverPods, driver_subject
from kubetune_operator.plan import Plan
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.tokens import mint_token
from tests.unit.test_driver import DriverWorld
from tests.unit.test_restarts import KEY, SCHEDULERS, World

SEARCHER_SPEC = {"searcherPickleURI": "s3://b/p/ns/exp/sdk/functions/searcher.pkl"}
#: The run's param_space: the searcher draws x; y is a constant Ray merges into each suggested config.
SPACE = {"x": tune.uniform(0, 1), "y": 2}
CONFIGS = 10  # the searcher says FINISHED after this many (numSamples is 12)


class Climber(Searcher):
    """A searcher as a Ray user writes one: each config a step from the best completed trial's ``x`` (seeded by the
    count of configs), "not now" while 3 trials run, FINISHED after :data:`CONFIGS`; it keeps every call it got."""

    def __init__(self):
        super().__init__(metric="score", mode="max")
        self.best, self.live, self.count, self.seen, self.suggested = (0.5, -math.inf), {}, 0, [], []

    def suggest(self, trial_id):
        if self.count >= CONFIGS:
            return Searcher.FINISHED
        if len(self.live) >= 3:
            return None
        step = random.Random(self.count).uniform(-0.2, 0.2)
        self.count += 1
        self.live[trial_id] = {"x": round(min(max(self.best[0] + step, 0.0), 1.0), 6)}
        self.suggested.append((trial_id, dict(self.live[trial_id])))
        return dict(self.live[trial_id])

    def on_trial_result(self, trial_id, result):
        self.seen.append(("result", trial_id, result["training_iteration"], result["config/y"]))

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.seen.append(("complete", trial_id, result and result["training_iteration"], error))
        config = self.live.pop(trial_id)
        if result and result["score"] > self.best[1]:
            self.best = (config["x"], result["score"])


class SearcherWorld(DriverWorld):
    """:class:`DriverWorld` whose driver pod runs :class:`Climber` as ``kubetune.runtime.driver`` does: after every
    pass it asks for its events, tells the searcher, answers the trial the operator asks for, saves its state in
    storage, then sends the answers it has not seen journaled (to whichever operator is up). ``lose_every``: every so
    many requests it dies before saving; ``die_every``: after saving, before sending."""

    def __init__(self, spec: dict, kill_at=(), tmp=None, lose_every: int = 0, die_every: int = 0):
        self.storage, self.uri = FileStorage(), f"file://{tmp}/driver.json"
        self.lose_every, self.die_every, self.asked = lose_every, die_every, []
        fresh = DriverState(searcher=Climber())
        fresh.save(self.storage, self.uri)
        self.calls, self.requests, self.forget_every, self.driver_pods = [], 0, 0, 0
        driver_spec = {"searchAlgorithm": {"name": "driver"}, "driver": SEARCHER_SPEC}
        World.__init__(self, {**spec, **driver_spec}, kill_at)

    def reconcile(self):
        World.reconcile(self)
        driver = next((p for p in self.pods.values() if p.trial == ""), None)
        if driver is None or driver.phase != "Running" or not self.ctl.adopted:
            return
        state = DriverState.load(self.storage, self.uri)
        reply = self.ctl.driver_events(state.cursor)
        self.requests += 1
        deliver([], state, reply["events"])
        state.cursor = reply["next"]
        if reply["finished"]:
            driver.phase = "Succeeded"
            state.ended = True
            state.save(self.storage, self.uri)
            return
        wanted = reply["suggest"]
        if wanted and wanted not in state.answered and wanted not in state.trials:
            suggest(state, wanted, SPACE)
            self.asked.append(wanted)
        if self.lose_every and self.requests % self.lose_every == 0:
            return  # died before saving: the next one goes on from the saved state, searcher and all
        state.save(self.storage, self.uri)
        if self.die_every and self.requests % self.die_every == 0:
            return  # died after saving: the next one sends the saved answers
        for trial, answer in list(state.unacked.items()):
            self.answer(lambda: self.ctl.driver_suggested(trial, answer))

    def searcher(self) -> Climber:
        return DriverState.load(self.storage, self.uri).searcher


@pytest.mark.parametrize("scheduler", ["fifo", "asha"])
def test_a_searcher_in_the_driver_pod_decides_as_an_uninterrupted_run_with_the_operator_killed_at_any_instant(
    scheduler, tmp_path, monkeypatch
):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 1500)  # restarts load the searcher's snapshot too
    spec = {"scheduler": SCHEDULERS[scheduler]}
    calm = SearcherWorld(spec, tmp=_folder(tmp_path, "calm"))
    expected = calm.run()
    stormy = SearcherWorld(spec, kill_at=range(2, 10_000, 3), tmp=_folder(tmp_path, "stormy"))
    assert stormy.run() == expected
    assert stormy.kills >= 5 and stormy.decisions == calm.decisions
    assert len(expected) == CONFIGS  # FINISHED ended the search before numSamples
    climber = calm.searcher()
    assert vars(stormy.searcher()) == vars(climber)  # it learned the same, in the same order
    _check_searcher(climber, expected)
    assert len(set(calm.asked)) == len(calm.asked) == CONFIGS + 1  # one ask per trial, and the one for FINISHED
    if scheduler == "asha":
        assert any(t["reason"] == "EarlyStopped" for t in expected.values())


def test_a_driver_pod_that_dies_before_or_after_saving_asks_its_searcher_once_per_trial_and_loses_no_answer(
    tmp_path, monkeypatch
):
    """The pod dying before it saved (what its searcher learned since is lost with it, and learned again from the
    same events) or after (its answers are sent by the next pod) changes when an answer comes, so an adaptive
    searcher may answer other configs than in a calm run; it is never asked twice for a trial, every answer it gave
    is a Trial's config, and it hears each result and end once."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 1500)
    spec = {"scheduler": SCHEDULERS["asha"]}
    stormy = SearcherWorld(
        spec, kill_at=range(2, 10_000, 3), tmp=_folder(tmp_path, "stormy"), lose_every=4, die_every=5
    )
    outcome = stormy.run()
    assert len(outcome) == CONFIGS and stormy.kills >= 5
    _check_searcher(stormy.searcher(), outcome)


def _folder(tmp_path, name: str):
    (tmp_path / name).mkdir()
    return tmp_path / name


def _check_searcher(climber: Climber, outcome: dict) -> None:
    """What ``climber`` (the driver pod's searcher as last saved) gave and heard fits the Trials' ``outcome``: each
    Trial's config is its answer for that trial merged into the space's constants, it heard each trial's results in
    order (with the merged config) and its end once."""
    assert [t["config"] for t in outcome.values()] == [dict(c, y=2) for _, c in climber.suggested]
    assert [trial for trial, _ in climber.suggested] == sorted(outcome)
    for name, trial in outcome.items():
        heard = [s for s in climber.seen if s[1] == name]
        results = [s[2] for s in heard if s[0] == "result"]
        assert results == sorted(set(results)) and all(s[3] == 2 for s in heard if s[0] == "result")
        assert [s[0] for s in heard].count("complete") == 1 and heard[-1][:3] == ("complete", name, trial["iteration"])
    assert climber.live == {}


@pytest.fixture
def registry_and_controller():
    registry = Registry(Settings(), KEY, ConfigMaps().write)
    ctl = registry.load(
        experiment_object(
            uid="0123456789-uid",
            config={"x": {"uniform": [0, 1]}},
            numSamples=2,
            metric="acc",
            mode="max",
            storage={"uri": "s3://b/p"},
            searchAlgorithm={"name": "driver"},
            driver=SEARCHER_SPEC,
        )
    )
    ctl.adopted = True
    return registry, ctl


def call(registry, method, path, query, body=None, token=None):
    async def go():
        server = TestServer(make_app(registry))
        await server.start_server()
        try:
            async with ClientSession() as session:
                headers = {"Authorization": f"Bearer {token}"}
                async with session.request(
                    method, server.make_url(path), params=query, json=body, headers=headers
                ) as r:
                    return r.status, await r.json()
        finally:
            await server.close()

    return asyncio.run(go())


def test_the_collector_tells_the_driver_the_trial_it_wants_and_journals_only_that_answer(registry_and_controller):
    registry, ctl = registry_and_controller
    token = mint_token(KEY, "ns", driver_subject("exp"), 0, "0123456789-uid")
    plan = ctl.plan({}, 0.0)
    assert plan.create_trials == []  # no config until the driver pod's searcher answers
    pulling = PodView("exp-driver-0", "", 0, "Pending")
    pulling.waiting = ("ImagePullBackOff", "Back-off pulling image my/img")
    shown = ctl.plan({"exp-driver-0": pulling}, 20.0).experiment_status  # the next status write
    running = next(c for c in shown["conditions"] if c["type"] == "Running")
    assert running["message"].endswith(
        "waiting for the driver pod's searcher to suggest the config of exp-00000 (it cannot start: "
        "exp-driver-0: ImagePullBackOff: Back-off pulling image my/img)"
    )
    query = {"namespace": "ns", "experiment": "exp", "after": "-1", "wait": "0"}
    status, reply = call(registry, "GET", DRIVER_EVENTS_PATH, query, token=token)
    assert status == 200 and reply["suggest"] == "exp-00000" and not reply["finished"]
    where = {"namespace": "ns", "experiment": "exp"}
    answers = {"suggestions": {"exp-00001": {"x": 0.9}, "exp-00000": {"x": 0.25}}}
    status, taken = call(registry, "POST", DRIVER_ANSWERS_PATH, where, answers, token=token)
    assert status == 200 and taken == {"taken": ["exp-00000"]}  # only the trial asked for
    again = call(registry, "POST", DRIVER_ANSWERS_PATH, where, answers, token=token)
    assert again == (200, {"taken": []})  # sent again: journaled once
    bad = {"suggestions": {"exp-00000": [1, 2]}}
    assert call(registry, "POST", DRIVER_ANSWERS_PATH, where, bad, token=token)[0] == 400
    trial_token = mint_token(KEY, "ns", "exp-00000", 0, "uid")
    assert call(registry, "POST", DRIVER_ANSWERS_PATH, where, answers, token=trial_token)[0] == 401
    plan = ctl.plan({}, 21.0)
    (created,) = plan.create_trials
    assert created["metadata"]["name"] == "exp-00000" and created["spec"]["config"] == {"x": 0.25}
    status, reply = call(registry, "GET", DRIVER_EVENTS_PATH, query, token=token)
    kinds = [(e["kind"], e["trial"]) for e in reply["events"]]
    assert kinds == [("suggested", "exp-00000")] and reply["events"][0]["suggestion"] == {"x": 0.25}
    assert reply["suggest"] == "exp-00001"
    assert ctl.driver_suggested("exp-00001", "FINISHED") is True
    assert ctl.plan({}, 22.0).create_trials == [] and ctl.decisions.searcher_finished
    with pytest.raises(ValueError, match="a config"):
        ctl.driver_suggested("exp-00002", "later")
    ctl.trial_created("exp-00000", "uid-exp-00000")
    asks = {"checkpoints": {"exp-00000": [0, 1]}}  # a callback's result[SHOULD_CHECKPOINT] on the trial's result 1
    assert call(registry, "POST", DRIVER_ANSWERS_PATH, where, asks, token=token) == (200, {"taken": []})
    assert ctl.decisions.checkpoint_asks == {"exp-00000": [0, 1, True]}
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.1, "training_iteration": 1}], None) == "checkpoint"
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.2, "training_iteration": 2}], None) == "continue"
    assert ctl.driver_checkpoint("exp-00000", [0, 1]) is False  # sent again: taken once
    bad = {"checkpoints": {"exp-00000": "soon"}}
    assert call(registry, "POST", DRIVER_ANSWERS_PATH, where, bad, token=token)[0] == 400


def test_the_driver_pod_is_told_where_the_searcher_is():
    registry = Registry(Settings(), KEY, ConfigMaps().write)
    spec = {"callbacksPickleURI": "s3://b/c.pkl", **SEARCHER_SPEC}
    ctl = registry.load(
        experiment_object(
            uid="0123456789-uid", storage={"uri": "s3://b/p"}, searchAlgorithm={"name": "driver"}, driver=spec
        )
    )
    driver, plan = DriverPods(), Plan()
    driver.observe({})
    driver.plan(plan, ctl.experiment, ctl.settings, KEY)
    env = plan.create_pods[0]["spec"]["containers"][0]["env"]
    described = json.loads(next(e["value"] for e in env if e["name"] == DRIVER))
    assert (
        described["searcherURI"] == SEARCHER_SPEC["searcherPickleURI"] and described["callbacksURI"] == "s3://b/c.pkl"
    )
    assert "(spec.driver's callbacks and searcher)" in plan.events[-1][3]


def test_a_spec_with_a_driver_searcher_needs_its_pickle_and_the_other_way_round():
    registry = Registry(Settings(), KEY, ConfigMaps().write)
    for spec in ({"searchAlgorithm": {"name": "driver"}}, {"driver": SEARCHER_SPEC}):
        with pytest.raises(Exception, match="searchAlgorithm driver and driver.searcherPickleURI go together"):
            registry.load(experiment_object(uid="u-1234567890", storage={"uri": "s3://b/p"}, **spec))


class Fixed(Searcher):
    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def suggest(self, trial_id):
        return self.answer

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass


def test_the_pod_merges_a_suggestion_into_the_constants_of_the_space_and_refuses_what_no_config_is():
    state = DriverState(searcher=Fixed({"x": 0.5, "nested": {"b": 2}}))
    suggest(state, "exp-00000", {"x": tune.uniform(0, 1), "y": 3, "nested": {"a": 1, "c": tune.choice([1])}})
    assert state.unacked == {"exp-00000": {"x": 0.5, "y": 3, "nested": {"a": 1, "b": 2}}}
    assert state.answered == {"exp-00000"}
    state = DriverState(searcher=Fixed(None))
    suggest(state, "exp-00000", {})
    assert state.unacked == {} and state.answered == set()  # "not now": asked again later
    state = DriverState(searcher=Fixed(Searcher.FINISHED))
    suggest(state, "exp-00000", {})
    assert state.unacked == {"exp-00000": "FINISHED"}
    for bad in ([0.5], {"x": float("nan")}, {"x": object()}):
        with pytest.raises(CallbackFailed, match="Fixed.suggest returned"):
            suggest(DriverState(searcher=Fixed(bad)), "exp-00000", {})


def test_the_searcher_hears_results_flattened_and_ends_as_rays_controller_tells_it(tmp_path):
    class Heard(Fixed):
        def __init__(self):
            super().__init__(None)
            self.heard = []

        def on_trial_result(self, trial_id, result):
            self.heard.append(("result", trial_id, result))

        def on_trial_complete(self, trial_id, result=None, error=False):
            self.heard.append(("complete", trial_id, result, error))

    state = DriverState(searcher=Heard())
    events = [
        {"seq": 0, "kind": "suggested", "trial": "exp-00000", "suggestion": {"x": 1}},
        {"seq": 1, "kind": "add", "trial": "exp-00000", "config": {"x": 1}, "path": "s3://b/exp-00000"},
        {"seq": 2, "kind": "add", "trial": "exp-00001", "config": {"x": 2}, "path": "s3://b/exp-00001"},
        {"seq": 3, "kind": "add", "trial": "exp-00002", "config": {"x": 3}, "path": "s3://b/exp-00002"},
        {"seq": 4, "kind": "results", "trial": "exp-00000", "attempt": 0, "results": [{"training_iteration": 1}]},
        {"seq": 5, "kind": "end", "trial": "exp-00000", "how": "complete", "result": {"training_iteration": 1}},
        {"seq": 6, "kind": "end", "trial": "exp-00001", "how": "error", "result": None},
        {"seq": 7, "kind": "end", "trial": "exp-00002", "how": "remove", "result": None},
    ]
    state.unacked["exp-00000"] = {"x": 1}
    deliver([], state, events)
    flat = {"training_iteration": 1, "config/x": 1}
    assert state.searcher.heard == [
        ("result", "exp-00000", flat),
        ("complete", "exp-00000", flat, False),
        ("complete", "exp-00001", None, True),  # Ray: on_trial_complete(trial_id, error=True)
        ("complete", "exp-00002", None, False),  # ended before it reported: on_trial_complete(trial_id)
    ]
    assert state.unacked == {} and state.answered == set()  # journaled, then added
    uri = f"file://{tmp_path}/driver.json"
    state.save(FileStorage(), uri)
    assert DriverState.load(FileStorage(), uri).searcher.heard == state.searcher.heard  # saved with what it learned


def test_the_sdk_ships_a_searcher_of_the_users_to_the_driver_pod_as_ray_sets_it_up():
    class Spaced(Fixed):
        def __init__(self):
            super().__init__(None)
            self.given = None

        def set_search_properties(self, metric, mode, config, **spec):
            self.given = (metric, mode, config)
            return True

    searcher = Spaced()
    manifest = build_experiment(
        "exp", "m:T", config={"x": tune.uniform(0, 1)}, metric="acc", mode="max", search_alg=searcher, storage="s3://b"
    )
    assert manifest["spec"]["searchAlgorithm"] == {"name": "driver"}
    assert driver_searcher(searcher, manifest["spec"], {"x": 1}) is searcher and searcher.given == (
        "acc",
        "max",
        {"x": 1},
    )
    with pytest.raises(ValueError, match="unresolved parameters, but the search algorithm was already instantiated"):
        driver_searcher(Fixed(None), manifest["spec"], {"x": tune.uniform(0, 1)})
    assert driver_searcher(Fixed(None), manifest["spec"], {"x": 1}).metric is None  # constants only: as Ray
    limited = build_experiment("exp", "m:T", search_alg=tune.search.ConcurrencyLimiter(Spaced(), 2), storage="s3://b")
    assert limited["spec"]["maxConcurrentTrials"] == 2 and limited["spec"]["searchAlgorithm"] == {"name": "driver"}


def test_optuna_search_over_a_define_by_run_function_is_a_searcher_for_the_driver_pod():
    import optuna

    def space(trial):
        activation = trial.suggest_categorical("activation", ["relu", "tanh"])
        trial.suggest_float("model/width", 0, 20)
        if activation == "relu":
            trial.suggest_float("mult", 1, 2)
        return {"steps": 3}

    searcher = tune.search.OptunaSearch(space=space, metric="loss", mode="min", seed=5)
    assert type(searcher).__name__ == "DefineByRunOptunaSearch" and not searcher.name  # shipped to the driver pod
    manifest = build_experiment("exp", "m:T", search_alg=searcher, storage="s3://b", metric="loss", mode="min")
    assert manifest["spec"]["searchAlgorithm"] == {"name": "driver"}
    state = DriverState(searcher=searcher)
    for i in range(6):
        suggest(state, f"exp-{i:05d}", {})
    configs = list(state.unacked.values())
    assert all(c["steps"] == 3 and 0 <= c["model"]["width"] <= 20 for c in configs)
    assert all(("mult" in c) == (c["activation"] == "relu") for c in configs)  # conditional, as the function says
    events = [
        {"seq": i, "kind": "add", "trial": f"exp-{i:05d}", "config": configs[i], "path": "s3://b"} for i in range(3)
    ] + [
        {
            "seq": 3,
            "kind": "results",
            "trial": "exp-00000",
            "attempt": 0,
            "results": [{"training_iteration": 1, "loss": 2.0}],
        },
        {
            "seq": 4,
            "kind": "end",
            "trial": "exp-00000",
            "how": "complete",
            "result": {"loss": 2.0, "training_iteration": 1},
        },
        {"seq": 5, "kind": "end", "trial": "exp-00001", "how": "error", "result": None},
        {"seq": 6, "kind": "end", "trial": "exp-00002", "how": "remove", "result": None},
    ]
    deliver([], state, events)
    study = state.searcher._study
    assert [t.state for t in study.trials[:3]] == [
        optuna.trial.TrialState.COMPLETE,  # with its metric
        optuna.trial.TrialState.FAIL,  # an error, no value
        optuna.trial.TrialState.PRUNED,  # no value otherwise (Ray's)
    ]
    assert study.trials[0].value == 2.0 and study.trials[0].intermediate_values == {1: 2.0}
    restored = loads(dumps(state.searcher))  # the study travels in the driver's saved state
    assert len(restored._study.trials) == 6 and restored._study.trials[0].value == 2.0
    with pytest.raises(TypeError, match="evaluated_rewards"):
        tune.search.OptunaSearch(space=space, points_to_evaluate=[{}], evaluated_rewards=[1.0])
    distributions = {"x": optuna.distributions.FloatDistribution(0, 1)}
    by_distributions = tune.search.OptunaSearch(space=distributions, metric="loss", mode="min", seed=1)
    assert 0 <= by_distributions.suggest("exp-00000")["x"] <= 1
    with pytest.raises(ValueError, match="pass the space as the run's config"):
        tune.search.OptunaSearch(space={"x": tune.uniform(0, 1)})
