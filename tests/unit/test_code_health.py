"""Code health, checked by ``make test``: ruff's lint rules and its formatter (``pyproject.toml``) and the
import contracts (``.importlinter``: the kubetune package never imports the operator or devcluster, the trial pod never
imports the SDK, the operator's pure modules never import kopf, the Kubernetes client or aiohttp, the operator's
event loop never imports scikit-learn), and the benchmarks never import the tests."""

from __future__ import annotations

import ast
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
    assert "Contracts: 8 kept, 0 broken." in done.stdout


def test_benchmarks_import_nothing_from_the_tests():
    """``bench/`` is no package ``lint-imports`` can root, so its imports are read here: the fixtures that tests
    and benchmarks share live in ``devcluster/testkit.py``."""
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names if name.split(".")[0] == "tests"
            ]
    assert not found, "bench/ imports tests/ (move the fixture to devcluster/testkit.py):\n" + "\n".join(found)
