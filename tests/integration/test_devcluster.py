"""The local control plane behaves like Kubernetes: real API server, RBAC,
scheduler with GPU accounting, garbage collector, namespaces, and a process
kubelet that runs pods, reports status and honours graceful deletion."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import time

import pytest
from kubernetes import client

from devcluster import Cluster, ClusterConfig, build, procs
from devcluster.testkit import wait_for

PY = sys.executable


def pod_manifest(name, script, *, node=None, gpus=0, restart="Never", grace=30, **container_extra):
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [PY, "-c", textwrap.dedent(script)],
        **container_extra,
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {
        "containers": [container],
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": grace,
        "automountServiceAccountToken": False,
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def get_pod(core, ns, name):
    try:
        return json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def phase(core, ns, name):
    pod = get_pod(core, ns, name)
    return pod and pod.get("status", {}).get("phase")


def test_server_reports_the_pinned_release(cluster):
    out = cluster.kubectl("version", "-o", "json").stdout
    versions = json.loads(out)
    assert versions["serverVersion"]["gitVersion"] == build.KUBERNETES_VERSION
    assert versions["clientVersion"]["gitVersion"] == build.KUBERNETES_VERSION


def test_crd_fields_are_explained(cluster):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.devcluster.test"},
        "spec": {
            "group": "devcluster.test",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A widget for the test.",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "description": "What the widget should be.",
                                    "properties": {
                                        "size": {"type": "integer", "description": "Size of the widget in cogs."}
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(crd))
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.devcluster.test", "--timeout=60s")

    def explained():
        proc = cluster.kubectl("explain", "widget.spec.size", check=False)
        return proc.returncode == 0 and "Size of the widget in cogs." in proc.stdout

    wait_for(explained, timeout=60, interval=1, what="kubectl explain to show the CRD's description")
    cluster.kubectl("delete", "crd", "widgets.devcluster.test")


def test_rbac_denies_a_service_account_without_a_role(cluster, core, namespace):
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token("nobody", namespace, {"spec": {"audiences": None}})
    cfg = client.Configuration()
    cfg.host = cluster.api_url
    cfg.ssl_ca_cert = str(cluster.workdir / "pki" / "ca.crt")
    cfg.api_key = {"authorization": f"Bearer {token.status.token}"}
    denied = client.CoreV1Api(client.ApiClient(cfg))
    with pytest.raises(client.ApiException) as exc:
        denied.list_namespaced_pod(namespace)
    assert exc.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in exc.value.body


def test_one_gpu_node_runs_one_gpu_pod_at_a_time(cluster, core, namespace, tmp_path):
    # each pod holds its GPU until the test lets it go (a file it waits for, up to 120 s): the second pod is seen
    # unschedulable while the first runs however slow the machine is (a fixed sleep raced the scheduler under load)
    release = tmp_path / "release"
    script = f"""
        import os, time
        print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)
        deadline = time.monotonic() + 120
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.1)
    """
    core.create_namespaced_pod(namespace, pod_manifest("first", script, node="devcluster-node-1", gpus=1))
    wait_for(lambda: phase(core, namespace, "first") == "Running", what="first pod Running")
    core.create_namespaced_pod(namespace, pod_manifest("second", script, node="devcluster-node-1", gpus=1))

    def unschedulable():
        pod = get_pod(core, namespace, "second")
        conds = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}
        return conds.get("PodScheduled", {}).get("reason") == "Unschedulable"

    wait_for(unschedulable, what="second pod Unschedulable")
    assert phase(core, namespace, "second") == "Pending"
    assert phase(core, namespace, "first") == "Running"
    release.touch()
    wait_for(lambda: phase(core, namespace, "first") == "Succeeded", what="first pod to finish")
    wait_for(
        lambda: phase(core, namespace, "second") in ("Running", "Succeeded"),
        timeout=90,
        what="second pod to run after the GPU is released",
    )
    wait_for(lambda: phase(core, namespace, "second") == "Succeeded", what="second pod to finish")
    for name in ("first", "second"):
        log = (cluster.workdir / "pods" / f"{namespace}_{name}" / "main.log").read_text()
        assert "gpus=0" in log


def test_concurrent_gpu_pods_get_distinct_device_ids(cluster, core, namespace):
    script = "import os, time; print('gpus=' + os.environ['NVIDIA_VISIBLE_DEVICES'], flush=True); time.sleep(2)"
    for i in range(2):
        core.create_namespaced_pod(namespace, pod_manifest(f"g{i}", script, node="devcluster-node-0", gpus=2))
    for i in range(2):
        wait_for(lambda: phase(core, namespace, f"g{i}") == "Succeeded", what=f"pod g{i} to finish")
    seen = [
        (cluster.workdir / "pods" / f"{namespace}_g{i}" / "main.log").read_text().split("gpus=")[1].split()[0]
        for i in range(2)
    ]
    ids = [set(s.split(",")) for s in seen]
    assert all(len(s) == 2 for s in ids) and not (ids[0] & ids[1]), seen


def test_exit_codes_set_phase_and_termination_message(core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("ok", "print('fine')"))
    fail = """
        import sys
        open('/dev/termination-log', 'w').write('boom: the reason')
        sys.exit(3)
    """
    core.create_namespaced_pod(namespace, pod_manifest("bad", fail))
    wait_for(lambda: phase(core, namespace, "ok") == "Succeeded", what="ok Succeeded")
    wait_for(lambda: phase(core, namespace, "bad") == "Failed", what="bad Failed")
    ok = get_pod(core, namespace, "ok")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ok["exitCode"] == 0 and ok["reason"] == "Completed"
    bad = get_pod(core, namespace, "bad")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert bad["exitCode"] == 3 and bad["reason"] == "Error"
    assert bad["message"] == "boom: the reason"


def test_env_volumes_and_working_dir_are_what_a_container_sees(cluster, core, namespace):
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"s3cret").decode()}}
    )
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"mode": "fast", "LEVEL": "3"}}
    )
    script = """
        import json, os
        os.makedirs('/scratch/sub', exist_ok=True)
        open('/scratch/sub/file', 'w').write('x')
        print(json.dumps({k: os.environ.get(k) for k in ('A', 'B', 'C', 'D', 'POD', 'NS', 'LEVEL', 'CFG_LEVEL')}
                         | {'cwd': os.getcwd(), 'scratch': os.listdir('/scratch')}), flush=True)
    """
    env = [
        {"name": "A", "value": "plain"},
        {"name": "B", "value": "$(A)-expanded"},
        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    env_from = [{"configMapRef": {"name": "settings"}}, {"configMapRef": {"name": "settings"}, "prefix": "CFG_"}]
    manifest = pod_manifest(
        "envy",
        script,
        env=env,
        envFrom=env_from,
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        workingDir="/scratch",
    )
    manifest["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "envy") in ("Succeeded", "Failed"), what="envy to finish")
    log = (cluster.workdir / "pods" / f"{namespace}_envy" / "main.log").read_text()
    assert phase(core, namespace, "envy") == "Succeeded", log
    seen = json.loads(log.strip().splitlines()[-1])
    assert seen == {
        "A": "plain",
        "B": "plain-expanded",
        "C": "s3cret",
        "D": "fast",
        "POD": "envy",
        "NS": namespace,
        "LEVEL": "3",
        "CFG_LEVEL": "3",
        "cwd": "/scratch",
        "scratch": ["sub"],
    }
    # the emptyDir lives in the pod's folder on the host, not at /scratch
    assert (cluster.workdir / "pods" / f"{namespace}_envy" / "volumes" / "scratch" / "sub" / "file").exists()


def test_a_volume_over_the_clusters_folder_leaves_later_mounts_and_the_termination_message_working(
    cluster, core, namespace
):
    # Every volume's host folder and the termination-message file live under the cluster's work folder, so a
    # volume mounted there (as an emptyDir at /tmp would, where the work folder is under /tmp) covers the host
    # paths of the mounts made after it. The interpreter lives elsewhere, so the pod can still start. The child
    # mountPath is listed before its parent to check that parents are mounted first.
    top = str(cluster.workdir)
    assert not sys.executable.startswith(top + "/")
    script = f"""
        import json, os
        seen = {{'top': os.listdir({top!r}), 'inner': os.listdir({top!r} + '/inner'), 'data': os.listdir('/data')}}
        open({top!r} + '/t', 'w').write('t')
        open({top!r} + '/inner/i', 'w').write('i')
        open('/data/d', 'w').write('d')
        open('/dev/termination-log', 'w').write(json.dumps(seen))
    """
    mounts = [
        {"name": "inner", "mountPath": top + "/inner"},
        {"name": "top", "mountPath": top},
        {"name": "data", "mountPath": "/data"},
    ]
    manifest = pod_manifest("covering", script, volumeMounts=mounts)
    manifest["spec"]["volumes"] = [{"name": n, "emptyDir": {}} for n in ("top", "inner", "data")]
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "covering") in ("Succeeded", "Failed"), what="covering to finish")
    pod_dir = cluster.workdir / "pods" / f"{namespace}_covering"
    assert phase(core, namespace, "covering") == "Succeeded", (pod_dir / "main.log").read_text()
    term = get_pod(core, namespace, "covering")["status"]["containerStatuses"][0]["state"]["terminated"]
    # each volume starts empty (the top one holds only the mount point of the inner one) and keeps what was written
    assert json.loads(term["message"]) == {"top": ["inner"], "inner": [], "data": []}
    volumes = pod_dir / "volumes"
    assert sorted(p.name for p in (volumes / "top").iterdir()) == ["inner", "t"]
    assert (volumes / "inner" / "i").read_text() == "i" and (volumes / "data" / "d").read_text() == "d"


def test_missing_secret_keeps_pod_pending_until_it_exists(core, namespace):
    env = [{"name": "C", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}]
    core.create_namespaced_pod(namespace, pod_manifest("waits", "import os; assert os.environ['C'] == 'v'", env=env))

    def config_error():
        pod = get_pod(core, namespace, "waits")
        sts = pod.get("status", {}).get("containerStatuses") or []
        return sts and sts[0]["state"].get("waiting", {}).get("reason") == "CreateContainerConfigError"

    wait_for(config_error, what="CreateContainerConfigError")
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "later"}, "data": {"k": base64.b64encode(b"v").decode()}}
    )
    wait_for(lambda: phase(core, namespace, "waits") == "Succeeded", what="pod to run once the secret exists")


def test_restart_policy_on_failure_restarts_until_success(core, namespace):
    script = """
        import os, sys
        n = int(open('/state/n').read()) if os.path.exists('/state/n') else 0
        open('/state/n', 'w').write(str(n + 1))
        sys.exit(0 if n >= 1 else 1)
    """
    manifest = pod_manifest(
        "flaky", script, restart="OnFailure", volumeMounts=[{"name": "state", "mountPath": "/state"}]
    )
    manifest["spec"]["volumes"] = [{"name": "state", "emptyDir": {}}]
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "flaky") == "Succeeded", timeout=60, what="flaky to succeed")
    status = get_pod(core, namespace, "flaky")["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_graceful_deletion_sends_sigterm_and_removes_the_pod(cluster, core, namespace):
    script = """
        import signal, sys, time
        def bye(*_):
            print('got SIGTERM', flush=True)
            time.sleep(0.5)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print('started', flush=True)
        time.sleep(600)
    """
    core.create_namespaced_pod(namespace, pod_manifest("polite", script, grace=20))
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('started', flush=True); "
        "time.sleep(600)"
    )
    core.create_namespaced_pod(namespace, pod_manifest("stubborn", stubborn, grace=2))
    logs = {n: cluster.workdir / "pods" / f"{namespace}_{n}" / "main.log" for n in ("polite", "stubborn")}
    for name in logs:
        wait_for(lambda: logs[name].exists() and "started" in logs[name].read_text(), what=f"{name} to start")
    started = time.monotonic()
    core.delete_namespaced_pod("polite", namespace)
    core.delete_namespaced_pod("stubborn", namespace)
    wait_for(lambda: get_pod(core, namespace, "polite") is None, timeout=30, what="polite pod to disappear")
    assert "got SIGTERM" in logs["polite"].read_text()
    wait_for(lambda: get_pod(core, namespace, "stubborn") is None, timeout=30, what="stubborn pod to disappear")
    assert time.monotonic() - started >= 2.0  # it was given its grace period before SIGKILL


def test_deleting_an_owner_collects_what_it_owns(core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
        "controller": True,
    }
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "owned", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Foreground")

    def gone():
        try:
            core.read_namespaced_config_map("owned", namespace)
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for(gone, timeout=60, what="the owned ConfigMap to be garbage-collected")


def test_deleting_a_namespace_with_a_running_pod_completes(cluster, core):
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_pod("doomed", pod_manifest("sleeper", "import time; time.sleep(600)", grace=5))
    wait_for(lambda: phase(core, "doomed", "sleeper") == "Running", what="sleeper Running")
    core.delete_namespace("doomed")

    def namespace_gone():
        try:
            core.read_namespace("doomed")
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for(namespace_gone, timeout=90, interval=0.5, what="namespace deletion to complete")


def test_logs_cli_prints_a_pods_output(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("talker", "print('hello from the pod')"))
    wait_for(lambda: phase(core, namespace, "talker") == "Succeeded", what="talker to finish")
    out = subprocess.run(
        [PY, "-m", "devcluster", "--dir", str(cluster.workdir), "logs", "talker", "-n", namespace],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "hello from the pod" in out


def test_the_api_server_serves_pod_logs_from_the_process_kubelet(cluster, core, namespace):
    script = """
        import sys, time
        for i in range(4):
            print(f"line {i}", flush=True)
            time.sleep(0.5)
    """
    core.create_namespaced_pod(namespace, pod_manifest("logger", script))
    wait_for(lambda: phase(core, namespace, "logger") == "Running", what="logger to run")
    # follow: the stream ends when the container exits, with every line
    followed = core.read_namespaced_pod_log("logger", namespace, follow=True, _preload_content=False).data.decode()
    assert followed.splitlines() == ["line 0", "line 1", "line 2", "line 3"]
    wait_for(lambda: phase(core, namespace, "logger") == "Succeeded", what="logger to finish")
    tail = core.read_namespaced_pod_log("logger", namespace, tail_lines=2, _preload_content=False).data
    assert tail == b"line 2\nline 3\n"  # raw: the Python client would return the bytes' repr as str
    kubectl = subprocess.run(
        [
            str(build.binary_path("kubectl")),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "logs",
            "logger",
            "-n",
            namespace,
            "--limit-bytes=6",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert kubectl.stdout == "line 0"
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod_log("logger", namespace, container="other")
    assert missing.value.status == 400  # the API server checks the container name itself


def test_teardown_leaves_no_process_behind(tmp_path):
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=1), workdir=tmp_path / "c") as c:
        core = client.CoreV1Api(c.api_client())
        core.create_namespaced_pod("default", pod_manifest("lingerer", "import time; time.sleep(600)"))
        wait_for(lambda: phase(core, "default", "lingerer") == "Running", what="lingerer Running")
        pod_pid = int(
            get_pod(core, "default", "lingerer")["status"]["containerStatuses"][0]["containerID"].split("://")[1]
        )
        pids = dict(c.state["pids"])
    assert set(pids) == {"s3", "etcd", "apiserver", "scheduler", "controller-manager", "kubelet"}
    assert not [name for name, pid in pids.items() if procs.pid_alive(pid)]
    assert not procs.pid_alive(pod_pid)
