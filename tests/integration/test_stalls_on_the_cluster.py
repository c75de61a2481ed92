"""Issue 22.4 on the local cluster: each silent stall of before is a condition and a Warning event on the
Experiment within a bounded time (each test prints the time it took), and ``kubetune get`` shows it; and the
SDK's pre-flight check (issue 22.6) costs one request (its latency is printed)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from tests.integration.test_operator import posted

GROUP, VERSION = "kubetune.io", "v1alpha1"


def experiment(name, cluster, secret, *, config, storage=None, **spec):
    body = {
        "trainable": {"entrypoint": "tests.integration.trainables:Counter"},
        "image": "kubetune/runtime:test",
        "config": config,
        "metric": "score",
        "mode": "max",
        "stop": {"training_iteration": 3},
        "storage": storage
        or {
            "uri": f"s3://{S3_BUCKET}/experiments",
            "endpoint": cluster.s3_endpoint,
            "region": "us-east-1",
            "credentialsSecret": secret,
        },
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Experiment", "metadata": {"name": name}, "spec": body}


def create(custom, namespace, body) -> float:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", body)
    return time.monotonic()


def condition(custom, namespace, name, type_):
    exp = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)
    return next((c for c in (exp.get("status") or {}).get("conditions") or () if c["type"] == type_), None)


def warnings(core, namespace, reason):
    return [e for e in core.list_namespaced_event(namespace).items if e.reason == reason and e.type == "Warning"]


def kubetune_get(cluster, namespace) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "kubetune.sdk.cli", "get", "-n", namespace],
        env={**cluster.env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def test_storage_without_its_endpoint_is_reported_as_unreachable(
    cluster, operator, custom, core, namespace, storage_secret
):
    # no endpoint: boto3 goes to AWS, here a region of AWS that does not exist, so that no machine answers
    storage = {"uri": f"s3://{S3_BUCKET}/x", "region": "kubetune-nowhere-1", "credentialsSecret": storage_secret}
    started = create(custom, namespace, experiment("nostore", cluster, None, config={"x": 1}, storage=storage))

    def stalled():
        cond = condition(custom, namespace, "nostore", "TrialsStalled")
        return cond if cond and cond["status"] == "True" else None

    try:
        wait_for(stalled, timeout=120, interval=0.5, what="TrialsStalled=True")
    except AssertionError:
        trial = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trials", "nostore-00000")
        log = core.read_namespaced_pod_log("nostore-00000-0", namespace)
        raise AssertionError(f"no TrialsStalled; trial status {trial.get('status')}; pod log:\n{log[-3000:]}") from None
    took = time.monotonic() - started
    print(f"\nstorage unreachable -> TrialsStalled: {took:.1f} s after creation")
    cond = stalled()
    assert cond["reason"] == "StorageUnreachable"
    assert "(AWS S3: spec.storage.endpoint is not set)" in cond["message"], cond["message"]
    assert cond["message"].startswith("1 trial(s) stalled; nostore-00000: storage endpoint https://")
    posted(core, namespace, "StorageUnreachable", type_="Warning")
    trial = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trials", "nostore-00000")
    assert (trial["status"]["phase"], trial["status"]["reason"]) == ("Running", "StorageUnreachable")
    header, row = kubetune_get(cluster, namespace)[:2]
    assert "REASON" in header.split() and "StorageUnreachable" in row.split()

    # SIGKILL the operator: the stall is in the Trial's status, the condition stays and is not announced again
    operator.kill()
    operator.start()
    time.sleep(10)  # the restarted operator's first passes
    assert stalled()["reason"] == "StorageUnreachable"
    assert sum(e.count or 1 for e in warnings(core, namespace, "StorageUnreachable")) == 1
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", "nostore")


def test_a_metric_the_trainable_never_reports_fails_the_experiment(
    cluster, operator, custom, core, namespace, storage_secret
):
    body = experiment(
        "nometric",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2, 3]}},
        metric="accuracy",  # Counter reports score
        scheduler={"name": "asha", "params": {"max_t": 3, "grace_period": 1}},
        maxConcurrentTrials=2,
    )
    started = create(custom, namespace, body)
    wait_for(lambda: warnings(core, namespace, "MetricMissing"), timeout=120, interval=0.5, what="MetricMissing")
    print(f"\nmetric missing -> MetricMissing event: {time.monotonic() - started:.1f} s after creation")

    def failed():
        cond = condition(custom, namespace, "nometric", "Failed")
        return cond if cond and cond["status"] == "True" else None

    wait_for(failed, timeout=120, interval=0.5, what="Failed=True")
    print(f"metric missing -> Failed: {time.monotonic() - started:.1f} s after creation")
    cond = failed()
    assert cond["reason"] == "MetricMissing"
    assert "did not include the specified metric(s) accuracy that spec.metric expects" in cond["message"]
    assert "score" in cond["message"]  # what the result had
    exp = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", "nometric")
    assert exp["status"]["phase"] == "Failed" and exp["status"]["trials"]["total"] <= 2  # nothing more created


def test_an_unknown_domain_is_refused_up_front(cluster, operator, custom, core, namespace, storage_secret):
    started = create(
        custom, namespace, experiment("gauss", cluster, storage_secret, config={"x": {"gaussian": [0, 1]}})
    )

    def refused():
        cond = condition(custom, namespace, "gauss", "Ready")
        return cond if cond and cond["status"] == "False" else None

    wait_for(refused, timeout=60, interval=0.2, what="Ready=False")
    print(f"\nunknown domain -> Ready=False/InvalidSpec: {time.monotonic() - started:.1f} s after creation")
    cond = refused()
    assert cond["reason"] == "InvalidSpec"
    assert cond["message"].startswith("config.x: 'gaussian' is not a domain kubetune knows (use randn(mean, sd))")
    assert "the domains are: choice, grid_search" in cond["message"]
    posted(core, namespace, "InvalidSpec", type_="Warning")
    assert custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"] == []
    header, row = kubetune_get(cluster, namespace)[:2]
    assert row.split()[:2] == ["gauss", "Pending"] and "InvalidSpec" in row.split()


def test_the_sdk_pre_flight_check_costs_one_request(cluster, monkeypatch):
    for key, value in cluster.env().items():
        monkeypatch.setenv(key, value)
    from kubetune.sdk.client import Cluster

    cold = []
    for _ in range(5):  # a fresh client each time, as tune.run makes: the TLS handshake is in the first request
        started = time.perf_counter()
        Cluster.connect().check()
        cold.append(time.perf_counter() - started)
    connected = Cluster.connect()
    connected.check()
    warm = []
    for _ in range(20):
        started = time.perf_counter()
        connected.check()
        warm.append(time.perf_counter() - started)
    print(
        f"\npre-flight: connect + check on a fresh client median {statistics.median(cold) * 1000:.1f} ms "
        f"(max {max(cold) * 1000:.1f}); check on a connected client median {statistics.median(warm) * 1000:.1f} ms "
        f"(max {max(warm) * 1000:.1f})"
    )
    assert statistics.median(warm) < 0.1


def test_a_missing_metric_still_fails_the_experiment_after_a_sigkill(
    cluster, operator, custom, core, namespace, storage_secret
):
    body = experiment(
        "nometric2",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2, 3, 4]}, "sleep": 4},  # slow steps: the trials take a while to stop
        metric="accuracy",
        maxConcurrentTrials=2,
    )
    create(custom, namespace, body)
    wait_for(lambda: warnings(core, namespace, "MetricMissing"), timeout=120, interval=0.2, what="MetricMissing")
    operator.kill()
    operator.start()

    def failed():
        cond = condition(custom, namespace, "nometric2", "Failed")
        return cond if cond and cond["status"] == "True" else None

    wait_for(failed, timeout=180, interval=0.5, what="Failed=True after the restart")
    cond = failed()
    assert cond["reason"] == "MetricMissing" and "did not include the specified metric(s) accuracy" in cond["message"]
    exp = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", "nometric2")
    assert exp["status"]["phase"] == "Failed"
