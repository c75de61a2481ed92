"""Fixtures every unit test gets: temporary files of the code under test go to the test's own folder."""

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
