"""Ray Tune 0.8's ``track`` module for function trainables: ``kubetune.track.log(**metrics)``.

Kept for users' code written against ``ray.tune.track``; new code calls :func:`kubetune.report`.
Each call is one ``train()`` result of the running :class:`kubetune.runtime.function_trainable.FunctionTrainable`.
"""

from __future__ import annotations

from typing import Any

from kubetune.runtime.session import report


def log(**metrics: Any) -> None:
    """Report ``metrics`` as one result (same as ``kubetune.report(**metrics)``)."""
    report(metrics)
