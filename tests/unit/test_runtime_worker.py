"""A gang's workers (``python -m kubetune.runtime`` with ``KUBETUNE_RANK`` > 0, kubetune.runtime.worker): what they
run, what they restore, and that they write nothing to the trial's folder. Real subprocesses, file:// storage."""

from __future__ import annotations

import json

import pytest
from conftest_runtime import run_runtime, runtime_env, start_runtime

from kubetune.checkpoint_store import list_checkpoints
from kubetune.env import HOSTS, RANK, WORLD_SIZE, CheckpointPolicy, TrialEnv
from kubetune.runtime import gang_config
from kubetune.shipping import FUNCTION_KEY, dumps
from kubetune.storage import open_storage

SOURCE = '''
import atexit, json, os, tempfile, time
import kubetune

if os.environ.get("KUBETUNE_WORLD_SIZE"):  # as jax.distributed's shutdown barrier, which a lost peer never reaches
    atexit.register(time.sleep, 3600)



def train(config):
    """Counts on from its checkpoint; each rank notes what it saw in config["out"] + rank."""
    ctx = kubetune.get_context()
    start = 0
    checkpoint = kubetune.get_checkpoint()
    if checkpoint:
        with open(os.path.join(checkpoint.path, "n.json")) as f:
            start = json.load(f)["n"]
    seen = {"rank": ctx.get_world_rank(), "size": ctx.get_world_size(), "hosts": ctx.get_hosts(), "start": start}
    for n in range(start + 1, start + 4):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "n.json"), "w") as f:
                json.dump({"n": n}, f)
            kubetune.report({"n": n}, checkpoint=kubetune.Checkpoint.from_directory(d))
    with open(f"{config['out']}{seen['rank']}", "w") as f:
        json.dump(seen, f)


def rollout(config):
    with open(config["out"] + "rollout", "w") as f:
        json.dump({"rank": kubetune.get_context().get_world_rank()}, f)


class Driver(kubetune.Trainable):
    def step(self):
        return {"done": True}

    @staticmethod
    def worker(config):
        with open(config["out"] + "driver-worker", "w") as f:
            f.write("ran")


class NoWorker(kubetune.Trainable):
    def step(self):
        return {"done": True}


def note_lr(config):
    with open(f"{config['out']}lr{kubetune.get_context().get_world_rank()}", "w") as f:
        json.dump(config["lr"], f)


def note_name(config):
    with open(f"{config['out']}name{kubetune.get_context().get_world_rank()}", "w") as f:
        json.dump(kubetune.get_context().get_trial_name(), f)
'''


def _env(tmp_path, trial_dir, name, rank, config=None, **fields):
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"out": str(tmp_path / "seen-"), **(config or {})},
        source=SOURCE,
        name=name,
        checkpoint=CheckpointPolicy(frequency=1, atEnd=True),
        **fields,
    )
    if rank:
        env.update({RANK: str(rank), WORLD_SIZE: "3", HOSTS: "rank-0.g.ns.svc,rank-1.g.ns.svc,rank-2.g.ns.svc"})
    return env


def test_a_worker_runs_the_function_from_the_heads_checkpoint_and_writes_nothing(tmp_path):
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    storage = open_storage(uri)
    code, output = run_runtime(_env(tmp_path, uri, "train", 0))
    assert code == 0, output
    committed, _ = list_checkpoints(storage, uri)
    assert committed[-1].iteration == 3
    before = sorted((p.relative_to(tmp_path / "store"), p.stat().st_mtime_ns) for p in (tmp_path / "store").rglob("*"))

    code, output = run_runtime(_env(tmp_path, uri, "train", 2, attempt=1))  # exits though its atexit waits
    assert code == 0, output
    seen = json.loads((tmp_path / "seen-2").read_text())
    assert seen == {
        "rank": 2,
        "size": 3,
        "hosts": ["rank-0.g.ns.svc", "rank-1.g.ns.svc", "rank-2.g.ns.svc"],
        "start": 3,  # the trial's latest committed checkpoint, as the head restores it
    }
    after = sorted((p.relative_to(tmp_path / "store"), p.stat().st_mtime_ns) for p in (tmp_path / "store").rglob("*"))
    assert after == before  # no result, checkpoint, params.json or error.txt from a worker
    assert "rank 2 of 3" in output


def test_a_worker_entrypoint_or_a_classs_worker_method_runs_instead_of_the_trainable(tmp_path):
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    env = _env(tmp_path, uri, "Driver", 1, worker_entrypoint="kubetune_trainable_source:rollout")
    code, output = run_runtime(env)
    assert code == 0, output
    assert json.loads((tmp_path / "seen-rollout").read_text()) == {"rank": 1}
    code, output = run_runtime(_env(tmp_path, uri, "Driver", 1))
    assert code == 0, output
    assert (tmp_path / "seen-driver-worker").read_text() == "ran"


def test_a_class_without_a_worker_method_fails_the_worker_saying_what_to_add(tmp_path):
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    code, output = run_runtime(_env(tmp_path, uri, "NoWorker", 1))
    assert code == 1
    message = (tmp_path / "termination-log").read_text()
    assert "NoWorker is a class and the trial has workers" in message
    assert "worker(config)" in message and "spec.trainable.workerEntrypoint" in message
    assert not (tmp_path / "store").exists()  # a failing worker writes no error.txt over the head's


def test_every_rank_runs_with_the_heads_sample_from_values(tmp_path):
    """A random ``sample_from`` value: the head computes it and publishes the config; a worker started before the
    head waits for it and runs with the same value, not one of its own."""
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    function_uri = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions/lr.pkl"
    open_storage(function_uri).put_bytes(function_uri, dumps(lambda spec: __import__("random").random()))
    config = {"lr": {FUNCTION_KEY: function_uri}}
    worker = start_runtime(_env(tmp_path, uri, "note_lr", 2, config))
    head = _env(tmp_path, uri, "note_lr", 0, config)
    head.update({RANK: "0", WORLD_SIZE: "3", HOSTS: "rank-0.g.ns.svc,rank-1.g.ns.svc,rank-2.g.ns.svc"})
    code, output = run_runtime(head)
    assert code == 0, output
    worker_output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_output
    lr = json.loads((tmp_path / "seen-lr0").read_text())
    assert isinstance(lr, float) and json.loads((tmp_path / "seen-lr2").read_text()) == lr


def test_a_worker_takes_only_its_own_attempts_config_and_says_when_it_never_came(tmp_path):
    uri = f"file://{tmp_path}/ns/exp/trial-0"
    storage = open_storage(uri)
    gang = {"namespace": "ns", "experiment": "exp", "trial": "trial-0", "trial_dir_uri": uri, "world_size": 2}
    explore = {"resample": [{"path": ["lr"], "function": "s3://b/f.pkl", "int": False}]}
    head = TrialEnv(attempt=3, config={"lr": 0.1}, pbt_explore=explore, **gang)
    assert gang_config.computed_in_pod(head) and not gang_config.computed_in_pod(TrialEnv(attempt=3, config={}, **gang))
    gang_config.publish(storage, head, {"lr": 0.25})
    assert gang_config.receive(storage, head) == ({"lr": 0.25}, None)
    named = TrialEnv(attempt=3, config={}, name_creator="s3://b/name.pkl", **gang)
    assert gang_config.computed_in_pod(named)
    gang_config.publish(storage, named, {}, "lr=0.25")
    assert gang_config.receive(storage, named) == ({}, "lr=0.25")
    with pytest.raises(TimeoutError, match="did not publish attempt 4's config in 0 s"):
        gang_config.receive(storage, TrialEnv(attempt=4, config={"lr": 0.1}, pbt_explore=explore, **gang), wait_s=0.3)


def test_every_rank_gets_the_display_name_the_heads_trial_name_creator_gave_and_a_later_attempts_own(tmp_path):
    """The first attempt calls the ``trial_name_creator`` in the head alone (Ray calls it once per trial): a worker
    started before the head waits for the name it published; a later attempt's ranks all run with the name the
    operator gives them (``env.display_name``) and call nothing."""
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    creator_uri = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions/name.pkl"
    calls = tmp_path / "creator-calls"
    creator = lambda trial: open(calls, "a").write("x") and f"named-{trial.trial_id}"  # noqa: E731
    open_storage(creator_uri).put_bytes(creator_uri, dumps(creator))
    worker = start_runtime(_env(tmp_path, uri, "note_name", 2, name_creator=creator_uri))
    head = _env(tmp_path, uri, "note_name", 0, name_creator=creator_uri)
    head.update({RANK: "0", WORLD_SIZE: "3", HOSTS: "rank-0.g.ns.svc,rank-1.g.ns.svc,rank-2.g.ns.svc"})
    code, output = run_runtime(head)
    assert code == 0, output
    worker_output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_output
    assert json.loads((tmp_path / "seen-name0").read_text()) == "named-trial-0"
    assert json.loads((tmp_path / "seen-name2").read_text()) == "named-trial-0"
    assert calls.read_text() == "x"  # the head's call only

    code, output = run_runtime(_env(tmp_path, uri, "note_name", 1, attempt=1, display_name="named-trial-0"))
    assert code == 0, output  # no head runs: the worker does not wait for a config of attempt 1
    assert json.loads((tmp_path / "seen-name1").read_text()) == "named-trial-0"
    assert calls.read_text() == "x"
