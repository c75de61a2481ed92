"""The checkpoint commit protocol and retention, over file:// and s3:// (moto's real HTTP server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures

from kubetune.checkpoint_store import (
    COMMIT_MARKER,
    apply_retention,
    checkpoint_uri,
    commit_checkpoint,
    is_committed,
    latest_committed,
    list_checkpoints,
    read_commit,
    restore_checkpoint,
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


class _Killed(Exception):
    """Stands for a SIGKILL: nothing after it runs."""


class _DyingStorage:
    """The storage, dying before its ``budget``-th write (upload, put or delete)."""

    _WRITES = {"upload_dir", "put_bytes", "delete", "delete_prefix"}

    def __init__(self, storage, budget):
        self._storage, self._budget = storage, budget

    def __getattr__(self, name):
        method = getattr(self._storage, name)
        if name not in self._WRITES:
            return method

        def write(*args, **kwargs):
            if self._budget == 0:
                raise _Killed(name)
            self._budget -= 1
            return method(*args, **kwargs)

        return write


def _restored_payload(storage, trial_dir, tmp_path, uri):
    out = tmp_path / "restored"
    restore_checkpoint(storage, uri, out)
    payload = (out / "model" / "weights.bin").read_bytes()
    import shutil

    shutil.rmtree(out)
    return payload


def test_a_second_commit_of_an_iteration_leaves_a_committed_one_at_every_instant(trial, tmp_path):
    storage, trial_dir = trial
    first = _commit(storage, trial_dir, tmp_path, 3)
    replacement = _local_checkpoint(tmp_path / "again", 3, payload=b"second")
    budget, finished = 0, False
    while not finished:
        try:
            uri = commit_checkpoint(_DyingStorage(storage, budget), replacement, first, {"iteration": 3})
            finished = True
        except _Killed:
            pass
        newest = latest_committed(storage, trial_dir)
        assert newest is not None and newest[1] == 3, f"no committed checkpoint of iteration 3 after {budget} writes"
        assert _restored_payload(storage, trial_dir, tmp_path, newest[0]) in (b"it3", b"second")
        budget += 1
    # a try cut after its marker left its generation committed; the next try made the next one
    generation = int(uri.rsplit(".", 1)[1])
    assert generation >= 1 and uri == join_uri(trial_dir, f"checkpoint_000003.{generation}")
    assert _restored_payload(storage, trial_dir, tmp_path, first) == b"second"  # the old URI gives its replacement
    apply_retention(storage, trial_dir, keep=1, score_attribute="training_iteration")
    committed, others = list_checkpoints(storage, trial_dir)
    assert committed == [(uri, 3, generation)] and others == []


def test_a_third_commit_of_an_iteration_takes_the_next_generation(trial, tmp_path):
    storage, trial_dir = trial
    first = _commit(storage, trial_dir, tmp_path, 3)
    second = commit_checkpoint(storage, _local_checkpoint(tmp_path / "b", 3, b"b"), first, {})
    third = commit_checkpoint(storage, _local_checkpoint(tmp_path / "c", 3, b"c"), first, {})
    assert (second, third) == (join_uri(trial_dir, "checkpoint_000003.1"), join_uri(trial_dir, "checkpoint_000003.2"))
    assert list_checkpoints(storage, trial_dir) == ([(third, 3, 2)], [])
    assert not is_committed(storage, first) and not is_committed(storage, second)
