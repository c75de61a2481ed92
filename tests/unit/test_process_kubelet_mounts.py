"""The process kubelet's mount points: what a pod's mounts create on the host is removed, where still empty, once
the last pod that mounts there ended; what was there before is never touched."""

from __future__ import annotations

from devcluster.pod import MountPoints


def test_created_mount_points_go_with_the_last_pod_that_holds_them(tmp_path):
    before = tmp_path / "var" / "run"
    before.mkdir(parents=True)
    token = str(before / "secrets" / "kubernetes.io" / "serviceaccount")
    points = MountPoints()
    first = points.hold([token, str(tmp_path / "dev-termination-log"), str(before)])
    assert first == [before / "secrets", tmp_path / "dev-termination-log"]  # `before` existed: not held
    (before / "secrets" / "kubernetes.io" / "serviceaccount").mkdir(parents=True)  # what mkdir -p / touch make
    (tmp_path / "dev-termination-log").touch()
    second = points.hold([token])  # a second pod, while the first still runs: the same top, held twice
    assert second == [before / "secrets"]
    points.release(first)
    assert (before / "secrets" / "kubernetes.io" / "serviceaccount").is_dir()  # the second pod still mounts there
    assert not (tmp_path / "dev-termination-log").exists()
    points.release(second)
    assert not (before / "secrets").exists() and before.is_dir()


def test_a_mount_point_someone_wrote_into_is_kept(tmp_path):
    points = MountPoints()
    held = points.hold([str(tmp_path / "app" / "data")])
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "notes.txt").write_text("not empty")
    points.release(held)
    assert (tmp_path / "app" / "notes.txt").read_text() == "not empty" and not (tmp_path / "app" / "data").exists()
