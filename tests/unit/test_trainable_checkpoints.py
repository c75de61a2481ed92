"""kubetune.Trainable checkpoints: Ray 1.x layout, restore under another prefix, objects, remote storage.

Remote checkpoints go to moto's real S3 server on loopback through boto3.
"""

from __future__ import annotations

import os
import pickle
import shutil

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket, s3_client  # noqa: F401 - fixtures

from kubetune import Trainable
from kubetune.checkpoint_store import COMMIT_MARKER, is_committed, read_commit
from kubetune.storage import open_storage

METADATA_KEYS = {
    "experiment_id",
    "iteration",
    "timesteps_total",
    "time_total",
    "episodes_total",
    "saved_as_dict",
    "last_result",
}


class DictState(Trainable):
    """Keeps a counter; checkpoints as a dict."""

    def setup(self, config):
        self.value = 0
        self.loaded = None

    def step(self):
        self.value += 1
        return {"value": self.value, "timesteps_this_iter": 10, "episodes_this_iter": 1}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.loaded = checkpoint
        self.value = checkpoint["value"]


class FileState(DictState):
    """Checkpoints as nested files; ``config["returns"]`` picks what save_checkpoint returns."""

    def save_checkpoint(self, checkpoint_dir):
        os.makedirs(os.path.join(checkpoint_dir, "model", "layers"))
        with open(os.path.join(checkpoint_dir, "model", "layers", "weights.txt"), "w") as f:
            f.write(str(self.value))
        with open(os.path.join(checkpoint_dir, "model", "optimizer.txt"), "w") as f:
            f.write("adam")
        returns = self.config.get("returns", "dir")
        if returns == "dir":
            return checkpoint_dir
        if returns == "file":
            return os.path.join(checkpoint_dir, "model", "optimizer.txt")
        return returns

    def load_checkpoint(self, checkpoint):
        self.loaded = checkpoint
        base = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(os.path.dirname(checkpoint))
        with open(os.path.join(base, "model", "layers", "weights.txt")) as f:
            self.value = int(f.read())
        with open(os.path.join(base, "model", "optimizer.txt")) as f:
            assert f.read() == "adam"


def _trained(cls, logdir, n, **kwargs):
    t = cls(logdir=str(logdir), **kwargs)
    for _ in range(n):
        t.train()
    return t


def test_dict_checkpoint_layout_and_metadata(tmp_path):
    t = _trained(DictState, tmp_path / "trial", 3)
    path = t.save()
    directory = tmp_path / "trial" / "checkpoint_000003"
    assert path == str(directory / "checkpoint")
    assert sorted(os.listdir(directory)) == [".is_checkpoint", "checkpoint", "checkpoint.tune_metadata"]
    with open(path, "rb") as f:
        assert pickle.load(f) == {"value": 3}
    with open(path + ".tune_metadata", "rb") as f:
        meta = pickle.load(f)
    assert set(meta) == METADATA_KEYS
    assert (meta["experiment_id"], meta["iteration"], meta["saved_as_dict"]) == (t.experiment_id, 3, True)
    assert (meta["timesteps_total"], meta["episodes_total"]) == (30, 3)
    assert meta["time_total"] == pytest.approx(meta["last_result"]["time_total_s"])
    assert meta["last_result"]["training_iteration"] == 3


def test_dict_checkpoint_restore_continues_counters(tmp_path):
    t = _trained(DictState, tmp_path / "a", 3)
    path = t.save()
    other = DictState(logdir=str(tmp_path / "b"))
    other.restore(path)
    assert other.loaded == {"value": 3, "tune_checkpoint_path": path}
    assert other.iteration == 3 and other.experiment_id == t.experiment_id
    r = other.train()
    assert (r["value"], r["training_iteration"], r["iterations_since_restore"]) == (4, 4, 1)
    assert (r["timesteps_total"], r["episodes_total"], r["timesteps_since_restore"]) == (40, 4, 10)
    assert r["time_since_restore"] == r["time_this_iter_s"]
    assert r["time_total_s"] > r["time_since_restore"] and r["experiment_id"] == t.experiment_id


@pytest.mark.parametrize("returns", ["dir", "file"])
def test_path_checkpoint_restores_after_moving_to_another_prefix(tmp_path, returns):
    t = _trained(FileState, tmp_path / "trial", 2, config={"returns": returns})
    path = t.save()
    directory = str(tmp_path / "trial" / "checkpoint_000002")
    if returns == "dir":
        assert path == directory + os.sep
        assert os.path.isfile(os.path.join(directory, ".tune_metadata"))
    else:
        assert path == os.path.join(directory, "model", "optimizer.txt")
        assert os.path.isfile(path + ".tune_metadata")
    moved = tmp_path / "elsewhere" / "deeper" / "checkpoint_000002"
    shutil.copytree(directory, moved)
    shutil.rmtree(tmp_path / "trial")
    # both the returned path (re-rooted) and the bare checkpoint directory restore
    for target in (str(moved) + path[len(directory) :], str(moved)):
        other = FileState(logdir=str(tmp_path / "new"), config={"returns": returns})
        other.restore(target)
        assert other.value == 2 and other.iteration == 2
        assert other.train()["training_iteration"] == 3
        assert other.loaded.startswith(str(moved))


def test_save_into_a_given_directory(tmp_path):
    t = _trained(DictState, tmp_path / "trial", 1)
    path = t.save(str(tmp_path / "custom"))
    assert path == str(tmp_path / "custom" / "checkpoint_000001" / "checkpoint")


def test_save_checkpoint_must_return_a_path_inside_or_a_dict(tmp_path):
    t = _trained(FileState, tmp_path / "a", 1, config={"returns": str(tmp_path)})
    with pytest.raises(ValueError, match="inside"):
        t.save()
    t = _trained(FileState, tmp_path / "b", 1, config={"returns": 42})
    with pytest.raises(ValueError, match="int"):
        t.save()


def test_restore_of_a_missing_checkpoint_raises(tmp_path):
    t = DictState(logdir=str(tmp_path))
    with pytest.raises(FileNotFoundError):
        t.restore(str(tmp_path / "checkpoint_000009" / "checkpoint"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        t.restore(str(tmp_path / "empty"))


@pytest.mark.parametrize("cls", [DictState, FileState])
def test_save_to_object_round_trip(tmp_path, cls):
    t = _trained(cls, tmp_path / "a", 4)
    data = t.save_to_object()
    assert isinstance(data, bytes)
    assert os.listdir(tmp_path / "a") == []  # nothing left behind
    other = cls(logdir=str(tmp_path / "b"))
    other.restore_from_object(data)
    assert other.value == 4 and other.iteration == 4 and other.experiment_id == t.experiment_id
    assert other.train()["training_iteration"] == 5
    assert os.listdir(tmp_path / "b") == []
    with pytest.raises(ValueError):
        other.restore_from_object(pickle.dumps({"something": "else"}))


def test_delete_checkpoint_removes_the_directory(tmp_path):
    t = _trained(FileState, tmp_path / "trial", 1)
    path = t.save()
    t.delete_checkpoint(path)
    assert not os.path.exists(tmp_path / "trial" / "checkpoint_000001")
    t.delete_checkpoint(path)  # already gone: a warning, no error


# --------------------------------------------------------------------------- remote (moto S3)
@pytest.fixture
def remote(moto_endpoint, aws_env, monkeypatch):  # noqa: F811 - fixtures
    """A fresh ``s3://bucket/ns/exp/trial_0`` trial dir; the pod's endpoint variable points at moto."""
    monkeypatch.setenv("KUBETUNE_STORAGE_ENDPOINT", moto_endpoint)
    return f"s3://{new_bucket(moto_endpoint)}/ns/exp/trial_0"


def test_remote_save_commits_and_restore_downloads_a_missing_checkpoint(tmp_path, remote, moto_endpoint):  # noqa: F811
    t = _trained(FileState, tmp_path / "trial", 2, remote_checkpoint_dir=remote)
    path = t.save()
    storage = open_storage(remote, endpoint=moto_endpoint)
    uri = f"{remote}/checkpoint_000002"
    assert is_committed(storage, uri)
    assert sorted(storage.list(uri)) == sorted(
        f"{uri}/{rel}"
        for rel in (
            ".is_checkpoint",
            ".tune_metadata",
            "model/layers/weights.txt",
            "model/optimizer.txt",
            COMMIT_MARKER,
        )
    )
    meta = read_commit(storage, uri)["metadata"]
    assert (meta["iteration"], meta["path"], meta["experiment_id"]) == (2, "", t.experiment_id)
    assert meta["last_result"]["training_iteration"] == 2 and "config" not in meta["last_result"]

    shutil.rmtree(tmp_path / "trial")  # the pod is gone; a new one has an empty logdir
    other = FileState(logdir=str(tmp_path / "trial"), remote_checkpoint_dir=remote)
    other.restore(path)
    assert other.value == 2 and other.iteration == 2 and other.experiment_id == t.experiment_id
    assert os.path.isfile(tmp_path / "trial" / "checkpoint_000002" / "model" / "layers" / "weights.txt")
    assert not os.path.exists(tmp_path / "trial" / "checkpoint_000002" / COMMIT_MARKER)

    other.delete_checkpoint(path)
    assert storage.list(uri) == []


def test_restore_from_a_checkpoint_uri_with_a_dict_checkpoint(tmp_path, remote, moto_endpoint):  # noqa: F811
    storage = open_storage(remote, endpoint=moto_endpoint)
    t = _trained(DictState, tmp_path / "a", 3, remote_checkpoint_dir=remote, storage=storage)
    t.save()
    assert read_commit(storage, f"{remote}/checkpoint_000003")["metadata"]["path"] == "checkpoint"
    other = DictState(logdir=str(tmp_path / "b"))  # no remote dir: the URI alone is enough
    other.restore(f"{remote}/checkpoint_000003")
    assert other.loaded["value"] == 3 and other.iteration == 3
    assert other.loaded["tune_checkpoint_path"] == str(tmp_path / "b" / "checkpoint_000003" / "checkpoint")


def test_restore_refuses_an_uncommitted_remote_checkpoint(tmp_path, remote, moto_endpoint):  # noqa: F811
    t = _trained(DictState, tmp_path / "a", 1, remote_checkpoint_dir=remote)
    t.save()
    s3_client(moto_endpoint).delete_object(
        Bucket=remote[5:].split("/")[0], Key=f"ns/exp/trial_0/checkpoint_000001/{COMMIT_MARKER}"
    )
    other = DictState(logdir=str(tmp_path / "b"), remote_checkpoint_dir=remote)
    with pytest.raises(FileNotFoundError, match="not a committed checkpoint"):
        other.restore(f"{remote}/checkpoint_000001")
    with pytest.raises(FileNotFoundError):
        other.restore(str(tmp_path / "b" / "checkpoint_000001" / "checkpoint"))
