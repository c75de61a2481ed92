"""The trial programs of the images with no kubetune in them (``examples/container-trials``), run here as their
images run them: ``mnist.py`` by a Python without site-packages (``-S``), ``train.sh`` by ``/bin/sh``. Their output
is read with Katib's default metrics regex, as the operator's StdOut collector reads it; the Containerfile's
``trial-shell`` target is checked to hold no Python (busybox from scratch), the proof that needs no build; and
:mod:`devcluster.images` finds their cached archives by a name with a dash in it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devcluster import images
from devcluster.images import digits_data
from kubetune.output_metrics import OutputParser

TRIALS = Path(__file__).resolve().parents[2] / "examples" / "container-trials"
#: Katib's default ``metricsFormat`` (its StdOut and File collectors' TEXT format).
KATIB_METRIC = re.compile(r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)")
#: The leading timestamp of Katib's pytorch-mnist log lines (``logging``'s asctime, RFC 3339 in UTC).
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def metrics(line: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in KATIB_METRIC.finditer(line)}


def mnist(*args: str, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-S", str(TRIALS / "mnist.py"), "--data", str(digits_data()), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.splitlines()


def train_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(TRIALS / "train.sh"), *args], capture_output=True, text=True, timeout=60)


def test_mnist_prints_katibs_pytorch_mnist_lines_with_the_stdlib_alone(tmp_path):
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    lines = mnist("--epochs", "1", "--lr", "0.05", "--momentum", "0.9", cwd=workdir)
    train, test, blank = lines  # Katib's test line ends in "\n" of its own: an empty line follows it
    assert RFC3339.match(train) and RFC3339.match(test) and blank == ""
    assert re.search(r"INFO     Train Epoch: 1 \[1437/1437 \(100%\)\]\tloss=\d\.\d{4}$", train), train
    assert re.search(
        r"INFO     \{metricName: accuracy, metricValue: 0\.\d{4}\};\{metricName: loss, metricValue: ", test
    )
    # Katib's regex finds the loss in the train line, and nothing in the test line or the timestamp
    assert list(metrics(train)) == ["loss"] and metrics(test) == {}
    assert not list(workdir.iterdir())  # it writes nothing where it runs


def test_mnist_loss_falls_each_epoch_and_a_config_gives_the_same_lines(tmp_path):
    def losses():
        lines = mnist("--epochs", "3", "--lr=0.03", "--momentum=0.5", cwd=tmp_path)
        return [metrics(line)["loss"] for line in lines if "loss=" in line]

    first = losses()
    assert len(first) == 3 and first[0] > first[1] > first[2], first
    assert losses() == first


def test_mnist_writes_its_lines_to_the_log_path_for_katibs_file_collector(tmp_path):
    on_stdout = mnist("--epochs", "1", "--lr=0.05", "--momentum=0.9", cwd=tmp_path)
    assert (
        mnist("--epochs", "1", "--lr=0.05", "--momentum=0.9", f"--log-path={tmp_path / 'mnist.log'}", cwd=tmp_path)
        == []
    )
    written = (tmp_path / "mnist.log").read_text().splitlines()
    assert [line[21:] for line in written] == [line[21:] for line in on_stdout]  # the same lines, times aside


def test_mnist_with_the_hypertune_logger_writes_katibs_json_lines_beside_its_stdout_lines(tmp_path):
    """``--logger hypertune`` (Katib's JSON examples): the log lines stay on stdout, and the held-out loss, then
    accuracy, of each epoch go to ``--log-path`` as cloudml-hypertune writes them, which kubetune's JSON format
    reads as results: one per line of the objective, with the value the stdout line printed."""
    log = tmp_path / "katib" / "mnist.json"
    args = ("--epochs", "2", "--lr=0.05", "--momentum=0.9")
    lines = mnist(*args, f"--log-path={log}", "--logger=hypertune", cwd=tmp_path)
    assert [line[21:] for line in lines] == [line[21:] for line in mnist(*args, cwd=tmp_path)]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    names = ["loss", "accuracy", "loss", "accuracy"]
    assert [set(r) for r in records] == [{name, "global_step", "timestamp", "trial"} for name in names]
    assert [r["global_step"] for r in records] == ["1", "1", "2", "2"] and {r["trial"] for r in records} == {"0"}
    assert all(isinstance(r["timestamp"], float) and abs(r["timestamp"] - time.time()) < 60 for r in records)
    printed = [re.findall(r"metricValue: (\d\.\d{4})", line) for line in lines if "metricName" in line]
    parser = OutputParser(["accuracy"], format="JSON")
    results = [r for r in map(parser.feed, log.read_text().splitlines()) if r is not None]
    assert [r["training_iteration"] for r in results] == [1, 2]
    assert [[f"{r['accuracy']:.4f}", f"{r['loss']:.4f}"] for r in results] == printed


def test_mnist_exits_at_once_on_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-S", str(TRIALS / "mnist.py"), "--data", str(digits_data()), "--epochs", "1000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "loss=" in proc.stdout.readline()  # training
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait()


def test_train_sh_prints_an_epoch_and_a_loss_a_line_that_depend_on_lr_alone():
    done = train_sh("--lr", "0.3", "--epochs", "3", "--sleep", "0")
    assert done.returncode == 0, done.stderr
    found = [metrics(line) for line in done.stdout.splitlines()]
    assert found == [{}] + [{"epoch": e, "loss": round(5 / e, 4)} for e in (1, 2, 3)]  # 1 + 100 * 0.2^2 = 5
    assert train_sh("--lr=0.3", "--epochs=3", "--sleep=0").stdout == done.stdout
    best = train_sh("--lr", "0.1", "--epochs", "1", "--sleep", "0").stdout.splitlines()[-1]
    assert best == "epoch=1 loss=1.0000"  # lr 0.1 is the lowest loss at every epoch


def test_train_sh_with_no_epochs_prints_no_metric_and_exits_0():
    done = train_sh("--epochs", "0")
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert all(not metrics(line) for line in done.stdout.splitlines())


@pytest.mark.parametrize("args", [["--bogus"], ["--lr"]])
def test_train_sh_refuses_what_it_does_not_know(args):
    done = train_sh(*args)
    assert done.returncode == 2 and "train.sh:" in done.stderr


def test_train_sh_exits_at_once_on_sigterm():
    proc = subprocess.Popen(["/bin/sh", str(TRIALS / "train.sh"), "--sleep", "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("training with lr")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
        assert time.monotonic() - started < 5  # not after its 30 s sleep
    finally:
        proc.kill()
        proc.wait()


def test_the_shell_image_is_busybox_from_scratch_and_installs_no_python():
    text = re.sub(r"\\\n\s*", " ", (TRIALS / "Containerfile").read_text())
    stages: dict[str, list[str]] = {}
    for line in (s.strip() for s in text.splitlines()):
        if match := re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line):
            stages[match.group(2)] = [line]
        elif line and not line.startswith("#") and stages:
            list(stages.values())[-1].append(line)
    shell = stages["trial-shell"]
    assert shell[0].split()[1] == "scratch"
    copies = [line for line in shell if line.startswith("COPY")]
    assert copies == ["COPY --from=busybox /rootfs/ /", "COPY train.sh /app/train.sh"]
    assert not [line for line in shell if line.startswith("RUN")]
    (install,) = [line for line in stages["busybox"] if line.startswith("RUN")]
    assert re.search(r"apt-get install -y --no-install-recommends busybox-static\s+&&", install)
    assert "python" not in " ".join(stages["busybox"] + shell).lower()
    assert any(line == "USER 1000:1000" for line in shell) and any(
        line == "USER 1000:1000" for line in stages["trial-python"]
    )


def test_a_reused_trial_image_keeps_its_tag_although_its_name_has_a_dash(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "images_dir", lambda: tmp_path)
    monkeypatch.setenv("KUBETUNE_DEVCLUSTER_IMAGES", "latest")
    (tmp_path / "trial-python-0123456789abcdef.tar").write_bytes(b"")
    image = images._build("trial-python", [b"a changed tree"], [])  # no build: the newest archive as it is
    assert image.ref == "docker.io/kubetune/trial-python:0123456789abcdef"


def test_mnist_goes_on_from_its_checkpoint_folder_as_an_uninterrupted_run_would(tmp_path, monkeypatch):
    """Standing in for kubetune: a thread takes each ``.kubetune-save`` away (the checkpoint is committed); a run
    of 2 epochs leaves its state in the folder, and a run of 4 from it prints the losses of epochs 3 and 4 that an
    uninterrupted 4-epoch run prints."""
    folder = tmp_path / "ck"
    folder.mkdir()
    asked: list[str] = []
    stop = threading.Event()

    def commit():
        while not stop.is_set():
            marker = folder / ".kubetune-save"
            if marker.exists():
                asked.append(marker.read_text())
                marker.unlink()
            time.sleep(0.01)

    def losses(lines):
        return {int(line.split("Epoch: ")[1].split()[0]): metrics(line)["loss"] for line in lines if "loss=" in line}

    whole = losses(mnist("--epochs", "4", "--lr=0.05", cwd=tmp_path))
    committer = threading.Thread(target=commit, daemon=True)
    committer.start()
    monkeypatch.setenv("KUBETUNE_CHECKPOINT_DIR", str(folder))
    try:
        first = losses(mnist("--epochs", "2", "--lr=0.05", cwd=tmp_path))
        resumed = mnist("--epochs", "4", "--lr=0.05", cwd=tmp_path)
    finally:
        stop.set()
    assert asked == ["1", "2", "3", "4"] and sorted(first) == [1, 2]
    assert any("restored the state after epoch 2" in line for line in resumed)
    assert losses(resumed) == {3: whole[3], 4: whole[4]} and first == {1: whole[1], 2: whole[2]}
