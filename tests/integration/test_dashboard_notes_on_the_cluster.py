"""The dashboard's notes against the local cluster (issue 32): ``kubetune dashboard`` with no name, as a process.

An Experiment of one trial that runs for about 20 s (the real operator, the runtime's image). With the admin
kubeconfig, the study's note (Optuna Dashboard's API, as the page gets it) shows the Experiment's conditions as a
table and the Events about it and its Trial; the trial's user attributes hold its Trial's phase and attempt; and its
note shows the tail of its pod's log (the runtime's own log lines among them). As the viewer of
test_dashboard_list (a ServiceAccount that may list Experiments and Trials in the namespace, nothing else), the
note shows the conditions and says that the Events cannot be read (403), and nothing fails.
"""

from __future__ import annotations

import json
import os
import urllib.request

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from tests.integration.test_dashboard_list import Served, viewer_kubeconfig

GROUP, VERSION = "kubetune.io", "v1alpha1"


def experiment(name: str, cluster, secret: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "trainable": {"entrypoint": "tests.integration.trainables:Counter"},
            "image": "kubetune/runtime:test",
            "config": {"x": 1, "sleep": 1},
            "metric": "score",
            "mode": "max",
            "stop": {"training_iteration": 20},
            "storage": {
                "uri": f"s3://{S3_BUCKET}/dashboard-notes",
                "endpoint": cluster.s3_endpoint,
                "region": "us-east-1",
                "credentialsSecret": secret,
            },
        },
    }


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def study_of(served: Served, name: str) -> dict | None:
    """The study detail of study ``name`` (Optuna Dashboard's API), or None while it is not listed."""
    api = served.url.replace("/dashboard", "/api")
    for summary in _get(f"{api}/studies")["study_summaries"]:
        if summary["study_name"] == name:
            return _get(f"{api}/studies/{summary['study_id']}")
    return None


def _attrs(trial: dict) -> dict:
    return {a["key"]: a["value"] for a in trial["user_attrs"]}


def test_the_notes_show_conditions_events_the_trials_status_and_its_log(
    cluster,
    core,
    custom,
    api,
    namespace,
    operator,
    storage_secret,
    tmp_path,
):
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", experiment("notes", cluster, storage_secret)
    )
    env = {**os.environ, **cluster.env()}
    name, trial = f"{namespace}/notes", "notes-00000"

    admin = Served(env)
    try:

        def noted():
            study = study_of(admin, name)
            note = (study or {}).get("note", {}).get("body", "")
            return note if "| Ready | True |" in note and f"trial/{trial}" in note else None

        note = wait_for(noted, timeout=120, what="the study's note to show the conditions and the Trial's Events")
        assert "### Conditions" in note and "### Events" in note, note

        def logged():
            study = study_of(admin, name)
            shown = [t for t in (study or {}).get("trials", []) if _attrs(t).get("kubetune_trial") == trial]
            # the runtime's log lines, and a first result (best_<metric> comes with the first finite value)
            if shown and " INFO kubetune.runtime." in shown[0]["note"]["body"] and "best_score" in _attrs(shown[0]):
                return shown[0]
            return None

        shown = wait_for(logged, timeout=120, what="the trial's note to show its pod's log")
        attrs = _attrs(shown)
        assert attrs["phase"] in ("Running", "Succeeded") and attrs["attempt"] == "0", attrs  # served as text
        assert {"phase", "reason", "pending_cause", "attempt", "best_score"} <= set(attrs), attrs
        assert f"Last 50 lines of the log of pod `{trial}-0`" in shown["note"]["body"]
    finally:
        err = admin.stop()
    assert "Traceback" not in err, err

    kubeconfig = viewer_kubeconfig(cluster, core, api, namespace, tmp_path / "viewer.kubeconfig")
    viewer = Served({**env, "KUBECONFIG": str(kubeconfig)}, "-n", namespace)
    try:

        def refused():
            note = ((study_of(viewer, name) or {}).get("note") or {}).get("body", "")
            return note if "The Events cannot be read: 403" in note else None

        note = wait_for(refused, timeout=60, what="the viewer's note to say that the Events cannot be read")
        assert "| Ready | True |" in note, note
    finally:
        err = viewer.stop()
    assert "Traceback" not in err, err
