"""kubetune.sdk.live_study: the Optuna study the live dashboard serves, refreshed from an experiment stored by the
runtime's own writers (file:// and moto's S3) while trials report: new results and trials are written into the
study once each, the trials keep their numbers, trials stay RUNNING until the experiment is quiet and then take the
states fill_study gives."""

from __future__ import annotations

import math

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures
from stored_experiment import METRIC, SPACE, TRIALS, exploit, store
from test_analysis import write_trial

from kubetune.sdk.analysis import ExperimentAnalysis, changed_trials
from kubetune.sdk.live_study import LiveStudy
from kubetune.sdk.optuna_study import EXPLOITS_ATTR, TRIAL_NAME_ATTR, fill_study

NEW = {"lr": 0.001, "layers": 2, "act": "relu", "epochs": 6}


@pytest.fixture(params=["file", "s3"])
def stored(request, tmp_path):
    """``(analysis, endpoint)`` of the stored experiment, on file:// or moto's S3."""
    if request.param == "file":
        return ExperimentAnalysis(store(f"file://{tmp_path}/store", tmp_path), METRIC, "max", param_space=SPACE), None
    request.getfixturevalue("aws_env")
    endpoint = request.getfixturevalue("moto_endpoint")
    uri = store(f"s3://{new_bucket(endpoint)}/kubetune", tmp_path, endpoint)
    return ExperimentAnalysis(uri, METRIC, "max", storage_endpoint=endpoint, param_space=SPACE), endpoint


def _report(analysis, endpoint, workdir, name, values, config):
    """Write trial ``name``'s results ``values`` again, whole, as the runtime's next sync does."""
    write_trial(
        analysis.experiment_path, name, [{METRIC: v} for v in values], config=config, endpoint=endpoint, workdir=workdir
    )


def test_a_refresh_writes_new_results_and_trials_once_each_and_keeps_the_numbers(stored, tmp_path):
    analysis, endpoint = stored
    live = LiveStudy(analysis, settle_s=3600)
    before = live.study.get_trials()
    assert [t.user_attrs[TRIAL_NAME_ATTR] for t in before] == [t.name for t in TRIALS]
    assert [t.state.name for t in before] == ["FAIL" if t.state == "FAIL" else "RUNNING" for t in TRIALS]
    assert live.refresh() is False  # nothing written since

    grown = [*TRIALS[2].values, 0.5, 0.55]
    _report(analysis, endpoint, tmp_path / "a", TRIALS[2].name, grown[:3], TRIALS[2].config)
    _report(analysis, endpoint, tmp_path, "digits-00008", [0.25], NEW)
    assert live.refresh() is True
    _report(analysis, endpoint, tmp_path / "b", TRIALS[2].name, grown, TRIALS[2].config)  # the same second on S3
    assert live.refresh() is True

    after = live.study.get_trials()
    assert [t.user_attrs[TRIAL_NAME_ATTR] for t in after] == [t.name for t in TRIALS] + ["digits-00008"]
    assert [t.number for t in after] == list(range(len(TRIALS) + 1))
    assert after[2].intermediate_values == dict(enumerate(grown, 1))
    assert after[2].user_attrs == {
        TRIAL_NAME_ATTR: TRIALS[2].name,
        "training_iteration": 4,
        METRIC: 0.55,
        f"best_{METRIC}": max(grown),
    }
    assert after[8].intermediate_values == {1: 0.25} and after[8].params == {"lr": 0.001, "layers": 2, "act": "relu"}
    assert after[8].state.name == "RUNNING" and after[2].state.name == "RUNNING"
    for old, new in zip(before, after):  # the others as they were
        if old.number != 2:
            assert (new.intermediate_values, new.user_attrs, new.state) == (
                old.intermediate_values,
                old.user_attrs,
                old.state,
            )
    assert live.refresh() is False


def test_once_quiet_the_trials_take_fill_studys_states_and_then_stay(stored, tmp_path):
    analysis, endpoint = stored
    live = LiveStudy(analysis, settle_s=3600)
    live.settle_s = 0  # no write for an hour, as far as the study can tell
    assert live.refresh() is True
    expected = fill_study(analysis).get_trials()
    got = live.study.get_trials()
    assert [(t.state, t.value, t.intermediate_values, t.user_attrs) for t in got] == [
        (t.state, t.value, t.intermediate_values, t.user_attrs) for t in expected
    ]
    assert [t.state.name for t in got] == [t.state for t in TRIALS]
    assert live.refresh() is False

    _report(analysis, endpoint, tmp_path / "late", TRIALS[2].name, [*TRIALS[2].values, 0.5], TRIALS[2].config)
    assert live.refresh() is False  # a final trial stays final
    assert live.study.get_trials()[2].intermediate_values == dict(TRIALS[2].history)


def test_an_experiment_quiet_when_filled_shows_its_final_states_at_once(stored):
    analysis, _ = stored
    live = LiveStudy(analysis, settle_s=0)
    assert [t.state.name for t in live.study.get_trials()] == [t.state for t in TRIALS]
    assert live.refresh() is False


def test_a_running_trials_steps_its_exploit_dropped_are_nan_until_it_reports_them_again(stored, tmp_path):
    """Trial 1 (six results in the study) is exploited from trial 0's checkpoint of 4: its pod keeps results 1 to 4
    and reports 5; the study's step 6, of the lineage it left, is NaN (Optuna deletes no intermediate value) until
    the trial reports 6 again, and the trial's exploits show."""
    analysis, endpoint = stored
    live = LiveStudy(analysis, settle_s=3600)
    donor, trial = TRIALS[0], TRIALS[1]
    config = {**trial.config, "lr": 0.012}
    exploit(analysis.experiment_path, trial.name, donor.name, 6, 4, [0.91], config, tmp_path / "a", endpoint)
    assert live.refresh() is True
    got = live.study.get_trials()[1]
    assert {k: v for k, v in got.intermediate_values.items() if k != 6} == {**dict(trial.history[:4]), 5: 0.91}
    assert math.isnan(got.intermediate_values[6])
    assert got.user_attrs[EXPLOITS_ATTR] == f"at 6 from {donor.name}@4" and got.user_attrs[METRIC] == 0.91
    assert got.state.name == "RUNNING"

    exploit(analysis.experiment_path, trial.name, donor.name, 6, 4, [0.91, 0.92], config, tmp_path / "b", endpoint)
    assert live.refresh() is True
    assert live.study.get_trials()[1].intermediate_values == {**dict(trial.history[:4]), 5: 0.91, 6: 0.92}
    live.settle_s = 0
    live.refresh()
    quiet = live.study.get_trials()[1]
    assert (quiet.state.name, quiet.value) == ("COMPLETE", 0.92)
    assert quiet.intermediate_values == fill_study(live.analysis).get_trials()[1].intermediate_values


def test_a_refresh_looks_at_the_trials_written_and_those_whose_error_changed(stored, tmp_path):
    """A trial the cluster says failed (its Trial's message) while its folder stays as it was turns FAIL at the next
    refresh that reads the experiment again, though only another trial's objects changed."""
    analysis, endpoint = stored
    errors = {t.name: "failed" for t in TRIALS if t.state == "FAIL"}

    def reread(previous=None, listed=None):
        return ExperimentAnalysis(
            analysis.experiment_path,
            METRIC,
            "max",
            storage_endpoint=endpoint,
            trial_errors=dict(errors),
            param_space=SPACE,
            previous=previous,
            listed=listed,
        )

    live = LiveStudy(reread(), reread=reread, settle_s=3600)
    running = next(t for t in TRIALS if t.state != "FAIL")
    assert live.study.trials[TRIALS.index(running)].state.name == "RUNNING"
    errors[running.name] = "OOMKilled"
    _report(analysis, endpoint, tmp_path, "digits-00008", [0.25], NEW)
    assert live.refresh() is True
    trials = live.study.get_trials()
    assert trials[TRIALS.index(running)].state.name == "FAIL"
    assert trials[-1].user_attrs[TRIAL_NAME_ATTR] == "digits-00008"


def test_a_refresh_lists_the_experiments_folder_once_and_reads_again_only_from_that_listing(
    stored, tmp_path, monkeypatch
):
    """The listing that shows a change is the one the new reading is made of (at 10,000 trials a listing of the
    folder's 40,000 objects is most of a refresh's time)."""
    analysis, endpoint = stored
    live = LiveStudy(analysis.reread(), settle_s=3600)
    listings, stamps = [], type(live.analysis.storage).stamps
    monkeypatch.setattr(
        type(live.analysis.storage), "stamps", lambda self, prefix: listings.append(prefix) or stamps(self, prefix)
    )
    _report(analysis, endpoint, tmp_path, "digits-00008", [0.25], NEW)
    assert live.refresh() is True
    assert listings == [analysis.experiment_path]
    assert live.study.get_trials()[-1].user_attrs[TRIAL_NAME_ATTR] == "digits-00008"
    assert live.refresh() is False and len(listings) == 2  # nothing changed: one listing, nothing read


def test_changed_trials_names_the_trial_folders_written_and_none_for_an_object_beside_them():
    base = "s3://b/kubetune/team/digits/ab12cd34"
    before = {f"{base}/t-0/result.json": (1.0, "10:a"), f"{base}/t-1/result.json": (1.0, "10:b")}
    after = {**before, f"{base}/t-1/result.json": (2.0, "20:c"), f"{base}/t-2/params.json": (2.0, "5:d")}
    assert changed_trials(before, after, base) == {"t-1", "t-2"}
    assert changed_trials(after, before, base + "/") == {"t-1", "t-2"}  # removed ones too; a trailing slash
    assert changed_trials(before, before, base) == set()
    assert changed_trials(before, {**before, f"{base}/pbt_global.txt": (3.0, "1:e")}, base) is None
