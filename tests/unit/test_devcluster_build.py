"""Where the control-plane binaries come from: the versioned cache, or an envtest
``KUBEBUILDER_ASSETS`` folder that overrides it binary by binary."""

from __future__ import annotations

from devcluster import build


def test_cache_paths_are_versioned_and_follow_kubetune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBETUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    path = build.binary_path("kube-apiserver")
    assert path.parent.parent == tmp_path / "bin"
    assert build.KUBERNETES_VERSION in path.parent.name and build.ETCD_VERSION in path.parent.name
    assert build.missing_binaries() == list(build.ALL_BINARIES)


def test_kubebuilder_assets_override_the_cache_for_what_they_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBETUNE_CACHE", str(tmp_path / "cache"))
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in ("etcd", "kube-apiserver"):
        (assets / name).write_text("#!/bin/sh\n")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert build.binary_path("etcd") == assets / "etcd"
    assert build.binary_path("kubectl") == build.bin_dir() / "kubectl"
    assert build.missing_binaries(("etcd", "kube-apiserver", "kubectl")) == ["kubectl"]
    assert build.ensure_binaries(("etcd", "kube-apiserver")) == {
        "etcd": assets / "etcd",
        "kube-apiserver": assets / "kube-apiserver",
    }
