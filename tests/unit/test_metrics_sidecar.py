"""The metrics sidecar of container trials (``kubetune.runtime.sidecar``) without a cluster: a file read as it grows,
TensorFlow event files read with TensorBoard's loader, lines pushed over HTTP, the pod with its native sidecar, and
the sidecar process reporting to the operator's real collector until SIGTERM, its last batch marking the output
read to its end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from devcluster.testkit import ConfigMaps, experiment_object, outside_a_pod
from kubetune.env import CONFIG_PATH, METRICS_SOURCE, RESULT_LOG
from kubetune.output_metrics import OutputParser
from kubetune.runtime.sidecar import EventSource, FileSource, PushSource, make_parser, results, run
from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.storage import open_storage
from kubetune_operator.builders import build_pod, trial_object
from kubetune_operator.collector import make_app
from kubetune_operator.container_trials import METRICS_SIDECAR, METRICS_VOLUME, STATE_DIR
from kubetune_operator.experiment_spec import ExperimentSpec
from kubetune_operator.podview import PodView, pod_view
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings


def test_a_file_is_read_as_it_grows_whole_lines_only_and_again_from_its_start_when_truncated(tmp_path):
    path = tmp_path / "metrics.log"
    source = FileSource(str(path))
    assert source.lines() == []  # not written yet
    with open(path, "a") as f:
        f.write("epoch=1 loss=0.5\nepoch=2 lo")
    assert source.lines() == ["epoch=1 loss=0.5"]
    with open(path, "a") as f:
        f.write("ss=0.4\n")
    assert source.lines() == ["epoch=2 loss=0.4"]
    path.write_text("loss=9\n")  # replaced by a shorter file
    assert source.lines() == ["loss=9"]
    with open(path, "a") as f:
        f.write("loss=8")  # no newline: only the last read takes it
    assert source.lines() == [] and source.lines(final=True) == ["loss=8"]


def test_tensorflow_event_files_are_read_by_step_with_the_step_as_the_iteration(tmp_path):
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "train"))
    for step in (1, 2, 3):
        writer.add_scalar("accuracy", 0.5 + step / 10, step)
        writer.add_scalar("loss", 1.0 / step, step)
    writer.close()
    source, parser = EventSource(str(tmp_path)), make_parser({"kind": "TensorFlowEvent", "objectives": ["accuracy"]})
    first = list(results(source, parser))  # step 3 may have more tags to come: held back
    assert [(r["training_iteration"], r["accuracy"], r["loss"]) for r in first] == [
        (1, pytest.approx(0.6), 1.0),
        (2, pytest.approx(0.7), 0.5),
    ]
    time.sleep(1.1)  # a later file: event file names carry the second they were opened
    writer = SummaryWriter(str(tmp_path / "train"))
    writer.add_scalar("accuracy", 0.95, 4)
    writer.close()
    rest = list(results(source, parser, final=True))
    assert [(r["training_iteration"], r["accuracy"]) for r in rest] == [
        (3, pytest.approx(0.8)),
        (4, pytest.approx(0.95)),
    ]
    assert all(isinstance(r["timestamp"], int) for r in first + rest)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: bytes) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_pushed_lines_are_taken_in_order_on_the_loopback_endpoint_only():
    port = free_port()
    source = PushSource(port)
    assert post(f"http://127.0.0.1:{port}/metrics", b"loss=0.5\nloss=0.4") == (202, {"lines": 2})
    assert post(f"http://127.0.0.1:{port}/other", b"loss=1")[0] == 404
    assert source.server.server_address[0] == "127.0.0.1"
    parser = OutputParser(["loss"])
    assert [r["loss"] for r in results(source, parser)] == [0.5, 0.4]
    post(f"http://127.0.0.1:{port}/metrics", b'{"loss": "0.3"}')
    assert [r["loss"] for r in results(source, OutputParser(["loss"], "JSON"), final=True)] == [0.3]


def test_run_reports_every_result_and_what_is_left_once_asked_to_stop(tmp_path):
    path = tmp_path / "m.log"
    path.write_text("loss=1\nloss=2\nloss=3")
    stopping, reported = threading.Event(), []
    stopping.set()
    assert run(FileSource(str(path)), OutputParser(["loss"]), reported.append, stopping) == 3
    assert [r["training_iteration"] for r in reported] == [1, 2, 3]


RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def container_experiment(**collector):
    return experiment_object(
        "boxes",
        "boxes-uid",
        namespace="ns",
        trainable={"command": ["/app/train.sh"], "args": ["--lr=${config.lr}"]},
        image="user/train:1",
        config={"lr": {"grid_search": [0.1]}},
        metric="loss",
        mode="min",
        metricsCollector=collector,
        template={"containers": [{"name": "proxy", "image": "mesh/proxy:1", "securityContext": RESTRICTED}]},
    )


def test_the_pod_of_a_file_collector_has_a_native_sidecar_and_shares_only_the_metrics_folder():
    exp = container_experiment(kind="File", path="/var/log/train/metrics.json", format="JSON")
    assert ExperimentSpec.parse(exp["spec"]).container.path == "/var/log/train/metrics.json"
    pod = build_pod(exp, trial_object("ns", "boxes-00000", "u-1", 0, {"lr": 0.1}), 2, Settings())
    trial, proxy = pod["spec"]["containers"]
    assert proxy["name"] == "proxy" and trial["command"] == ["/app/train.sh"] and trial["args"] == ["--lr=0.1"]
    assert trial["volumeMounts"] == [{"name": METRICS_VOLUME, "mountPath": "/var/log/train"}]
    assert "env" not in trial and pod["spec"]["volumes"] == [{"name": METRICS_VOLUME, "emptyDir": {}}]
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["name"] == METRICS_SIDECAR and sidecar["restartPolicy"] == "Always"
    assert sidecar["command"] == ["python", "-m", "kubetune.runtime.sidecar"]
    assert sidecar["volumeMounts"] == [{"name": METRICS_VOLUME, "mountPath": "/var/log/train", "readOnly": True}]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in sidecar["env"]}
    assert json.loads(env[METRICS_SOURCE]) == {
        "kind": "File",
        "path": "/var/log/train/metrics.json",
        "format": "JSON",
        "metricsFormat": [],
        "objectives": ["loss"],
    }
    assert env["KUBETUNE_TOKEN"] == {"secretKeyRef": {"name": "boxes-00000-2-u-1", "key": "token"}}
    assert env["KUBETUNE_ATTEMPT"] == "2" and sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    push = build_pod(
        container_experiment(kind="Push"), trial_object("ns", "boxes-00000", "u", 0, {"lr": 1}), 0, Settings()
    )
    assert "volumes" not in push["spec"] and "volumeMounts" not in push["spec"]["containers"][0]
    push_env = {e["name"]: e.get("value") for e in push["spec"]["initContainers"][0]["env"]}
    assert json.loads(push_env[METRICS_SOURCE])["port"] == 9109  # the default


def test_paths_that_would_hide_the_image_or_mix_kinds_are_refused():
    for collector, words in [
        ({"kind": "File", "path": "/metrics.log"}, "folder of its own"),
        ({"kind": "File", "path": "relative/m.log"}, "absolute"),
        ({"kind": "TensorFlowEvent", "path": "/"}, "folder of its own"),
        ({"kind": "File"}, "path is required"),
        ({"kind": "StdOut", "path": "/var/log/x"}, "path is required"),
        ({"kind": "File", "path": "/a/b", "port": 9000}, "port is only for kind Push"),
        ({"kind": "TensorFlowEvent", "path": "/a/b", "metricsFormat": [r"(\w+)=(\d+)"]}, "metricsFormat"),
    ]:
        with pytest.raises(ValueError, match=words):
            ExperimentSpec.parse(container_experiment(**collector)["spec"])
    with pytest.raises(ValueError, match="may not name a container trial"):
        exp = container_experiment()
        exp["spec"]["template"]["containers"] = [{"name": "trial", "image": "x"}]
        build_pod(exp, trial_object("ns", "boxes-00000", "u", 0, {"lr": 1}), 0, Settings())


def test_a_trial_container_that_ended_ends_its_attempt_while_another_container_holds_the_pod():
    body = {
        "metadata": {
            "name": "boxes-00000-0",
            "labels": {"kubetune.io/trial": "boxes-00000", "kubetune.io/attempt": "0"},
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "trial", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "proxy", "state": {"running": {}}},
            ],
        },
    }
    view = pod_view(body)
    assert (view.phase, view.lingering, view.exit_code) == ("Succeeded", True, 0)
    body["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 3, "reason": "Error"}}
    assert (pod_view(body).phase, pod_view(body).lingering) == ("Failed", True)
    # every container ended, the kubelet has not written the phase yet: the pod still holds its resources
    body["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert (pod_view(body).phase, pod_view(body).lingering) == ("Running", False)
    body["status"]["containerStatuses"] = body["status"]["containerStatuses"][:1]
    assert (pod_view(body).phase, pod_view(body).lingering) == ("Running", False)


async def collector_with_a_running_trial(experiment: dict) -> tuple:
    """The operator's collector app serving a registry that has loaded ``experiment`` (named ``boxes`` in ``ns``)
    and runs its first trial's attempt 0: ``(controller, runner, env)``, ``env`` the identity variables of that
    attempt's pod (the sidecar's, the restore's) with the collector's URL and the attempt's token. The caller
    cleans ``runner`` up."""
    registry = Registry(Settings(), b"k" * 32, ConfigMaps().write)
    ctl = registry.load(experiment)
    ctl.restore([])
    plan = ctl.plan({}, 1e9)
    ctl.trial_created("boxes-00000", "uid-1")
    ctl.plan({}, 1e9 + 1)
    ctl.plan({"boxes-00000-0": PodView("boxes-00000-0", "boxes-00000", 0, "Running")}, 1e9 + 2)
    assert [t["metadata"]["name"] for t in plan.create_trials] == ["boxes-00000"]
    runner = web.AppRunner(make_app(registry), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    env = {
        **os.environ,
        "KUBETUNE_NAMESPACE": "ns",
        "KUBETUNE_EXPERIMENT": "boxes",
        "KUBETUNE_TRIAL": "boxes-00000",
        "KUBETUNE_ATTEMPT": "0",
        "KUBETUNE_COLLECTOR_URL": f"http://127.0.0.1:{runner.addresses[0][1]}",
        "KUBETUNE_TOKEN": ctl.token("boxes-00000", 0),
        "KUBETUNE_GRACE_PERIOD_S": "10",
    }
    return ctl, runner, env


async def stopped_by_the_kubelet(process: subprocess.Popen, deadline: float) -> None:
    """SIGTERM the sidecar ``process``, as the kubelet does once the trial's container ended; it exits 0 by
    ``deadline`` (``time.monotonic()``)."""
    process.send_signal(signal.SIGTERM)
    while process.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert process.returncode == 0


def test_the_sidecar_process_reports_to_the_real_collector_and_its_last_batch_ends_the_output(tmp_path):
    """The sidecar as the pod runs it (``python -m kubetune.runtime.sidecar``), the operator's collector app with a
    loaded container-trial Experiment: the file's results reach the trial, and SIGTERM sends the rest and ``done``."""
    metrics = tmp_path / "metrics.log"

    async def scenario():
        ctl, runner, env = await collector_with_a_running_trial(container_experiment(kind="File", path=str(metrics)))
        env[METRICS_SOURCE] = json.dumps({"kind": "File", "path": str(metrics), "objectives": ["loss"]})
        metrics.write_text("epoch=1 loss=0.5\n")
        process = subprocess.Popen([sys.executable, "-m", "kubetune.runtime.sidecar"], env=env)
        try:
            deadline = time.monotonic() + 30
            while ctl.trials["boxes-00000"].status.get("iteration") != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert ctl.trials["boxes-00000"].status["lastResult"]["loss"] == 0.5
            assert not ctl.output_read("boxes-00000-0")
            with open(metrics, "a") as f:
                f.write("epoch=2 loss=0.25")  # the last line, without its newline
            await stopped_by_the_kubelet(process, deadline)  # the trial's container ended
        finally:
            process.kill()
            await runner.cleanup()
        status = ctl.trials["boxes-00000"].status
        assert (status["iteration"], status["lastResult"]["loss"]) == (2, 0.25)
        assert ctl.output_read("boxes-00000-0")

    asyncio.run(scenario())


def test_lines_arriving_in_pieces_come_out_whole_and_an_endless_one_is_dropped_to_its_newline():
    from kubetune.output_metrics import MAX_LINE_BYTES, LineBuffer

    lines = LineBuffer()
    assert lines.feed(b"loss=0.5\nlo") == ["loss=0.5"] and lines.feed(b"ss=0.4\n") == ["loss=0.4"]
    assert lines.feed(b"x" * (MAX_LINE_BYTES + 1)) == [] and lines.feed(b"yz\nloss=1") == ["yz"]
    assert lines.end() == ["loss=1"] and lines.end() == []


# Katib's own SDK reports, as a trial's program calls it (its namespace file is the pod's; faked here)
KATIB_REPORT = """
import os, sys
import kubeflow.katib.api.report_metrics as katib
katib.utils.get_current_k8s_namespace = lambda: "team"
os.environ["KATIB_TRIAL_NAME"] = sys.argv[2]
katib.report_metrics({"loss": 0.5, "accuracy": "0.75"}, db_manager_address=f"127.0.0.1:{sys.argv[1]}")
katib.report_metrics({"loss": 0.25}, db_manager_address=f"127.0.0.1:{sys.argv[1]}")
"""


def katib_report(port: int, trial: str) -> subprocess.CompletedProcess:
    python = Path(__file__).resolve().parents[2] / ".venv-katib" / "bin" / "python"
    argv = outside_a_pod([str(python), "-c", KATIB_REPORT, str(port), trial])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_katibs_report_metrics_is_served_beside_the_push_endpoint_for_this_trial_only():
    port, katib_port = free_port(), free_port()
    source = PushSource(port, "random-00003", katib_port)
    try:
        done = katib_report(katib_port, "random-00003")
        assert done.returncode == 0, done.stderr[-2000:]
        parser = OutputParser(["loss"])
        assert [(r["loss"], r.get("accuracy")) for r in results(source, parser)] == [(0.5, 0.75), (0.25, 0.75)]
        refused = katib_report(katib_port, "random-00004")  # another trial's name: refused, nothing taken
        assert refused.returncode != 0 and "this pod runs trial 'random-00003'" in refused.stderr
        assert list(results(source, parser, final=True)) == []
    finally:
        if source.katib is not None:
            source.katib.stop(0)
    with pytest.raises(RuntimeError, match="cannot listen"):  # a port taken is an error, never a shared port
        blocker = PushSource(free_port(), "a", katib_port)
        try:
            PushSource(free_port(), "b", katib_port)
        finally:
            blocker.katib.stop(0)


def test_with_storage_the_sidecar_alone_gets_the_credentials_the_config_and_a_folder_to_write_the_history():
    exp = container_experiment(kind="File", path="/var/log/train/metrics.json", format="JSON")
    exp["spec"]["storage"] = {"uri": "s3://b/kt", "endpoint": "http://s3:9000", "credentialsSecret": "s3-creds"}
    pod = build_pod(exp, trial_object("ns", "boxes-00000", "u-1", 0, {"lr": 0.1}), 2, Settings())
    trial = pod["spec"]["containers"][0]
    assert trial["volumeMounts"] == [{"name": METRICS_VOLUME, "mountPath": "/var/log/train"}]
    assert "env" not in trial and "envFrom" not in trial  # nothing of it reaches the trial's container
    (sidecar,) = pod["spec"]["initContainers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in sidecar["env"]}
    assert json.loads(env[RESULT_LOG]) == {
        "trialDir": "s3://b/kt/ns/boxes/boxes-ui/boxes-00000",
        "state": STATE_DIR,
        "configFile": CONFIG_PATH,
    }
    assert env["KUBETUNE_STORAGE_ENDPOINT"] == "http://s3:9000" and env["HOME"] == STATE_DIR
    assert sidecar["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert sidecar["volumeMounts"][1:] == [
        {"name": "kubetune-attempt", "mountPath": "/var/run/kubetune", "readOnly": True},
        {"name": "kubetune-state", "mountPath": STATE_DIR},
    ]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["kubetune-attempt"]["secret"]["secretName"] == "boxes-00000-2-u-1"  # the attempt's config
    exp["spec"]["checkpoint"] = {"path": "/ckpt"}  # the folder's sidecar has the storage and the state already
    pod = build_pod(exp, trial_object("ns", "boxes-00000", "u-1", 0, {"lr": 0.1}), 2, Settings())
    sidecar = pod["spec"]["initContainers"][-1]
    names = [e["name"] for e in sidecar["env"]]
    assert names.count("HOME") == 1 and names.count("KUBETUNE_STORAGE_ENDPOINT") == 1 and RESULT_LOG in names
    assert sidecar["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    mounts = [m["name"] for m in sidecar["volumeMounts"]]
    assert mounts.count("kubetune-state") == 1 and "kubetune-attempt" in mounts
    assert [v["name"] for v in pod["spec"]["volumes"]].count("kubetune-state") == 1
    stdout = container_experiment(kind="StdOut")
    stdout["spec"]["storage"] = exp["spec"]["storage"]
    assert (
        "initContainers"
        not in build_pod(stdout, trial_object("ns", "boxes-00000", "u", 0, {"lr": 1}), 0, Settings())["spec"]
    )  # only the operator sees a StdOut trial's results: no sidecar, no history


def test_the_sidecar_writes_the_results_it_reports_as_the_trials_history_the_analysis_reads(tmp_path):
    """The sidecar process with storage: each result it reports is a line of the trial's result.json (with its id and
    config), params.json holds the config, and ExperimentAnalysis reads the trial's curve as the collector got it;
    a retry without a checkpoint starts its history over, as a runtime trial's does."""
    metrics, store = tmp_path / "metrics.log", f"file://{tmp_path}/store"
    (tmp_path / "attempt").mkdir()
    (tmp_path / "attempt" / "config.json").write_text(json.dumps({"lr": 0.1}))

    async def scenario(lines: list[str], attempt: int):
        exp = container_experiment(kind="File", path=str(metrics))
        exp["spec"]["storage"] = {"uri": store}
        ctl, runner, env = await collector_with_a_running_trial(exp)
        trial_dir = ctl.trial_dir("boxes-00000")
        env[METRICS_SOURCE] = json.dumps({"kind": "File", "path": str(metrics), "objectives": ["loss"]})
        env[RESULT_LOG] = json.dumps(
            {
                "trialDir": trial_dir,
                "state": str(tmp_path / f"state-{attempt}"),
                "configFile": str(tmp_path / "attempt" / "config.json"),
            }
        )
        metrics.write_text("".join(lines))
        process = subprocess.Popen([sys.executable, "-m", "kubetune.runtime.sidecar"], env=env)
        try:
            deadline = time.monotonic() + 30
            while ctl.trials["boxes-00000"].status.get("iteration") != len(lines) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await stopped_by_the_kubelet(process, deadline)
        finally:
            process.kill()
            await runner.cleanup()
        return ctl, trial_dir

    ctl, trial_dir = asyncio.run(scenario(["epoch=1 loss=0.5\n", "epoch=2 loss=0.25\n", "epoch=3 loss=0.375\n"], 0))
    lines = [json.loads(line) for line in open_storage(trial_dir).get_bytes(f"{trial_dir}/result.json").splitlines()]
    assert [(r["training_iteration"], r["loss"]) for r in lines] == [(1, 0.5), (2, 0.25), (3, 0.375)]
    assert all(r["trial_id"] == "boxes-00000" and r["config"] == {"lr": 0.1} for r in lines)
    assert json.loads(open_storage(trial_dir).get_bytes(f"{trial_dir}/params.json")) == {"lr": 0.1}
    analysis = ExperimentAnalysis(trial_dir.rsplit("/", 1)[0], "loss", "min")
    (trial,) = analysis.trials
    assert trial.trial_id == "boxes-00000" and trial.config == {"lr": 0.1}
    assert list(analysis.trial_dataframes[trial.path]["loss"]) == [0.5, 0.25, 0.375]

    asyncio.run(scenario(["epoch=1 loss=0.75\n"], 1))  # a retry with no checkpoint: the history starts over
    lines = open_storage(trial_dir).get_bytes(f"{trial_dir}/result.json").splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [0.75]


def test_a_store_the_sidecar_cannot_reach_holds_neither_the_results_nor_the_end_of_the_attempt(tmp_path):
    """Storage that refuses connections (retried, as every outage is): the results reach the operator as they come,
    and SIGTERM ends the sidecar within its grace period with the last batch acknowledged."""
    metrics = tmp_path / "metrics.log"
    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.1}))

    async def scenario():
        ctl, runner, env = await collector_with_a_running_trial(container_experiment(kind="File", path=str(metrics)))
        env[METRICS_SOURCE] = json.dumps({"kind": "File", "path": str(metrics), "objectives": ["loss"]})
        env[RESULT_LOG] = json.dumps(
            {
                "trialDir": "s3://nowhere/kt/ns/boxes/uid/boxes-00000",
                "state": str(tmp_path),
                "configFile": str(tmp_path / "config.json"),
            }
        )
        env.update({"KUBETUNE_STORAGE_ENDPOINT": f"http://127.0.0.1:{free_port()}", "AWS_ACCESS_KEY_ID": "x"})
        env["AWS_SECRET_ACCESS_KEY"] = "y"
        metrics.write_text("epoch=1 loss=0.5\n")
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "kubetune.runtime.sidecar"], env=env)
        try:
            deadline = started + 30
            while ctl.trials["boxes-00000"].status.get("iteration") != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert time.monotonic() - started < 20, "the result waited for the storage (it retries for 600 s)"
            await stopped_by_the_kubelet(process, time.monotonic() + 15)  # exits 0 within its 10 s grace
        finally:
            process.kill()
            await runner.cleanup()
        assert ctl.output_read("boxes-00000-0")

    asyncio.run(scenario())
