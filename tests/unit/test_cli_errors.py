"""The CLI's and the SDK's failure paths (issue 22.6): one line that says what to do, an exit code per cause,
and the cluster and kubetune's CRDs checked before anything is uploaded.

The API server here is a small HTTP server of the test's own that answers only what each test gives it
(discovery of kubetune.io/v1alpha1, one Experiment, its Trials), the way the real one answers: the
client library's real requests go over a real socket.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from kubernetes.client import ApiException

from kubetune.sdk import cli, tuner
from kubetune.sdk.client import Cluster, ClusterUnavailable, ExperimentExists, ExperimentNotFound, follow

DISCOVERY = "/apis/kubetune.io/v1alpha1"
SERVED = {
    "kind": "APIResourceList",
    "groupVersion": "kubetune.io/v1alpha1",
    "resources": [
        {"name": "experiments", "namespaced": True, "kind": "Experiment", "verbs": ["get"], "singularName": ""},
        {"name": "trials", "namespaced": True, "kind": "Trial", "verbs": ["get"], "singularName": ""},
    ],
}


class ApiServer:
    """``routes``: path → JSON body (200), an int (that status), a list of those (answered in turn, the last one
    from then on), or None (404 with a Status, as the API server answers)."""

    def __init__(self):
        self.routes: dict[str, object] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                server.requests.append(path)
                body = server.routes.get(path)
                if isinstance(body, list):  # a list of statuses to answer first, then the last item's body
                    body = body.pop(0) if len(body) > 1 else body[0]
                status = body if isinstance(body, int) else 200 if body is not None else 404
                if isinstance(body, int):
                    body = {"kind": "Status", "status": "Failure", "message": f"status {body}", "code": body}
                if body is None:
                    body = {
                        "kind": "Status",
                        "status": "Failure",
                        "message": "the server could not find the requested resource",
                        "reason": "NotFound",
                        "code": 404,
                    }
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def kubeconfig(path, server: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
        "current-context": "dev",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def api(tmp_path, monkeypatch):
    server = ApiServer()
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", server.url))
    yield server
    server.close()


def run_cli(capsys, *args) -> tuple[int, list[str]]:
    code = cli.main(list(args))
    return code, capsys.readouterr().err.splitlines()


def test_no_kubeconfig_is_one_line_and_exit_4(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = run_cli(capsys, "get")
    assert code == cli.CLUSTER == 4
    assert err == [
        f"error: no kubeconfig at {tmp_path / 'missing'}: set KUBECONFIG to one, or run where "
        "~/.kube/config reaches a cluster"
    ]


def test_an_unknown_context_names_the_contexts_there(api, tmp_path, capsys):
    code, err = run_cli(capsys, "get", "--context", "prod")
    assert code == cli.CLUSTER
    assert err == [f"error: no context 'prod' in {tmp_path / 'kubeconfig'}; its contexts: dev"]


def test_an_unreachable_api_server_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1"))
    code, err = run_cli(capsys, "watch", "x")
    assert code == cli.CLUSTER
    assert err == [
        "error: cannot reach the API server https://127.0.0.1:1: [Errno 111] Connection refused (is the "
        "cluster up? `kubectl cluster-info` checks the same kubeconfig)"
    ]


def test_missing_crds_are_named_before_any_other_call(api, capsys):
    code, err = run_cli(capsys, "get", "x")
    assert code == cli.CLUSTER
    assert len(err) == 1 and "kubetune's CRDs are not installed in the cluster at " + api.url in err[0]
    assert api.requests == [DISCOVERY]


def test_an_absent_experiment_is_not_found(api, capsys):
    api.routes[DISCOVERY] = SERVED
    code, err = run_cli(capsys, "get", "x")
    assert (code, err) == (cli.NOT_FOUND, ["error: the server could not find the requested resource"])


def test_the_context_namespace_is_the_default(api):
    cluster = Cluster.connect()
    assert (cluster.namespace, cluster.server) == ("team", api.url)


def experiment(name="exp", phase="Running") -> dict:
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": "team", "uid": "u-1"},
        "spec": {"storage": {"uri": "file:///nowhere"}},
        "status": {"phase": phase},
    }


def test_follow_says_the_experiment_went_away(api):
    api.routes[DISCOVERY] = SERVED
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/trials"] = {"items": []}
    exp_path = "/apis/kubetune.io/v1alpha1/namespaces/team/experiments/exp"
    api.routes[exp_path] = experiment()
    seen = []

    def show(exp, trials):
        seen.append(exp["status"]["phase"])
        del api.routes[exp_path]  # deleted between two polls

    with pytest.raises(ExperimentNotFound, match=r"^experiment team/exp is gone \(deleted while it was followed\)"):
        follow(Cluster.connect(), "exp", show, poll_interval_s=0.01)
    assert seen == ["Running"]


def test_ctrl_c_names_the_entry_point_that_reattaches(api):
    api.routes[DISCOVERY] = SERVED
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/trials"] = {"items": []}
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/experiments/exp"] = experiment()

    class CtrlC:
        def update(self, exp, trials):
            raise KeyboardInterrupt

        def close(self):
            pass

    with pytest.raises(tuner.Detached) as caught:
        tuner.Tuner.restore("exp", run_config=tuner.RunConfig(progress_reporter=CtrlC()), storage="file:///x").fit()
    assert (caught.value.name, caught.value.namespace) == ("exp", "team")
    assert str(caught.value) == (
        "detached from experiment team/exp, which keeps running in the cluster: re-attach with "
        "Tuner.restore('exp') or `kubetune watch exp -n team`; stop it with `kubetune suspend exp -n team` or "
        "`kubetune delete exp -n team`"
    )
    with pytest.raises(tuner.Detached, match=r"re-attach with tune\.run\(\.\.\., restore='exp', namespace='team'\)"):
        tuner.run("m:T", restore="exp", namespace="team", progress_reporter=CtrlC(), storage="file:///x")


def test_restoring_an_absent_experiment_is_not_found(api):
    api.routes[DISCOVERY] = SERVED
    with pytest.raises(ExperimentNotFound, match=r"^no experiment team/gone to restore$"):
        tuner.run("m:T", restore="gone", storage="file:///x")


def test_tune_run_checks_the_crds_before_uploading_anything(api, tmp_path):
    store = tmp_path / "store"
    store.mkdir()

    def trainable(config):
        pass

    with pytest.raises(ClusterUnavailable, match=r"kubetune's CRDs are not installed"):
        tuner.run(trainable, storage=store.as_uri(), config={"x": 1})
    assert list(store.iterdir()) == []
    assert api.requests == [DISCOVERY]


def test_get_shows_why_an_experiment_needs_a_look(api, capsys):
    """Issue 22.4: a stall (or an end for a reason while the last trials stop) shows in ``kubetune get``."""
    api.routes[DISCOVERY] = SERVED
    stalled = experiment()
    stalled["status"]["conditions"] = [
        {"type": "Running", "status": "True", "reason": "TrialsRunning", "message": "2 running"},
        {"type": "TrialsStalled", "status": "True", "reason": "StorageUnreachable", "message": "1 trial(s) stalled"},
    ]
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/experiments"] = {"items": [stalled]}
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/experiments/exp"] = stalled
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/trials"] = {"items": []}
    assert cli.main(["get"]) == cli.OK
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "PHASE", "RUNNING", "SUCCEEDED", "FAILED", "BEST", "REASON", "AGE"]
    assert row.split() == ["exp", "Running", "0", "0", "0", "-", "StorageUnreachable", "-"]
    assert cli.main(["get", "exp"]) == cli.OK
    assert capsys.readouterr().out.splitlines()[2] == "TrialsStalled (StorageUnreachable): 1 trial(s) stalled"


def test_follow_polls_through_server_errors_but_not_through_a_refusal(api):
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/trials"] = {"items": []}
    exp_path = "/apis/kubetune.io/v1alpha1/namespaces/team/experiments/exp"
    api.routes[exp_path] = [503, 503, experiment(phase="Succeeded")]
    final, trials = follow(Cluster.connect(), "exp", poll_interval_s=0.01)
    assert final["status"]["phase"] == "Succeeded" and trials == []
    api.routes[exp_path] = 403
    with pytest.raises(ClusterUnavailable, match=r"refused the request: status 403$"):
        follow(Cluster.connect(), "exp", poll_interval_s=0.01)


def test_storage_that_cannot_be_written_is_one_line_and_exit_5_before_anything_is_created(api, monkeypatch, capsys):
    api.routes[DISCOVERY] = SERVED
    monkeypatch.setattr("kubetune.storage.SDK_OUTAGE_TIMEOUT_S", 0.5)  # 30 s for users
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("KUBETUNE_STORAGE_ENDPOINT", "http://127.0.0.1:1")
    code, err = run_cli(capsys, "run", "m:T", "--config", "{}", "--storage", "s3://bucket/x")
    assert code == cli.STORAGE and len(err) == 1, err
    assert err[0].startswith("error: cannot write to storage s3://bucket/x/team/") and "check the storage URI" in err[0]
    assert api.requests == [DISCOVERY]  # no Experiment was created


@pytest.mark.parametrize("status, kept", [(409, []), (503, ["functions", "trainable"])])
def test_an_experiment_the_api_server_refuses_takes_back_only_what_its_run_uploaded(api, tmp_path, status, kept):
    """After a 4xx nothing uses what the run uploaded; after a 5xx the Experiment may exist, so it stays."""
    api.routes[DISCOVERY] = SERVED
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/experiments"] = status
    store = tmp_path / "store"
    earlier = store / "team" / "refused" / "sdk" / "trainable" / "earlier.pkl"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"an Experiment of this name uploaded it")

    def trainable(config):
        pass

    with pytest.raises(ExperimentExists if status == 409 else ApiException) as refused:
        tuner.run(trainable, name="refused", storage=store.as_uri(), config={"f": tune_sample_from()})
    if status == 409:  # Ray would run into the folder of that name: the ways on, named
        assert str(refused.value) == (
            "an Experiment named 'refused' is already in namespace team: follow it (resume=True in tune.run, "
            "Tuner.restore('refused'), kubetune watch refused), delete it first to run afresh (kubetune delete "
            "refused), or give this run another name"
        )
    else:
        assert refused.value.status == status
    left = sorted(p.parent.name for p in store.rglob("*.pkl") if p.name != "earlier.pkl")
    assert earlier.is_file() and left == kept


def tune_sample_from():
    from kubetune.search import sample_from

    return sample_from(lambda spec: 1)


def test_an_unexpected_error_is_one_line_and_exit_70_unless_debugging(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("something kubetune did not expect")

    monkeypatch.setattr(cli, "_cluster", broken)
    code, err = run_cli(capsys, "get")
    assert code == cli.UNEXPECTED and len(err) == 1
    assert err[0].startswith("error: unexpected RuntimeError: something kubetune did not expect (a bug")
    monkeypatch.setenv("KUBETUNE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["get"])
