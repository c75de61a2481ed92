"""Looking at an experiment from storage: the Optuna study kubetune.sdk.optuna_study fills from trials written by the
runtime's own writers (moto's S3 and file://), the pictures of kubetune.sdk.plots (what each figure holds, line by
line), ``ExperimentAnalysis.plot``/``ResultGrid.plot``, and the ``kubetune plot`` and ``kubetune dashboard``
commands on storage alone."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import matplotlib
import optuna
import pytest
from conftest_storage import AWS_TEST_ENV, aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures
from matplotlib.figure import Figure
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from stored_experiment import EXPERIMENT, METRIC, NAMESPACE, SEARCHED, SPACE, TRIALS, UID, exploit, store

from kubetune.sdk import cli
from kubetune.sdk.analysis import ExperimentAnalysis, ResultGrid
from kubetune.sdk.optuna_study import DISPLAY_NAME_ATTR, EXPLOITS_ATTR, TRIAL_NAME_ATTR, fill_study
from kubetune.sdk.plots import KINDS, STYLES, draw, save
from kubetune.storage import file_uri_path, open_storage

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {t.name: t for t in TRIALS}


@pytest.fixture
def s3_exp(tmp_path, aws_env, moto_endpoint):  # noqa: F811 - fixtures
    """``(experiment URI, endpoint)`` of the stored experiment on moto's S3."""
    root = f"s3://{new_bucket(moto_endpoint)}/kubetune"
    return store(root, tmp_path, moto_endpoint), moto_endpoint, root


@pytest.fixture
def analysis(tmp_path):
    """The stored experiment on file://, read with its search space."""
    return ExperimentAnalysis(store(f"file://{tmp_path}/store", tmp_path), METRIC, "max", param_space=SPACE)


def test_the_study_holds_every_trial_as_stored(s3_exp):
    uri, endpoint, _ = s3_exp
    study = fill_study(ExperimentAnalysis(uri, METRIC, "max", storage_endpoint=endpoint, param_space=SPACE))
    assert study.study_name == f"{NAMESPACE}/{EXPERIMENT}"
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert study.metric_names == [METRIC]
    trials = study.get_trials()
    assert [t.user_attrs[TRIAL_NAME_ATTR] for t in trials] == [t.name for t in TRIALS]
    for frozen, stored in zip(trials, TRIALS):
        assert frozen.state.name == stored.state, stored.name
        assert frozen.intermediate_values == dict(stored.history), stored.name
        assert frozen.params == {k: stored.config[k] for k in SEARCHED}  # the constant is no parameter
        if stored.state == "FAIL":
            assert frozen.value is None
            assert frozen.user_attrs["error"] == "ValueError: the loss diverged"
        else:
            assert frozen.value == stored.history[-1][1]
        assert frozen.distributions == {
            "lr": FloatDistribution(1e-4, 1e-1, log=True),
            "layers": IntDistribution(1, 4),
            "act": CategoricalDistribution(["relu", "tanh"]),
        }
    assert BY_NAME["digits-00007"].history[-1][0] == 6 and len(trials[7].intermediate_values) == 5  # NaN left out


def test_without_the_space_the_distributions_are_inferred_from_the_values(analysis):
    plain = ExperimentAnalysis(analysis.experiment_path, METRIC, "max")
    trial = fill_study(plain).get_trials()[0]
    lrs = [t.config["lr"] for t in TRIALS]
    assert trial.distributions == {
        "lr": FloatDistribution(min(lrs), max(lrs)),
        "layers": IntDistribution(1, 4),
        "act": CategoricalDistribution(["relu", "tanh"]),
        "epochs": IntDistribution(6, 6),  # every config value is a parameter without the space
    }


def test_values_outside_the_space_and_grids_get_distributions_that_hold_them(tmp_path):
    """A PBT perturbation beyond the domain's bound widens it to the values; a grid is a categorical of its values;
    a domain Optuna cannot hold (randn) is inferred; values that are lists become JSON text."""
    from test_analysis import write_trial

    exp = f"file://{tmp_path}/store/ns/pbt/{'0' * 8}"
    configs = [
        {"lr": 0.05, "opt": "sgd", "noise": 0.3, "shape": [1, 2]},
        {"lr": 0.4, "opt": "adam", "noise": -1.2, "shape": [3]},
    ]
    for i, config in enumerate(configs):
        write_trial(exp, f"pbt-{i:05d}", [{"loss": 1.0 / (i + 1)}], config=config, workdir=tmp_path)
    space = {
        "lr": {"loguniform": [1e-3, 1e-1]},
        "opt": {"grid_search": ["sgd", "adam", "rmsprop"]},
        "noise": {"randn": [0, 1]},
        "shape": {"choice": [[1, 2], [3]]},
    }
    study = fill_study(ExperimentAnalysis(exp, "loss", "min", param_space=space))
    first, second = study.get_trials()
    assert first.distributions == {
        "lr": FloatDistribution(0.05, 0.4),
        "opt": CategoricalDistribution(["sgd", "adam", "rmsprop"]),
        "noise": FloatDistribution(-1.2, 0.3),
        "shape": CategoricalDistribution(["[1, 2]", "[3]"]),
    }
    assert second.params == {"lr": 0.4, "opt": "adam", "noise": -1.2, "shape": "[3]"}
    assert study.direction == optuna.study.StudyDirection.MINIMIZE and study.best_trial.number == 1


def test_a_trial_without_a_value_yet_is_running_and_the_objective_is_required(tmp_path):
    from test_analysis import write_trial

    exp = f"file://{tmp_path}/store/ns/e/{'0' * 8}"
    write_trial(exp, "e-00000", [{"acc": 0.5}], workdir=tmp_path)
    write_trial(exp, "e-00001", [{"other": 1.0}], workdir=tmp_path)
    study = fill_study(ExperimentAnalysis(exp), "acc", "max")
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "RUNNING"]
    with pytest.raises(ValueError, match="No `metric` has been passed"):
        fill_study(ExperimentAnalysis(exp))
    with pytest.raises(ValueError, match="several objectives"):  # one of them: a metric and its mode
        fill_study(ExperimentAnalysis(exp, ["acc", "other"], ["max", "min"]), "acc")


def test_a_trials_display_name_is_a_user_attribute_where_the_analysis_knows_it(tmp_path):
    from test_analysis import write_trial

    exp = f"file://{tmp_path}/store/ns/e/{'0' * 8}"
    for name in ("e-00000", "e-00001"):
        write_trial(exp, name, [{"acc": 0.5}], workdir=tmp_path)
    named = ExperimentAnalysis(exp, "acc", "max", display_names={"e-00001": "lr=0.1"})
    attrs = [t.user_attrs for t in fill_study(named).get_trials()]
    assert [a.get(DISPLAY_NAME_ATTR) for a in attrs] == [None, "lr=0.1"]
    assert [a[TRIAL_NAME_ATTR] for a in attrs] == ["e-00000", "e-00001"]


def test_a_pbt_exploit_shows_as_the_trials_exploits_and_its_curve_goes_on_from_the_donors_iteration(analysis, tmp_path):
    """Trial 1, exploited at its iteration 6 from trial 0's checkpoint of 4, reports 5 and 6 again (its pod kept the
    results up to 4); trial 2, stopped at 2, exploited from trial 5's checkpoint of 5, jumps to 6. A retried pod's
    line counts once."""
    path, (donor, back, ahead, far) = analysis.experiment_path, (TRIALS[0], TRIALS[1], TRIALS[2], TRIALS[5])
    exploit(path, back.name, donor.name, 6, 4, [0.91, 0.92], {**back.config, "lr": 0.012}, tmp_path)
    exploit(path, ahead.name, far.name, 2, 5, [0.95], {**ahead.config, "lr": 0.024}, tmp_path)
    exploit(path, ahead.name, far.name, 2, 5, [0.95], {**ahead.config, "lr": 0.024}, tmp_path / "retry")
    with open(file_uri_path(f"{path}/pbt_global.txt"), "a") as log:  # a retry that wrote its own config
        log.write(json.dumps([ahead.name, far.name, 2, 5, {}, {"lr": 1}]) + "\n")
    trials = fill_study(analysis.reread()).get_trials()
    assert trials[1].intermediate_values == {**dict(back.history[:4]), 5: 0.91, 6: 0.92}
    assert trials[1].user_attrs[EXPLOITS_ATTR] == f"at 6 from {donor.name}@4"
    assert trials[1].params["lr"] == 0.012 and trials[1].value == 0.92 and trials[1].state.name == "COMPLETE"
    assert trials[2].intermediate_values == {**dict(ahead.history), 6: 0.95}
    assert trials[2].user_attrs[EXPLOITS_ATTR] == f"at 2 from {far.name}@5"
    assert trials[2].state.name == "COMPLETE" and trials[2].user_attrs["training_iteration"] == 6
    assert [t.number for t in trials if EXPLOITS_ATTR in t.user_attrs] == [1, 2]


def test_results_whose_iteration_goes_back_start_the_curve_again_from_there(tmp_path):
    """A ``result.json`` that still holds the results written after the checkpoint a trial went back to (Ray's own
    PBT leaves them): the curve is the last lineage's, without the earlier results from that iteration on."""
    exp = f"file://{tmp_path}/store/ns/e/{'0' * 8}"
    rows = [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4), (2, 0.25), (3, 0.35)]
    storage = open_storage(exp)
    storage.put_bytes(f"{exp}/e-00000/params.json", b"{}")
    text = "".join(json.dumps({"acc": v, "training_iteration": i, "config": {}}) + "\n" for i, v in rows)
    storage.put_bytes(f"{exp}/e-00000/result.json", text.encode())
    analysis = ExperimentAnalysis(exp, "acc", "max")
    assert analysis.metric_history("e-00000", "acc") == [(1, 0.1), (2, 0.25), (3, 0.35)]
    assert fill_study(analysis).get_trials()[0].intermediate_values == {1: 0.1, 2: 0.25, 3: 0.35}


#: Two objectives, ``acc`` (max) and ``latency`` (min): each trial's results at iterations 1 to 3 (one at 1 to 2).
TWO = {
    "two-00000": [(0.5, 9.0), (0.7, 8.0), (0.8, 7.0)],  # on the front: the best acc among the fast ones
    "two-00001": [(0.6, 5.0), (0.65, 4.0), (0.7, 3.0)],  # on the front: the fastest
    "two-00002": [(0.4, 9.0), (0.5, 8.5), (0.6, 8.0)],  # dominated by 00000
    "two-00003": [(0.9, 20.0), (0.95, 15.0), (0.97, 12.0)],  # on the front: the best acc
    "two-00004": [(0.98, 30.0), (0.99, 25.0)],  # stopped early, undominated: PRUNED, not on Optuna's front
    "two-00005": [(0.3, 30.0), (0.31, 29.0)],  # failed
}


def write_two(root: str, workdir, endpoint=None) -> str:
    """Write :data:`TWO` under ``<root>/ns/two/<uid>``; return that folder's URI."""
    from test_analysis import write_trial

    exp = f"{root}/ns/two/{'1' * 8}"
    for name, points in TWO.items():
        error = "RuntimeError: out of memory" if name == "two-00005" else None
        results = [{"acc": a, "latency": b} for a, b in points]
        write_trial(
            exp, name, results, config={"lr": 0.01 * len(name)}, endpoint=endpoint, error=error, workdir=workdir
        )
    return exp


def test_an_experiment_with_several_objectives_is_a_study_of_as_many_directions(tmp_path):
    analysis = ExperimentAnalysis(write_two(f"file://{tmp_path}/store", tmp_path), ["acc", "latency"], ["max", "min"])
    study = fill_study(analysis)
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]
    assert study.metric_names == ["acc", "latency"]
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "FAIL"]
    assert [t.values for t in trials[:5]] == [list(points[-1]) for points in list(TWO.values())[:5]]
    assert trials[0].intermediate_values == {1: 0.5, 2: 0.7, 3: 0.8}  # the first objective's
    assert trials[1].user_attrs == {
        TRIAL_NAME_ATTR: "two-00001",
        "training_iteration": 3,
        "acc": 0.7,
        "latency": 3.0,
        "best_acc": 0.7,  # each objective's best by its own mode
        "best_latency": 3.0,
    }
    assert sorted(t.user_attrs[TRIAL_NAME_ATTR] for t in study.best_trials) == ["two-00000", "two-00001", "two-00003"]
    assert [t.trial_id for t in analysis.pareto_front] == ["two-00000", "two-00001", "two-00003", "two-00004"]

    one = fill_study(analysis, "latency", "min")
    assert one.direction == optuna.study.StudyDirection.MINIMIZE and one.best_trial.number == 1
    with pytest.raises(ValueError, match="several objectives"):
        analysis.plot("learning_curves")
    save(analysis, str(tmp_path / "latency.png"), metric="latency", mode="min")


def _drawn(study, kind):
    ax = Figure().subplots()
    draw(study, kind, ax)
    return ax


def test_learning_curves_draw_each_trial_with_its_state(analysis):
    ax = _drawn(fill_study(analysis), "learning_curves")
    lines = {line.get_gid(): line for line in ax.lines}
    assert sorted(lines) == sorted(BY_NAME)  # one line per trial, the failed one included
    for name, line in lines.items():
        stored = BY_NAME[name]
        assert list(zip(line.get_xdata(), line.get_ydata())) == stored.history, name
        _, color, style, marker = STYLES[stored.state]
        assert (line.get_color(), line.get_linestyle(), line.get_marker()) == (color, style, marker or "None"), name
    assert lines["digits-00002"].get_linestyle() == "--" and lines["digits-00002"].get_marker() == "x"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed (5)", "stopped early (2)", "failed (1)"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("training_iteration", METRIC)


def test_parallel_coordinates_draw_each_trial_with_a_value_across_its_parameters(analysis):
    ax = _drawn(fill_study(analysis), "parallel_coordinates")
    lines = {line.get_gid(): line for line in ax.lines if line.get_gid()}
    with_value = [t for t in TRIALS if t.state != "FAIL"]
    assert sorted(lines) == sorted(t.name for t in with_value)
    assert [t.get_text() for t in ax.get_xticklabels()] == [*SEARCHED, METRIC]
    finals = [t.history[-1][1] for t in with_value]
    for stored in with_value:
        ys = list(lines[stored.name].get_ydata())
        lr = (math.log(stored.config["lr"]) - math.log(1e-4)) / (math.log(1e-1) - math.log(1e-4))
        act = ["relu", "tanh"].index(stored.config["act"])
        value = (stored.history[-1][1] - min(finals)) / (max(finals) - min(finals))
        assert ys == pytest.approx([lr, (stored.config["layers"] - 1) / 3, act, value]), stored.name
        assert lines[stored.name].get_linestyle() == ("--" if stored.state == "PRUNED" else "-")
    best = max(with_value, key=lambda t: t.history[-1][1])
    assert lines[best.name].get_color() == pytest.approx(matplotlib.colormaps["viridis"](1.0))


def test_importance_has_a_bar_for_every_searched_parameter(analysis):
    ax = _drawn(fill_study(analysis), "importance")
    names = [t.get_text() for t in ax.get_yticklabels()]
    widths = [bar.get_width() for bar in ax.patches]
    assert sorted(names) == sorted(SEARCHED)
    assert all(w >= 0 for w in widths) and sum(widths) == pytest.approx(1.0)
    assert widths == sorted(widths)  # the most important on top


def test_importance_says_what_it_needs_with_one_completed_trial(tmp_path):
    from test_analysis import write_trial

    exp = f"file://{tmp_path}/store/ns/e/{'0' * 8}"
    write_trial(exp, "e-00000", [{"acc": 0.5}], workdir=tmp_path)
    ax = _drawn(fill_study(ExperimentAnalysis(exp, "acc", "max")), "importance")
    assert not ax.patches
    assert [t.get_text() for t in ax.texts] == ["importance needs 2 completed trials (1 so far)"]


def test_save_writes_every_kind_to_png_and_svg(analysis, tmp_path):
    from PIL import Image

    figure = save(analysis, str(tmp_path / "all.png"))
    assert [ax.get_title() for ax in figure.axes if ax.get_title()] == [
        f"{NAMESPACE}/{EXPERIMENT}: learning curves",
        f"{NAMESPACE}/{EXPERIMENT}: parallel coordinates",
        f"{NAMESPACE}/{EXPERIMENT}: importance for {METRIC}",
    ]
    with Image.open(tmp_path / "all.png") as image:
        assert image.format == "PNG" and image.size == (900, 1500)
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50  # drawn, not a blank page
    save(analysis, str(tmp_path / "curves.svg"), ["learning_curves"])
    svg = (tmp_path / "curves.svg").read_text()
    assert svg.startswith("<?xml") and all(f'id="{t.name}"' in svg for t in TRIALS)
    with pytest.raises(ValueError, match="unknown kind of plot"):
        save(analysis, str(tmp_path / "x.png"), ["scatter"])


def test_analysis_and_result_grid_plot_on_an_axes(analysis):
    for source in (analysis, ResultGrid(analysis)):
        for kind in KINDS:
            ax = Figure().subplots()
            assert source.plot(kind, ax=ax) is ax and ax.get_title().endswith(
                ("learning curves", "parallel coordinates", f"importance for {METRIC}")
            )
    ax = analysis.plot()
    assert len(ax.lines) == len(TRIALS)
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
    with pytest.raises(ValueError, match="unknown kind of plot 'scatter'"):
        analysis.plot("scatter")


def test_the_plot_command_reads_storage_alone(s3_exp, tmp_path, capsys, monkeypatch):
    _, endpoint, root = s3_exp
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    out = tmp_path / "digits.svg"
    args = ["plot", EXPERIMENT, "-n", NAMESPACE, "--storage-only", "--storage", root, "--out", str(out)]
    assert cli.main([*args, "--metric", METRIC, "--mode", "max", "--kind", "learning-curves"]) == cli.OK
    assert capsys.readouterr().err == f"wrote {out} (learning_curves)\n"
    assert all(f'id="{t.name}"' in out.read_text() for t in TRIALS)
    assert cli.main(args) == cli.USAGE
    assert "--storage-only needs --metric and --mode" in capsys.readouterr().err
    assert cli.main(
        [*args[:2], "--storage-only", "--storage", root, "--out", str(out), "--metric", "a", "--mode", "max"]
    )
    assert capsys.readouterr().err.startswith(f"error: no experiment stored at {root}/default/{EXPERIMENT} (")


def test_the_dashboard_command_serves_the_study_until_ctrl_c(s3_exp):
    _, endpoint, root = s3_exp
    env = {
        **os.environ,
        **AWS_TEST_ENV,
        "AWS_ENDPOINT_URL": endpoint,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("trainable-runtime", "operator", ".")),
    }
    command = [sys.executable, "-m", "kubetune.sdk.cli", "dashboard", EXPERIMENT, "-n", NAMESPACE, "--storage-only"]
    command += ["--storage", root, "--metric", METRIC, "--mode", "max", "--port", "0", "--no-browser"]
    proc = subprocess.Popen(
        command,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell ignores SIGINT
    )
    try:
        line = proc.stderr.readline()
        prefix = f"Optuna Dashboard of {len(TRIALS)} trials, refreshed from storage every 1 s: http://127.0.0.1:"
        assert line.startswith(prefix), line
        url = line.split(": ", 1)[1].split()[0]
        base = url.split("/dashboard/")[0]
        with urllib.request.urlopen(f"{base}/api/studies/0", timeout=30) as response:
            served = json.load(response)
        assert [t["user_attrs"][0]["value"] for t in served["trials"]] == [t.name for t in TRIALS]
        assert [len(t["intermediate_values"]) for t in served["trials"]] == [len(t.history) for t in TRIALS]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == cli.OK
    finally:
        proc.kill()
        proc.wait()


def test_the_plot_command_takes_the_objective_space_and_failures_from_the_experiment(tmp_path, monkeypatch, capsys):
    """Without --storage-only the Experiment (here from a stand-in API server) names the storage, the metric, the
    search space (the lr axis spans the space's 1e-4 to 1e-1, not the values' range) and the failed trials."""
    from test_cli_errors import DISCOVERY, SERVED, ApiServer, kubeconfig

    root = f"file://{tmp_path}/store"
    store(root, tmp_path)
    api = ApiServer()
    try:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", api.url))
        api.routes[DISCOVERY] = SERVED
        api.routes[f"{DISCOVERY}/namespaces/{NAMESPACE}/experiments/{EXPERIMENT}"] = {
            "metadata": {"name": EXPERIMENT, "namespace": NAMESPACE, "uid": f"{UID}-0000"},
            "spec": {"storage": {"uri": root}, "metric": METRIC, "mode": "max", "config": SPACE},
        }
        owner = [{"uid": f"{UID}-0000"}]
        api.routes[f"{DISCOVERY}/namespaces/{NAMESPACE}/trials"] = {
            "items": [
                {
                    "metadata": {"name": t.name, "ownerReferences": owner},
                    "spec": {"index": i},
                    "status": {"phase": "Failed", "message": t.error} if t.error else {"phase": "Succeeded"},
                }
                for i, t in enumerate(TRIALS)
            ]
        }
        out = tmp_path / "digits.svg"
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to read it back
            assert cli.main(["plot", EXPERIMENT, "--out", str(out)]) == cli.OK
    finally:
        api.close()
    assert capsys.readouterr().err == f"wrote {out} (learning_curves, parallel_coordinates, importance)\n"
    svg = out.read_text()
    assert ">0.0001<" in svg and ">0.1<" in svg and f"importance for {METRIC}" in svg
    assert "failed (1)" in svg and "stopped early (2)" in svg
