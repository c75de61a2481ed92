"""The checkpoint commit protocol and retention, over file:// and s3:// (moto's real HTTP server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures
from kubetune.checkpoints import (
    COMMIT_MARKER, apply_retention, checkpoint_uri, commit_checkpoint, is_committed, latest_committed,
    list_checkpoints, read_commit, restore_checkpoint,
)
from kubetune.storage import join_uri, open_storage


@pytest.fixture(params=["file", "s3"])
def trial(request, tmp_path, aws_env):  # noqa: F811 - fixture
    """``(storage, trial_dir_uri)`` for each scheme."""
    if request.param == "file":
        uri = f"file://{tmp_path / 'store'}/ns/exp/trial_0"
        return open_storage(uri), uri
    endpoint = request.getfixturevalue("moto_endpoint")
    uri = f"s3://{new_bucket(endpoint)}/runs/ns/exp/trial_0"
    return open_storage(uri, endpoint=endpoint), uri


def _local_checkpoint(root: Path, iteration: int, payload: bytes = b"state") -> Path:
    path = root / f"checkpoint_{iteration:06d}"
    (path / "model").mkdir(parents=True, exist_ok=True)
    (path / ".is_checkpoint").write_bytes(b"")
    (path / "model" / "weights.bin").write_bytes(payload)
    (path / "checkpoint.tune_metadata").write_bytes(b"meta")
    return path


def _commit(storage, trial_dir, tmp_path, iteration, **result):
    local = _local_checkpoint(tmp_path / "local", iteration, payload=f"it{iteration}".encode())
    meta = {"iteration": iteration, "path": "checkpoint", "last_result": {"training_iteration": iteration, **result}}
    return commit_checkpoint(storage, local, checkpoint_uri(trial_dir, iteration), meta)


def test_commit_then_restore_round_trip(trial, tmp_path):
    storage, trial_dir = trial
    uri = _commit(storage, trial_dir, tmp_path, 3, loss=0.5)
    assert uri == join_uri(trial_dir, "checkpoint_000003")
    assert is_committed(storage, uri)
    marker = read_commit(storage, uri)
    assert marker["files"] == {".is_checkpoint": 0, "checkpoint.tune_metadata": 4, "model/weights.bin": 3}
    assert join_uri(uri, COMMIT_MARKER) in storage.list(uri)

    metadata = restore_checkpoint(storage, uri, tmp_path / "restored")
    assert metadata["last_result"]["loss"] == 0.5
    assert (tmp_path / "restored" / "model" / "weights.bin").read_bytes() == b"it3"
    assert not (tmp_path / "restored" / COMMIT_MARKER).exists()
    assert latest_committed(storage, trial_dir) == (uri, 3)


def test_upload_cut_before_its_marker_is_ignored(trial, tmp_path):
    storage, trial_dir = trial
    good = _commit(storage, trial_dir, tmp_path, 2)
    # The upload of iteration 4 was cut: its files are there, its marker is not.
    cut = checkpoint_uri(trial_dir, 4)
    storage.upload_dir(_local_checkpoint(tmp_path / "cut", 4), cut)

    assert not is_committed(storage, cut)
    assert latest_committed(storage, trial_dir) == (good, 2)
    committed, uncommitted = list_checkpoints(storage, trial_dir)
    assert [c.iteration for c in committed] == [2] and [c.iteration for c in uncommitted] == [4]
    with pytest.raises(FileNotFoundError):
        restore_checkpoint(storage, cut, tmp_path / "r")


def test_no_checkpoint_at_all(trial):
    storage, trial_dir = trial
    storage.put_bytes(join_uri(trial_dir, "result.json"), b"{}\n")
    assert latest_committed(storage, trial_dir) is None


def test_recommit_replaces_stale_files_of_a_cut_upload(trial, tmp_path):
    storage, trial_dir = trial
    uri = checkpoint_uri(trial_dir, 5)
    storage.put_bytes(join_uri(uri, "stale_from_last_attempt.bin"), b"old")
    _commit(storage, trial_dir, tmp_path, 5)
    assert join_uri(uri, "stale_from_last_attempt.bin") not in storage.list(uri)
    assert is_committed(storage, uri)


def test_restore_detects_a_checkpoint_damaged_after_commit(trial, tmp_path):
    storage, trial_dir = trial
    uri = _commit(storage, trial_dir, tmp_path, 1)
    storage.delete(join_uri(uri, "model", "weights.bin"))
    with pytest.raises(ValueError, match="incomplete"):
        restore_checkpoint(storage, uri, tmp_path / "r")


def test_retention_keeps_the_best_by_score_and_always_the_newest(trial, tmp_path):
    storage, trial_dir = trial
    for iteration, acc in [(1, 0.9), (2, 0.5), (3, 0.95), (4, 0.7), (5, 0.1)]:
        _commit(storage, trial_dir, tmp_path, iteration, acc=acc)
    storage.upload_dir(_local_checkpoint(tmp_path / "cut", 3), join_uri(trial_dir, "checkpoint_000000"))

    deleted = apply_retention(storage, trial_dir, keep=2, score_attribute="acc")

    committed, uncommitted = list_checkpoints(storage, trial_dir)
    assert [c.iteration for c in committed] == [1, 3, 5]  # best two (0.95, 0.9) plus the newest
    assert uncommitted == []  # a cut upload older than the newest commit is garbage
    assert sorted(deleted) == [checkpoint_uri(trial_dir, i) for i in (0, 2, 4)]


def test_retention_min_prefix_nested_attribute_and_missing_scores(trial, tmp_path):
    storage, trial_dir = trial
    _commit(storage, trial_dir, tmp_path, 1, info={"loss": 3.0})
    _commit(storage, trial_dir, tmp_path, 2, info={"loss": 1.0})
    _commit(storage, trial_dir, tmp_path, 3)  # no score: ranks last
    _commit(storage, trial_dir, tmp_path, 4, info={"loss": 2.0})
    _commit(storage, trial_dir, tmp_path, 5, info={"loss": 9.0})

    apply_retention(storage, trial_dir, keep=2, score_attribute="min-info/loss")
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [2, 4, 5]

    apply_retention(storage, trial_dir, keep=1, score_attribute="min-info/loss")
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [2, 5]


def test_retention_zero_keeps_all_and_newest_counts_within_keep(trial, tmp_path):
    storage, trial_dir = trial
    for iteration in (1, 2, 3):
        _commit(storage, trial_dir, tmp_path, iteration)
    assert apply_retention(storage, trial_dir, keep=0, score_attribute="training_iteration") == []
    # By training_iteration the newest is also the best: keep=2 keeps exactly two.
    apply_retention(storage, trial_dir, keep=2, score_attribute="training_iteration")
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [2, 3]
    with pytest.raises(ValueError):
        apply_retention(storage, trial_dir, keep=-1, score_attribute="training_iteration")


def test_a_file_named_like_the_marker_is_refused_before_any_upload(trial, tmp_path):
    storage, trial_dir = trial
    local = _local_checkpoint(tmp_path / "local", 1)
    (local / COMMIT_MARKER).write_text("{}")
    with pytest.raises(ValueError, match="commit marker"):
        commit_checkpoint(storage, local, checkpoint_uri(trial_dir, 1), {})
    assert storage.list(trial_dir) == []
