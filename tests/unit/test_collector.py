"""The collector over real HTTP on loopback: authentication, validation, size
limits and the decisions it returns; nothing rejected reaches trial state."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from kubetune.env import COLLECTOR_RESULTS_PATH
from kubetune_operator.collector import make_app
from kubetune_operator.registry import Registry
from kubetune_operator.settings import CollectorSettings, Settings
from kubetune_operator.tokens import mint_token
from tests.unit.journal_store import ConfigMaps

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def experiment():
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "exp", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {
            "trainable": {"entrypoint": "m:T"},
            "config": {"x": {"grid_search": [1, 2]}},
            "metric": "acc",
            "mode": "max",
            "stop": {"training_iteration": 5},
            "storage": {"uri": "s3://b/p"},
        },
    }


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
