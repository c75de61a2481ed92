"""The runtime subprocess against S3 (moto's real HTTP server): cut uploads on restore, and a 30 s outage."""

from __future__ import annotations

import json
import time

import pytest
from conftest_runtime import run_runtime, runtime_env, start_runtime, wait_for
from conftest_storage import RestartableMotoServer, aws_env, moto_endpoint, new_bucket, s3_client  # noqa: F401
from test_runtime import TRAINABLES

from kubetune.checkpoint_store import COMMIT_MARKER, list_checkpoints, restore_checkpoint
from kubetune.env import CheckpointPolicy
from kubetune.storage import open_storage


def _lines(storage, trial_dir: str) -> list[dict]:
    return [json.loads(line) for line in storage.get_bytes(f"{trial_dir}/result.json").decode().splitlines()]


def test_restore_ignores_a_checkpoint_whose_upload_was_cut(tmp_path, moto_endpoint, aws_env):  # noqa: F811
    trial_dir = f"s3://{new_bucket(moto_endpoint)}/runs/ns/exp/trial-0"
    storage = open_storage(trial_dir, endpoint=moto_endpoint)
    common = dict(
        source=TRAINABLES, name="Counter", endpoint=moto_endpoint, checkpoint=CheckpointPolicy(frequency=2, atEnd=False)
    )
    code, output = run_runtime(runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 5}, **common))
    assert code == 0, output
    # An earlier attempt died while uploading checkpoint 6: one file there, no .tune_metadata, no marker.
    storage.put_bytes(f"{trial_dir}/checkpoint_000006/state.json", b'{"total": 999}')

    code, output = run_runtime(
        runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 8}, attempt=1, **common)
    )
    assert code == 0, output
    assert f"restored {trial_dir}/checkpoint_000004 at iteration 4" in output
    lines = _lines(storage, trial_dir)
    assert [(r["training_iteration"], r["total"]) for r in lines] == [(i, i) for i in range(1, 9)]
    committed, uncommitted = list_checkpoints(storage, trial_dir)
    assert [c.iteration for c in committed] == [2, 4, 6, 8] and uncommitted == []
    restore_checkpoint(storage, f"{trial_dir}/checkpoint_000006", tmp_path / "six")
    assert json.loads((tmp_path / "six" / "state.json").read_text()) == {"total": 6}


@pytest.mark.timeout(180)
def test_a_30_second_s3_outage_loses_no_committed_checkpoint_and_uploads_resume(tmp_path, aws_env):  # noqa: F811
    server = RestartableMotoServer()
    server.start()
    try:
        bucket = new_bucket(server.endpoint)
        trial_dir = f"s3://{bucket}/runs/ns/exp/trial-0"
        env = runtime_env(
            tmp_path,
            trial_dir,
            config={"step_s": 0.1},
            stop={"training_iteration": 30},
            endpoint=server.endpoint,
            checkpoint=CheckpointPolicy(frequency=5, atEnd=True),
            source=TRAINABLES,
            name="Counter",
        )
        proc = start_runtime(env)
        client = s3_client(server.endpoint)

        def committed(iteration: int) -> bool:
            key = f"runs/ns/exp/trial-0/checkpoint_{iteration:06d}/{COMMIT_MARKER}"
            return client.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount", 0) == 1

        wait_for(lambda: committed(5), 30, "the first checkpoint")
        server.stop()
        outage_started = time.monotonic()
        time.sleep(30)
        assert proc.poll() is None, "the runtime gave up during the outage"
        server.start()  # same port, same buckets
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
        assert "storage unavailable" in output

        storage = open_storage(trial_dir, endpoint=server.endpoint)
        committed_refs, uncommitted = list_checkpoints(storage, trial_dir)
        assert [c.iteration for c in committed_refs] == [5, 10, 15, 20, 25, 30] and uncommitted == []
        for ref in committed_refs:
            restore_checkpoint(storage, ref.uri, tmp_path / "check" / str(ref.iteration))
            state = json.loads((tmp_path / "check" / str(ref.iteration) / "state.json").read_text())
            assert state == {"total": ref.iteration}
        assert [r["training_iteration"] for r in _lines(storage, trial_dir)] == list(range(1, 31))
        assert time.monotonic() - outage_started >= 30
    finally:
        server.stop()
