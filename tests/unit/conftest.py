"""Fixtures every unit test gets: temporary files of the code under test go to the test's own folder, and a pass
of the operator asks its searcher for trials without a bound in wall time."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True)
def _temp_files_in_tmp_path(tmp_path, monkeypatch):
    """``tempfile``'s default folder is the test's ``tmp_path`` (a Trainable without a ``logdir`` makes one,
    as Ray's does), so nothing is left behind in the machine's temp folder."""
    folder = tmp_path / "tempfile"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))


@pytest.fixture(autouse=True)
def _suggestions_unbounded_in_time(monkeypatch):
    """A pass asks the searcher for trials for at most ``SUGGEST_SECONDS_PER_PASS`` (50 ms) of wall time: on a
    loaded machine a model-based searcher's first suggestion alone can take longer, and a test that expects a
    pass to create every trial it may would then see fewer (a flaky failure, issue 34). Unit tests decide by
    counts, not by the clock: the bound is 60 s here, and the tests of the bound itself set it again."""
    from kubetune_operator import trial_admission

    monkeypatch.setattr(trial_admission, "SUGGEST_SECONDS_PER_PASS", 60.0)
