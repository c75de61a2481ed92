"""The collector over real HTTP on loopback: authentication, validation, size
limits and the decisions it returns; nothing rejected reaches trial state."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.checkpoint_store import checkpoint_uri
from kubetune.env import COLLECTOR_RESULTS_PATH
from kubetune_operator.collector import make_app
from kubetune_operator.controller import ExperimentController
from kubetune_operator.registry import Registry
from kubetune_operator.settings import CollectorSettings, Settings
from kubetune_operator.tokens import mint_token

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def experiment():
    return experiment_object(
        uid="u",
        config={"x": {"grid_search": [1, 2]}},
        metric="acc",
        mode="max",
        stop={"training_iteration": 5},
        storage={"uri": "s3://b/p"},
    )


def batch(trial="exp-00000", attempt=0, results=None, **extra):
    return {
        "namespace": "ns",
        "experiment": "exp",
        "trial": trial,
        "attempt": attempt,
        "results": results if results is not None else [{"acc": 0.5, "training_iteration": 1}],
        **extra,
    }


@pytest.fixture
def registry():
    settings = Settings(collector=CollectorSettings(max_body_bytes=4096, max_results_per_batch=10))
    reg = Registry(settings, KEY, ConfigMaps().write)
    ctl = reg.load(experiment())
    plan = ctl.plan({}, 0.0)
    for manifest in plan.create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid")
    ctl.adopted = True  # as the daemon's first pass does
    return reg


def post(registry, body, token):
    async def go():
        server = TestServer(make_app(registry))
        await server.start_server()
        try:
            async with ClientSession() as session:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with session.post(server.make_url(COLLECTOR_RESULTS_PATH), data=data, headers=headers) as r:
                    return r.status, await r.json()
        finally:
            await server.close()

    return asyncio.run(go())


def token(trial="exp-00000", attempt=0, key=KEY):
    return mint_token(key, "ns", trial, attempt, "uid")


def test_a_good_batch_gets_a_decision_and_updates_the_trial(registry):
    status, reply = post(registry, batch(), token())
    assert (status, reply) == (200, {"decision": "continue"})
    trial = registry.get("ns", "exp").trials["exp-00000"]
    assert trial.status["metricValue"] == 0.5 and trial.status["iteration"] == 1
    status, reply = post(registry, batch(results=[{"acc": 0.6, "training_iteration": 5}]), token())
    assert reply == {"decision": "stop"}  # spec.stop reached


@pytest.mark.parametrize(
    "bad_token",
    [
        token(key=OTHER_KEY),  # forged with another key
        token(trial="exp-00001"),  # another trial's token
        token(attempt=1),  # another attempt's token
        "",  # none
    ],
)
def test_forged_or_foreign_tokens_get_401_and_change_nothing(registry, bad_token):
    status, reply = post(registry, batch(), bad_token)
    assert status == 401 and "error" in reply
    assert "lastResult" not in registry.get("ns", "exp").trials["exp-00000"].status


def test_a_stale_attempt_gets_401(registry):
    ctl = registry.get("ns", "exp")
    ctl.trials["exp-00000"].status["attempt"] = 1  # the trial was retried
    status, reply = post(registry, batch(attempt=0), token(attempt=0))
    assert status == 401 and "stale" in reply["error"]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        batch(attempt=-1),
        batch(attempt="0"),
        batch(results={"acc": 1}),
        batch(results=[{"acc": 1}] * 11),  # over max_results_per_batch
        batch(checkpoint="s3://nowhere"),
        {"namespace": "ns", "trial": "exp-00000", "attempt": 0},  # no experiment
    ],
)
def test_malformed_batches_get_400_and_change_nothing(registry, body):
    status, reply = post(registry, body, token())
    assert status == 400 and reply["error"].startswith("malformed batch")
    assert "lastResult" not in registry.get("ns", "exp").trials["exp-00000"].status


def test_a_400_names_each_bad_field_and_never_echoes_what_was_sent(registry):
    body = batch(attempt="secret-0", checkpoint={"iteration": 3})
    status, reply = post(registry, body, token())
    assert status == 400
    assert "attempt: Input should be a valid integer" in reply["error"]
    assert "checkpoint.uri: Field required" in reply["error"]
    assert "secret" not in reply["error"]


def test_nan_and_infinite_metric_values_are_results(registry):
    results = [{"acc": float("nan"), "training_iteration": 1}, {"acc": float("-inf"), "training_iteration": 2}]
    status, reply = post(registry, batch(results=results), token())
    assert status == 200 and reply["decision"] == "continue"
    assert registry.get("ns", "exp").trials["exp-00000"].status["lastResult"]["training_iteration"] == 2


def test_a_large_valid_batch_is_read_whole():
    settings = Settings(collector=CollectorSettings(max_body_bytes=2_000_000, max_results_per_batch=1000))
    reg = Registry(settings, KEY, ConfigMaps().write)
    ctl = reg.load(experiment())
    for manifest in ctl.plan({}, 0.0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid")
    ctl.adopted = True
    results = [{"acc": i / 1000, "training_iteration": i, "note": "x" * 400} for i in range(1, 1001)]
    body = json.dumps(batch(results=results)).encode()
    assert len(body) > 400_000  # arrives in many chunks
    status, reply = post(reg, body, token())
    assert status == 200, reply
    assert reg.get("ns", "exp").trials["exp-00000"].status["iteration"] == 1000


def test_a_stop_early_in_a_large_batch_is_the_answer_and_stays_the_answer():
    settings = Settings(collector=CollectorSettings(max_body_bytes=2_000_000, max_results_per_batch=1000))
    reg = Registry(settings, KEY, ConfigMaps().write)
    ctl = reg.load(experiment())  # spec.stop: training_iteration 5
    for manifest in ctl.plan({}, 0.0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid")
    ctl.adopted = True
    results = [{"acc": 0.1, "training_iteration": i} for i in range(1, 121)]  # several steps; iteration 5 in the first
    assert post(reg, batch(results=results), token()) == (200, {"decision": "stop"})
    assert post(reg, batch(results=results), token()) == (200, {"decision": "stop"})  # re-sent: the same answer
    assert post(reg, batch(results=[]), token()) == (200, {"decision": "stop"})
    assert reg.get("ns", "exp").trials["exp-00000"].status["iteration"] == 120


def test_oversized_bodies_get_413(registry):
    big = batch(results=[{"acc": 0.5, "note": "x" * 5000}])
    status, reply = post(registry, big, token())
    assert status == 413
    assert "lastResult" not in registry.get("ns", "exp").trials["exp-00000"].status


@pytest.mark.parametrize("body", [b"not json", json.dumps(batch(results=[{"note": "x" * 5000}])).encode()])
def test_a_forged_token_is_refused_before_the_body_is_looked_at(registry, body):
    status, reply = post(registry, body, token(key=OTHER_KEY))
    assert status == 401 and reply["error"] == "invalid token"  # not 400 or 413: the body was never read


def test_a_token_of_an_earlier_trial_of_the_same_name_gets_401(registry):
    # a pod of an Experiment deleted and created again under its name: same names, another Trial uid
    status, reply = post(registry, batch(), mint_token(KEY, "ns", "exp-00000", 0, "uid-of-the-deleted-trial"))
    assert status == 401 and "stale" in reply["error"]
    assert "lastResult" not in registry.get("ns", "exp").trials["exp-00000"].status


def test_a_genuine_token_of_another_trial_than_the_body_names_gets_401(registry):
    status, reply = post(registry, batch(trial="exp-00000"), token(trial="exp-00001"))
    assert status == 401 and "this trial" in reply["error"]
    assert "lastResult" not in registry.get("ns", "exp").trials["exp-00000"].status


def test_an_unknown_or_not_yet_adopted_experiment_asks_the_runtime_to_retry(registry):
    status, _ = post(registry, {**batch(), "experiment": "later"}, token())
    assert status == 503
    registry.get("ns", "exp").adopted = False  # restarted operator, Trials not read yet
    status, _ = post(registry, batch(), token())
    assert status == 503


def test_metrics_count_requests_results_and_decisions(registry):
    async def go():
        server = TestServer(make_app(registry))
        await server.start_server()
        try:
            async with ClientSession() as session:
                body = json.dumps(batch(results=[{"acc": 0.1, "training_iteration": 1}] * 3)).encode()
                async with session.post(
                    server.make_url(COLLECTOR_RESULTS_PATH), data=body, headers={"Authorization": f"Bearer {token()}"}
                ) as r:
                    assert r.status == 200
                async with session.get(server.make_url("/metrics")) as r:
                    return await r.text()
        finally:
            await server.close()

    from prometheus_client import REGISTRY

    before = REGISTRY.get_sample_value("kubetune_results_total") or 0
    text = asyncio.run(go())
    assert REGISTRY.get_sample_value("kubetune_results_total") == before + 3
    assert 'kubetune_collector_requests_total{code="200"}' in text
    assert 'kubetune_decisions_total{decision="continue"}' in text


def nested(depth):
    value = 1.0
    for _ in range(depth):
        value = {"d": value}
    return value


@pytest.mark.parametrize(
    "result, words",
    [
        # issue 22.1: any code in the pod can post with its token; this one made every later status patch fail
        ({"acc": 2.0, "training_iteration": float("inf")}, "results[1]: training_iteration must be an integer from 0"),
        ({"acc": 2.0, "training_iteration": float("nan")}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": -1}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": 2**53}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": 1.5}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": True}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": "3"}, "training_iteration must be an integer"),
        ({"acc": 2.0, "training_iteration": 1, "time_total_s": float("inf")}, "time_total_s must be a finite number"),
        ({"acc": 2.0, "training_iteration": 1, "time_this_iter_s": -0.5}, "time_this_iter_s must be a finite number"),
        ({"acc": 2.0, "training_iteration": 1, "timesteps_total": "many"}, "timesteps_total must be a finite number"),
        ({"acc": 2.0, "training_iteration": 1, "done": "yes"}, "done must be true or false"),
        ({"acc": 10**30, "training_iteration": 1}, "acc: an integer beyond 64 bits"),
        ({"acc": 1.0, "training_iteration": 1, "info": {"steps": [1, -(2**70)]}}, "info/steps: an integer beyond 64"),
        ({"acc": 1.0, "training_iteration": 1, "deep": nested(17)}, "nested more than 16 levels deep"),
    ],
)
def test_a_value_the_operator_cannot_take_gets_400_with_the_reason_and_changes_nothing(registry, result, words):
    ctl = registry.get("ns", "exp")
    journal_before = ctl.journal.next_seq
    good = {"acc": 0.5, "training_iteration": 1}
    status, reply = post(registry, batch(results=[good, result]), token())
    assert status == 400 and reply["error"].startswith("refused batch: ") and words in reply["error"]
    trial = ctl.trials["exp-00000"]
    assert "lastResult" not in trial.status and "iteration" not in trial.status  # not even the good result
    # nor scheduler nor journal
    assert "exp-00000" not in ctl.decisions.applied and ctl.journal.next_seq == journal_before
    plan = ctl.plan({}, 100.0)
    json.dumps(plan.trial_status, allow_nan=False)  # every status patch stays JSON the API server decodes
    refused = [e for e in plan.events if e[2] == "ResultsRefused"]
    assert refused and refused[0][:2] == ("exp-00000", "Warning") and words.split(": ")[-1] in refused[0][3]


def test_refused_batches_are_reported_on_the_trial_at_most_once_a_minute_with_their_count(registry):
    ctl = registry.get("ns", "exp")
    poisoned = batch(results=[{"acc": 2.0, "training_iteration": float("inf")}])
    assert post(registry, poisoned, token())[0] == 400
    assert [e[3] for e in ctl.plan({}, 100.0).events if e[2] == "ResultsRefused"] == [
        "the collector refused 1 batch(es) of results, which the trial's runtime drops; the last one for attempt 0: "
        "results[0]: training_iteration must be an integer from 0 to 9007199254740991"
    ]
    for _ in range(3):
        assert post(registry, poisoned, token())[0] == 400
    assert not [e for e in ctl.plan({}, 130.0).events if e[2] == "ResultsRefused"]
    later = [e[3] for e in ctl.plan({}, 161.0).events if e[2] == "ResultsRefused"]
    assert len(later) == 1 and later[0].startswith("the collector refused 3 batch(es)")
    assert not [e for e in ctl.plan({}, 300.0).events if e[2] == "ResultsRefused"]  # none since: nothing said
    assert "exp-00000" not in ctl.projection.refused


def test_a_checkpoint_is_taken_only_in_the_trials_own_folder(registry):
    ctl = registry.get("ns", "exp")
    own = checkpoint_uri(ctl.trial_dir("exp-00000"), 1)
    for uri, words in [
        ("s3://elsewhere/checkpoint_000001", "checkpoint.uri must name a folder in the trial's own folder"),
        (checkpoint_uri(ctl.trial_dir("exp-00001"), 1), "in the trial's own folder"),  # another trial's
        (f"{ctl.trial_dir('exp-00000')}/../exp-00001/checkpoint_000001", "in the trial's own folder"),
        (f"{ctl.trial_dir('exp-00000')}/a/b", "in the trial's own folder"),
        (own + "x" * 2048, "checkpoint.uri must be a URI of 1 to 2048 characters"),
    ]:
        status, reply = post(registry, batch(checkpoint={"uri": uri, "iteration": 1}), token())
        assert status == 400 and words in reply["error"], uri
        assert "checkpoint" not in ctl.trials["exp-00000"].status and "exp-00000" not in ctl.decisions.applied
    status, reply = post(registry, batch(checkpoint={"uri": own, "iteration": -1}), token())
    assert status == 400 and "checkpoint.iteration must be an integer" in reply["error"]
    status, reply = post(registry, batch(checkpoint={"uri": own, "iteration": 1}), token())
    assert status == 200 and ctl.trials["exp-00000"].status["checkpoint"] == {"uri": own, "iteration": 1}


def test_accepted_nan_metrics_reach_the_journal_as_values_a_replay_reads_back_and_no_status():
    store = ConfigMaps()
    reg = Registry(
        Settings(collector=CollectorSettings(max_body_bytes=4096, max_results_per_batch=10)), KEY, store.write
    )
    exp = experiment()
    exp["spec"]["scheduler"] = {"name": "asha", "params": {"max_t": 100}}  # stateful: the journal records
    ctl = reg.load(exp)
    for manifest in ctl.plan({}, 0.0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid")
    ctl.adopted = True
    results = [{"acc": float("nan"), "training_iteration": 1}, {"acc": float("inf"), "training_iteration": 2}]
    assert post(reg, batch(results=results), token()) == (200, {"decision": "continue"})
    plan = ctl.plan({}, 100.0)
    json.dumps([plan.trial_status, plan.experiment_status], allow_nan=False)  # no status patch carries them
    assert "metricValue" not in ctl.trials["exp-00000"].status and ctl.trials["exp-00000"].status["iteration"] == 2
    # the journal is the operator's own JSON text in a ConfigMap's data: the API server is sent a string
    assert store.list() and "NaN" in str(store.list())
    json.dumps(store.list(), allow_nan=False)
    again = ExperimentController(exp, reg.settings, KEY)
    for trial in ctl.trials.values():
        again.observe_trial({"metadata": {"name": trial.name, "uid": "uid"}, "spec": {"index": trial.index}})
    again.restore(store.list())
    assert again.decisions.applied["exp-00000"][0] == 2  # the replay read the NaN and infinite results back
