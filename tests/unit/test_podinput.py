"""Values from trial pods (issue 22.1): the checks of ``kubetune_operator.podinput`` on results, checkpoint
references and termination messages, and what the controller does with an ended pod's refused fields."""

from __future__ import annotations

import json

import pytest

from devcluster.testkit import experiment_object
from kubetune.checkpoint_store import checkpoint_uri
from kubetune.env import OUTCOME_COMPLETED
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podinput import (
    MAX_ITERATION,
    checkpoint_problem,
    explored_problem,
    parse_outcome,
    result_problem,
)
from kubetune_operator.podview import PodView
from kubetune_operator.settings import Settings

KEY = b"k" * 32
T0 = 1_800_000_000.0
TRIAL_DIR = "s3://b/p/ns/exp/12345678/exp-00000"


def runtime_result(iteration=3):
    """A result as ``kubetune.runtime.trainable`` fills it in (less ``config``, which the reporter leaves out)."""
    return {
        "acc": 0.5,
        "done": False,
        "timesteps_total": None,
        "episodes_total": None,
        "training_iteration": iteration,
        "experiment_id": "e",
        "trial_id": "t",
        "trial_name": "exp-00000",
        "date": "2026-01-01_00-00-00",
        "timestamp": 1_800_000_000,
        "time_this_iter_s": 0.01,
        "time_total_s": 0.03,
        "pid": 7,
        "hostname": "h",
        "node_ip": "10.0.0.1",
        "time_since_restore": 0.03,
        "timesteps_since_restore": 0,
        "iterations_since_restore": 3,
        "warmup_time": 0.001,
        "info": {"learner": {"grad_norm": [1.0, float("nan")], "steps": 2**62}},
    }


def test_what_the_runtime_reports_passes():
    assert result_problem(runtime_result()) is None
    assert result_problem({"acc": float("-inf")}) is None  # a diverging metric is a result, as in Ray
    assert result_problem({"training_iteration": MAX_ITERATION, "loss": None, "tag": "x" * 1000}) is None


@pytest.mark.parametrize(
    "uri, iteration",
    [
        (checkpoint_uri(TRIAL_DIR, 3), 3),
        (checkpoint_uri(TRIAL_DIR, 3) + ".1", 3),  # a newer generation of the same iteration
        (checkpoint_uri(TRIAL_DIR, 3) + "/", None),
    ],
)
def test_a_checkpoint_in_the_trials_own_folder_passes(uri, iteration):
    assert checkpoint_problem(uri, iteration, TRIAL_DIR) is None


@pytest.mark.parametrize(
    "uri",
    [
        "s3://b/p/ns/exp/12345678/exp-00001/checkpoint_000003",  # another trial's
        "s3://b/p/ns/exp/12345678/exp-00000-x/checkpoint_000003",  # a folder whose name only starts alike
        f"{TRIAL_DIR}/checkpoint_000003/../../exp-00001",
        f"{TRIAL_DIR}/..",
        TRIAL_DIR,
        "",
        None,
        3,
    ],
)
def test_a_checkpoint_elsewhere_is_refused(uri):
    assert checkpoint_problem(uri, 3, TRIAL_DIR) is not None


def test_a_termination_message_keeps_what_passes_and_says_what_it_left_out():
    message = json.dumps(
        {
            "outcome": "completed",
            "iteration": float("inf"),
            "checkpoint": checkpoint_uri(TRIAL_DIR, 3),
            "result": {"acc": 1.0, "training_iteration": float("inf")},
        }
    )
    outcome, problems = parse_outcome(message, TRIAL_DIR)
    assert outcome == {"outcome": "completed"}
    assert problems == [
        f"checkpoint.iteration must be an integer from 0 to {MAX_ITERATION}",
        f"result: training_iteration must be an integer from 0 to {MAX_ITERATION}",
    ]
    good = {"outcome": "stopped", "iteration": 3, "checkpoint": checkpoint_uri(TRIAL_DIR, 3), "result": {"acc": 1}}
    assert parse_outcome(json.dumps(good), TRIAL_DIR) == (good, [])
    assert parse_outcome("Traceback (most recent call last): ...", TRIAL_DIR) == ({}, [])
    assert parse_outcome("[1, 2]", TRIAL_DIR) == ({}, [])
    assert parse_outcome(json.dumps({"outcome": 7, "iteration": -1}), TRIAL_DIR) == (
        {},
        ["outcome must be a string", f"iteration must be an integer from 0 to {MAX_ITERATION}"],
    )


def experiment():
    return experiment_object(
        config={"lr": {"grid_search": [1, 2]}}, metric="acc", mode="max", storage={"uri": "s3://bucket/prefix"}
    )


def started():
    ctl = ExperimentController(experiment(), Settings(), KEY)
    for manifest in ctl.plan({}, T0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    ctl.plan({}, T0 + 1)
    ctl.plan({"exp-00000-0": PodView("exp-00000-0", "exp-00000", 0, "Running")}, T0 + 2)
    return ctl


def test_a_poisoned_termination_message_ends_the_trial_without_poisoning_its_status():
    ctl = started()
    message = json.dumps(
        {
            "outcome": OUTCOME_COMPLETED,
            "iteration": 9,
            "checkpoint": "s3://elsewhere/checkpoint_000009",
            "result": {"acc": 2.0, "training_iteration": float("inf")},
        }
    )
    ended = PodView("exp-00000-0", "exp-00000", 0, "Succeeded", exit_code=0, message=message)
    plan = ctl.plan({"exp-00000-0": ended}, T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert (trial.phase, trial.status["reason"]) == ("Succeeded", "Completed")
    assert "iteration" not in trial.status and "checkpoint" not in trial.status and "lastResult" not in trial.status
    json.dumps(plan.trial_status, allow_nan=False)  # the status patch is JSON the API server decodes
    refused = [e for e in plan.events if e[2] == "OutcomeRefused"]
    assert len(refused) == 1 and refused[0][:2] == ("exp-00000", "Warning")
    assert "checkpoint.uri must name a folder in the trial's own folder" in refused[0][3]
    assert "result: training_iteration must be an integer" in refused[0][3]


def test_a_good_termination_message_shows_its_last_result_and_checkpoint():
    ctl = started()
    uri = checkpoint_uri(ctl.trial_dir("exp-00000"), 9)
    message = json.dumps(
        {
            "outcome": OUTCOME_COMPLETED,
            "iteration": 9,
            "checkpoint": uri,
            "result": {"acc": 2.0, "training_iteration": 9},
        }
    )
    ended = PodView("exp-00000-0", "exp-00000", 0, "Succeeded", exit_code=0, message=message)
    plan = ctl.plan({"exp-00000-0": ended}, T0 + 3)
    status = ctl.trials["exp-00000"].status
    assert status["iteration"] == 9 and status["checkpoint"] == {"uri": uri, "iteration": 9}
    assert status["metricValue"] == 2.0
    assert not [e for e in plan.events if e[2] == "OutcomeRefused"]


def test_a_journal_written_before_the_checks_cannot_put_an_infinite_iteration_in_a_status():
    ctl = started()
    ctl.book.show_result(ctl.trials["exp-00000"], {"acc": 1.0, "training_iteration": float("inf")})  # as a replay would
    assert ctl.trials["exp-00000"].status.get("iteration") is None
    json.dumps(ctl.plan({}, T0 + 10).trial_status, allow_nan=False)


@pytest.mark.parametrize(
    "config, words",
    [
        ([1, 2], "must be a JSON object"),
        ({"lr": float("nan")}, "NaN or an infinity"),
        ({"lr": float("inf")}, "NaN or an infinity"),
        ({"deep": json.loads("[" * 20 + "]" * 20)}, "nested more than 16 levels deep"),
        ({"n": 2**70}, "n: an integer beyond 64 bits"),
        ({"blob": "x" * (192 * 1024)}, "over 196608 bytes"),
    ],
)
def test_an_explored_config_a_status_cannot_hold_is_refused(config, words):
    assert words in explored_problem(config)
    assert explored_problem({"lr": 0.1, "layers": [64, 32], "opt": {"name": "adam", "betas": [0.9, 0.999]}}) is None
    assert explored_problem({"name": "é" * 50_000}) is None  # 100 KB of UTF-8, as the SDK measures a config
