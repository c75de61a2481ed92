"""``kubetune dashboard`` with no name against the local cluster, as a viewer RBAC lets read one namespace only.

Experiments are created in two namespaces (suspended: no trial runs, whether or not the session's operator is up).
A ServiceAccount ``viewer`` may list Experiments and Trials in the first namespace alone (a Role and RoleBinding
there); the command runs as a process with a kubeconfig holding that ServiceAccount's token. The real API server
refuses the viewer's cluster-wide list and the second namespace (403), so the dashboard's home page (Optuna
Dashboard's ``/api/studies``, and the page itself in Debian's Chromium) lists the first namespace's Experiments and
never the second's, and an Experiment created while it serves appears. The same command with the admin kubeconfig
lists all of them, which proves the second namespace's Experiment would show to someone who may read it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from playwright.sync_api import expect, sync_playwright

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for

GROUP, VERSION = "kubetune.io", "v1alpha1"
CHROMIUM = Path("/usr/bin/chromium")


def experiment(name: str, cluster) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "trainable": {"entrypoint": "tests.integration.trainables:Counter"},
            "config": {"x": 1},
            "metric": "score",
            "mode": "max",
            "stop": {"training_iteration": 3},
            "suspend": True,
            "storage": {"uri": f"s3://{S3_BUCKET}/dashboard-list", "endpoint": cluster.s3_endpoint},
        },
    }


@pytest.fixture
def other_namespace(core):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def viewer_kubeconfig(cluster, core, api, namespace: str, path: Path) -> Path:
    """A kubeconfig of ServiceAccount ``viewer`` of ``namespace``, which may list Experiments and Trials there only."""
    rbac = client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "viewer"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "experiment-viewer"},
            "rules": [{"apiGroups": [GROUP], "resources": ["experiments", "trials"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "experiment-viewer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "experiment-viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
        },
    )
    token = core.create_namespaced_service_account_token(
        "viewer", namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cluster_name = admin["contexts"][0]["context"]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": admin["clusters"],
                "users": [{"name": "viewer", "user": {"token": token}}],
                "contexts": [
                    {"name": "viewer", "context": {"cluster": cluster_name, "user": "viewer", "namespace": namespace}}
                ],
                "current-context": "viewer",
            }
        )
    )
    return path


class Served:
    """``kubetune dashboard`` (no name) as a process, with the environment ``env``; stopped with Ctrl-C."""

    def __init__(self, env: dict, *args: str):
        command = [sys.executable, "-m", "kubetune.sdk.cli", "dashboard", "--no-browser", "--port", "0"]
        self.proc = subprocess.Popen([*command, "--refresh", "0.5", *args], stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stderr.readline()
        assert "Optuna Dashboard of the Experiments you may list" in line, line + self.proc.stderr.read()
        self.url = line.split(": ")[-1].split()[0]

    def names(self) -> set[str]:
        with urllib.request.urlopen(self.url.replace("/dashboard", "/api/studies"), timeout=10) as response:
            return {s["study_name"] for s in json.loads(response.read())["study_summaries"]}

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"Ctrl-C did not end the dashboard: {self.proc.communicate()[1][-3000:]}") from None
        assert self.proc.returncode == 0, err
        return err


def test_the_list_shows_only_the_namespaces_the_viewer_may_read(
    cluster, core, custom, api, namespace, other_namespace, tmp_path
):
    for ns, name in ((namespace, "seen-a"), (namespace, "seen-b"), (other_namespace, "hidden")):
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "experiments", experiment(name, cluster))
    env = {**os.environ, **cluster.env()}
    readable = {f"{namespace}/seen-a", f"{namespace}/seen-b"}

    admin = Served(env)  # may list everywhere: the cluster-wide list
    try:
        wait_for(
            lambda: readable | {f"{other_namespace}/hidden"} <= admin.names(),
            timeout=30,
            what="the admin's list to show all three Experiments",
        )
    finally:
        admin.stop()

    kubeconfig = viewer_kubeconfig(cluster, core, api, namespace, tmp_path / "viewer.kubeconfig")
    viewer = Served({**env, "KUBECONFIG": str(kubeconfig)}, "-n", other_namespace, "-n", namespace)
    try:
        wait_for(lambda: viewer.names() == readable, timeout=30, what="the viewer's list to show its namespace's")
        time.sleep(2)  # a few more refreshes: the other namespace is still refused, still not shown
        assert viewer.names() == readable
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", experiment("late", cluster))
        wait_for(
            lambda: viewer.names() == readable | {f"{namespace}/late"},
            timeout=30,
            what="an Experiment created while the dashboard serves to appear",
        )

        assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium (`make host-packages`)"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(viewer.url)
            for name in sorted(readable):
                expect(page.get_by_text(re.compile(rf"^\d+\. {re.escape(name)}$"))).to_be_visible(timeout=30_000)
            expect(page.get_by_text(re.compile(rf"{re.escape(other_namespace)}/"))).to_have_count(0)
            page.screenshot(path=tmp_path / "viewer-list.png", full_page=True)
            browser.close()
    finally:
        err = viewer.stop()
    assert "Traceback" not in err, err
