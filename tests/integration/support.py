"""Helpers shared by the integration tests (imported as ``tests.integration.support``)."""

from __future__ import annotations

import time


def wait_for(fn, timeout=120, interval=0.25, what="condition"):
    """Poll ``fn`` until it returns something truthy and return that; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
