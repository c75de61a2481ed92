"""An experiment's trials written to storage as the runtime writes them, and what the views must show of them
(imported by tests/unit/test_views.py and tests/unit/test_dashboard_browser.py).

Eight trials over a space of three searched parameters and a constant; four run the full six iterations, two
stop early (as ASHA stops them), one fails after three, and one reports a NaN at its third iteration.
:func:`exploit` carries out a PBT exploit on a stored trial as its next pod does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from test_analysis import write_trial

from kubetune.runtime.results import ResultLog
from kubetune.sdk.pbt_exploits import GLOBAL_FILE
from kubetune.storage import join_uri, open_storage

UID = "5e1f2a3b"
NAMESPACE = "team"
EXPERIMENT = "digits"
METRIC = "acc"
#: The Experiment's spec.config, in its JSON form: three searched parameters and a constant.
SPACE = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "layers": {"randint": [1, 5]},
    "act": {"choice": ["relu", "tanh"]},
    "epochs": 6,
}
SEARCHED = ("lr", "layers", "act")
LONGEST = 6


@dataclass(frozen=True)
class StoredTrial:
    """One trial as written, and what a view must show of it."""

    name: str
    config: dict
    values: list[float]  # the metric at iterations 1, 2, ... (NaN where the trial reported NaN)
    error: str | None
    state: str  # Optuna's: COMPLETE, PRUNED or FAIL

    @property
    def history(self) -> list[tuple[int, float]]:
        """``(training_iteration, value)`` of the finite values."""
        return [(i, v) for i, v in enumerate(self.values, 1) if not math.isnan(v)]


def _trial(index: int, lr: float, layers: int, act: str, iterations: int, error: str | None = None, nan_at=None):
    values = [
        math.nan if i == nan_at else round(1 - (0.5 + 0.1 * layers) * math.exp(-i * lr * 50), 6)
        for i in range(1, iterations + 1)
    ]
    state = "FAIL" if error else "PRUNED" if iterations < LONGEST else "COMPLETE"
    return StoredTrial(
        f"{EXPERIMENT}-{index:05d}",
        {"lr": lr, "layers": layers, "act": act, "epochs": 6},
        values,
        error,
        state,
    )


TRIALS = [
    _trial(0, 0.01, 2, "relu", 6),
    _trial(1, 0.002, 4, "tanh", 6),
    _trial(2, 0.0003, 1, "relu", 2),
    _trial(3, 0.05, 3, "tanh", 6),
    _trial(4, 0.0007, 2, "tanh", 4),
    _trial(5, 0.02, 1, "relu", 6),
    _trial(6, 0.004, 3, "relu", 3, error="ValueError: the loss diverged"),
    _trial(7, 0.03, 4, "tanh", 6, nan_at=3),
]


def store(root: str, workdir: Path, endpoint: str | None = None) -> str:
    """Write :data:`TRIALS` under ``<root>/<namespace>/<experiment>/<uid>``; return that folder's URI."""
    exp_uri = join_uri(root, NAMESPACE, EXPERIMENT, UID)
    for trial in TRIALS:
        write_trial(
            exp_uri,
            trial.name,
            [{METRIC: value} for value in trial.values],
            config=trial.config,
            endpoint=endpoint,
            error=trial.error,
            workdir=workdir,
        )
    return exp_uri


def exploit(
    exp_uri: str,
    trial: str,
    donor: str,
    at: int,
    donor_iteration: int,
    values: list[float],
    config: dict,
    workdir: Path,
    endpoint: str | None = None,
) -> None:
    """Carry out a PBT exploit of ``trial`` (exploited at its iteration ``at``) from ``donor``'s checkpoint of
    ``donor_iteration`` as the trial's next pod does: append the policy line to ``pbt_global.txt``, keep the
    results up to ``donor_iteration`` in ``result.json`` (:meth:`ResultLog.resume`) and report ``values`` from
    ``donor_iteration + 1`` on with ``config``."""
    storage = open_storage(exp_uri, endpoint)
    line = [trial, donor, at, donor_iteration, {}, config]
    storage.append_line(join_uri(exp_uri, GLOBAL_FILE), json.dumps(line))
    trial_uri = join_uri(exp_uri, trial)
    storage.put_bytes(join_uri(trial_uri, "params.json"), json.dumps(config).encode())
    log = ResultLog(storage, trial_uri, workdir / f"{trial}-exploit-{at}")
    log.resume(donor_iteration)
    for i, value in enumerate(values, donor_iteration + 1):
        log.append({METRIC: value, "training_iteration": i, "done": False, "trial_id": trial, "config": config})
    log.sync()
    log.close()
