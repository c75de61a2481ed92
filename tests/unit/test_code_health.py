"""Code health, checked by ``make test``: ruff's lint rules and its formatter (``pyproject.toml``) and the
import contracts (``.importlinter``: the kubetune package never imports the operator or devcluster, the trial pod never
imports the SDK, the operator's pure modules never import kopf, the Kubernetes client or aiohttp, the operator's
event loop never imports scikit-learn)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = run(str(BIN / "ruff"), "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_would_change_nothing():
    done = run(str(BIN / "ruff"), "format", "--check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr + "\nrun: .venv/bin/ruff format ."


def test_every_import_contract_is_kept():
    done = run(str(BIN / "lint-imports"), "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert "Contracts: 6 kept, 0 broken." in done.stdout
