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


def trial_prefix(s3, bucket, root, namespace, experiment, trial):
    """The key prefix of ``trial``'s folder, ``<root>/<namespace>/<experiment>/<uid[:8]>/<trial>``, for the one
    incarnation of the Experiment that wrote a ``result.json`` for it (AssertionError if not exactly one)."""
    found = {
        obj["Key"].rsplit("/", 1)[0]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{root}/{namespace}/{experiment}/"
        )
        for obj in page.get("Contents", [])
        if obj["Key"].endswith(f"/{trial}/result.json")
    }
    assert len(found) == 1, found
    return found.pop()
