"""Ray's ``trial_name_creator`` (issue 33): the SDK ships it as it ships ``sample_from`` functions, each Trial's first
pod calls it with a Ray-like trial and reports the name with its first batch, the operator checks it, journals it and
keeps it as ``status.displayName`` (later attempts get it and call nothing), and the readers show it while object
names stay the trials' ids. Restarts at every instant, retries and PBT exploits: ``tests/unit/test_restarts.py``."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest_runtime import Collector, run_runtime, runtime_env
from test_collector import KEY, batch, post, token

import kubetune as tune
from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.limits import MAX_DISPLAY_NAME_CHARS, display_name_problem
from kubetune.runtime.trial_name import TrialInfo
from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.sdk.cli import _trial_rows
from kubetune.sdk.client import ClusterUnavailable
from kubetune.sdk.progress import status_lines
from kubetune.sdk.tuner import create_experiment, experiment_analysis
from kubetune.shipping import FUNCTION_KEY, dumps, loads
from kubetune.storage import join_uri, open_storage
from kubetune_operator import journal
from kubetune_operator.controller import ExperimentController
from kubetune_operator.experiment_spec import ExperimentSpec
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings

CREATOR = "s3://b/p/ns/exp/sdk/functions/name.pkl"


# ----- the SDK ships the creator -------------------------------------------------------------------------------
class Recording:
    """A cluster that takes every Experiment it is asked to create (the SDK's side of the API server)."""

    namespace = "ns"

    def __init__(self):
        self.created: list[dict] = []

    def create(self, body):
        self.created.append(body)
        return body


def lr_name(trial):
    return f"{trial.trainable_name} lr={trial.config['lr']}"


def test_the_sdk_pickles_the_creator_beside_the_sample_from_functions_and_names_it_in_the_spec(tmp_path):
    store = f"file://{tmp_path / 'store'}"

    def train(config):
        return {"score": 1}

    cluster = Recording()
    create_experiment(cluster, train, "exp", {"uri": store}, None, {"lr": 0.1}, trial_name_creator=lr_name)
    spec = cluster.created[0]["spec"]
    uri = spec["trialNameCreator"]["pickleURI"]
    assert uri.startswith(join_uri(store, "ns", "exp", "sdk", "functions") + "/") and uri.endswith(".pkl")
    creator = loads(open_storage(uri).get_bytes(uri))  # what the trial pod loads
    assert creator(TrialInfo("train", "exp-00000", {"lr": 0.1}, "0_lr=0.1", "s3://x")) == "train lr=0.1"
    assert ExperimentSpec.parse(spec).trial_name_creator == uri  # the operator reads it
    with pytest.raises(TypeError, match="trial_name_creator must be a function of the trial"):
        create_experiment(Recording(), train, "exp", {"uri": store}, None, {}, trial_name_creator="lr")


def test_tune_run_and_tuners_tune_config_take_a_creator_and_refuse_a_dirname_creator(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(ClusterUnavailable):  # accepted: the next step asks the cluster
        tune.run("m:T", name="exp", storage="s3://b/p", trial_name_creator=lr_name)
    with pytest.raises(ClusterUnavailable):
        tune.Tuner("m:T", tune_config=tune.TuneConfig(trial_name_creator=lr_name), storage="s3://b/p").fit()
    dirname = tune.TuneConfig(trial_dirname_creator=lambda trial: trial.trial_id)
    refused = "trial_dirname_creator is not supported by kubetune: .*display names with trial_name_creator"
    with pytest.raises(ValueError, match=refused):
        tune.Tuner("m:T", tune_config=dirname, storage="s3://b/p").fit()


def test_the_operator_refuses_a_creator_for_a_container_trial():
    spec = {"trainable": {"command": ["train"]}, "trialNameCreator": {"pickleURI": CREATOR}}
    with pytest.raises(ValueError, match="container trial.*spec.trialNameCreator"):
        ExperimentSpec.parse(spec)


# ----- the trial pod calls it --------------------------------------------------------------------------------------
NAMED = """
import kubetune


class Named(kubetune.Trainable):
    def step(self):
        return {"score": self.config["lr"], "name": self.trial_name}
"""


def _pod(tmp_path, creator=None, **fields):
    """Run one attempt of trial ``trial-0`` (config ``lr`` a ``sample_from`` function drawing 0.5) to iteration 2;
    return ``(exit code, output, batches the collector got, termination message)``."""
    storage = open_storage(f"file://{tmp_path / 'store'}")
    functions = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions"
    storage.put_bytes(f"{functions}/lr.pkl", dumps(lambda spec: 0.5))
    if creator is not None:
        storage.put_bytes(f"{functions}/name.pkl", dumps(creator))
        fields["name_creator"] = f"{functions}/name.pkl"
    collector = Collector().start()
    env = runtime_env(
        tmp_path,
        f"file://{tmp_path / 'store'}/ns/exp/trial-0",
        config={"lr": {FUNCTION_KEY: f"{functions}/lr.pkl"}},
        stop={"training_iteration": 2},
        collector=collector,
        source=NAMED,
        name="Named",
        **fields,
    )
    code, output = run_runtime(env)
    collector.stop()
    return code, output, collector.batches, (tmp_path / "termination-log").read_text()


def test_the_first_pod_calls_the_creator_as_ray_does_and_reports_its_name_once_with_its_first_batch(tmp_path):
    def creator(trial):
        assert trial.status == "PENDING" and trial.path.endswith("/ns/exp/trial-0")
        return f"{trial.trainable_name}/{trial.trial_id} lr={trial.config['lr']} tag={trial.experiment_tag} {trial}"

    code, output, batches, _ = _pod(tmp_path, creator, tag="0_lr=0.5")
    assert code == 0, output
    expected = "Named/trial-0 lr=0.5 tag=0_lr=0.5 Named_trial-0"  # drawn config; Ray's str(trial) before the name
    sent = [i for i, b in enumerate(batches) if "displayName" in b]
    assert [batches[i]["displayName"] for i in sent] == [expected], batches
    assert sent[0] <= min(i for i, b in enumerate(batches) if b["results"])  # with or before the first result
    assert [r["name"] for r in (r for b in batches for r in b["results"])] == [expected] * 2  # Ray's trial_name


def test_a_later_attempt_runs_with_the_name_it_is_given_and_reports_none(tmp_path):
    code, output, batches, _ = _pod(tmp_path, attempt=1, display_name="lr 0.5")
    assert code == 0, output
    assert not any("displayName" in b for b in batches)
    assert {r["name"] for b in batches for r in b["results"]} == {"lr 0.5"}


def test_a_creator_that_gives_nothing_leaves_the_trial_its_own_name(tmp_path):
    code, output, batches, _ = _pod(tmp_path, lambda trial: "")
    assert code == 0, output
    assert not any("displayName" in b for b in batches)
    assert {r["name"] for b in batches for r in b["results"]} == {"trial-0"}


@pytest.mark.parametrize(
    "creator, message",
    [
        (lambda trial: trial.no_such_field, r"trial_name_creator <lambda> raised AttributeError: the trial a "),
        (lambda trial: 1 / 0, "trial_name_creator <lambda> raised ZeroDivisionError: division by zero"),
        (lambda trial: 7, "trial_name_creator <lambda> must return a string, got int"),
        (lambda trial: "two\nlines", "returned a name kubetune cannot show: a display name must be printable"),
    ],
)
def test_a_creator_that_fails_fails_the_attempt_with_a_readable_message(tmp_path, creator, message):
    """Ray's run raises in its driver; here the attempt fails (retried as any failure), before any result."""
    code, output, batches, termination = _pod(tmp_path, creator)
    assert code == 1, output
    assert message in termination.splitlines()[-1], termination
    assert not any(b["results"] or "displayName" in b for b in batches)


def test_the_trial_a_creator_gets_names_what_it_offers():
    trial = TrialInfo("Net", "exp-00003", {"env": "CartPole/v1"}, "3_env=CartPole/v1", "s3://b/p/exp-00003")
    assert str(trial) == "Net_CartPole_v1_exp-00003"  # Ray's default: env in config, "/" as "_"
    with pytest.raises(AttributeError, match="has trainable_name, trial_id, config, experiment_tag, status, path"):
        trial.local_path  # noqa: B018 - the read is the test


def test_a_display_name_is_one_printable_line_of_bounded_length():
    assert display_name_problem("lr=0.1 · layers=2") is None
    assert display_name_problem("x" * MAX_DISPLAY_NAME_CHARS) is None
    assert "1 to 256 characters" in display_name_problem("x" * (MAX_DISPLAY_NAME_CHARS + 1))
    assert "1 to 256 characters" in display_name_problem("")
    assert "printable" in display_name_problem("a\tb")
    assert "must be a string, not int" in display_name_problem(3)


# ----- the operator keeps it ----------------------------------------------------------------------------------
def named_experiment(creator=True):
    spec = {"trialNameCreator": {"pickleURI": CREATOR}} if creator else {}
    return experiment_object(
        uid="u", config={"x": {"grid_search": [1, 2]}}, metric="acc", mode="max", storage={"uri": "s3://b/p"}, **spec
    )


class Operator:
    """One Experiment's controller with its journal in memory, killed and restarted at will (no cluster)."""

    def __init__(self, experiment):
        self.experiment, self.store, self.trials = experiment, ConfigMaps(), {}
        self.boot()
        for manifest in self.ctl.plan({}, 0.0).create_trials:
            name = manifest["metadata"]["name"]
            self.trials[name] = {**manifest, "metadata": {**manifest["metadata"], "uid": f"uid-{name}"}}
            self.ctl.trial_created(name, f"uid-{name}")
        self.commit()

    def boot(self):
        self.ctl = ExperimentController(self.experiment, Settings(), KEY)
        self.registry = Registry(Settings(), KEY, self.store.write)
        for trial in json.loads(json.dumps(list(self.trials.values()))):
            self.ctl.observe_trial(trial)
        self.ctl.restore(self.store.list())

    def commit(self):
        asyncio.run(self.registry.commit(self.ctl))

    def write_statuses(self):
        """A pass's status writes, carried out (the Trials in the API show them)."""
        plan = self.ctl.plan({}, 1.0)
        self.commit()
        for name, patch in plan.trial_status.items():
            self.trials[name].setdefault("status", {}).update(patch)
            self.ctl.status_written(name)

    def report(self, trial, attempt, name):
        self.ctl.record_results(trial, attempt, [{"acc": 0.5, "training_iteration": 1}], None, display_name=name)
        self.commit()

    def shown(self, trial):
        return self.ctl.book.trials[trial].status.get("displayName")


def test_the_name_is_the_trials_status_and_a_restart_finds_it_in_the_journal_a_snapshot_or_the_trial(monkeypatch):
    op = Operator(named_experiment())
    op.report("exp-00000", 0, "x=1")
    assert op.shown("exp-00000") == "x=1"
    op.boot()  # killed before any status write: the journal's entry gives it back
    assert op.shown("exp-00000") == "x=1"
    op.ctl.journal.snapshot_due = True  # a snapshot replaces the entry before the status shows the name
    op.commit()
    assert journal.load(op.ctl.journal, op.store.list())[1] == []
    op.boot()
    assert op.shown("exp-00000") == "x=1"
    op.write_statuses()
    assert op.trials["exp-00000"]["status"]["displayName"] == "x=1"
    assert op.ctl.decisions.snapshot()["podNames"] == {}  # the Trial shows it now
    op.ctl.journal.snapshot_due = True
    op.commit()
    op.boot()  # from the Trial's status alone
    assert op.shown("exp-00000") == "x=1" and op.shown("exp-00001") is None


def test_the_first_name_stays_and_a_spec_without_a_creator_takes_none():
    op = Operator(named_experiment())
    op.report("exp-00000", 0, "first")
    op.report("exp-00000", 0, "second")
    assert op.shown("exp-00000") == "first"
    plain = Operator(named_experiment(creator=False))
    plain.report("exp-00000", 0, "unasked")
    assert plain.shown("exp-00000") is None and not plain.ctl.journal.pending


@pytest.fixture
def registry():
    reg = Registry(Settings(), KEY, ConfigMaps().write)
    ctl = reg.load(named_experiment())
    for manifest in ctl.plan({}, 0.0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid")
    ctl.adopted = True
    return reg


@pytest.mark.parametrize(
    "name, words",
    [("a\nb", "printable"), ("x" * (MAX_DISPLAY_NAME_CHARS + 1), "1 to 256 characters"), (7, "malformed batch")],
)
def test_the_collector_refuses_a_batch_with_a_name_a_status_cannot_show(registry, name, words):
    status, reply = post(registry, batch(displayName=name), token())
    assert status == 400 and words in reply["error"], reply
    trial = registry.get("ns", "exp").trials["exp-00000"]
    assert "displayName" not in trial.status and "iteration" not in trial.status  # nothing of the batch taken


def test_the_collector_takes_a_good_name_with_the_batch(registry):
    status, reply = post(registry, batch(displayName="x=1 (first)"), token())
    assert (status, reply) == (200, {"decision": "continue"})
    assert registry.get("ns", "exp").trials["exp-00000"].status["displayName"] == "x=1 (first)"


# ----- readers show it -------------------------------------------------------------------------------------------
def trial_object(name, display_name=None, phase="Running"):
    status = {"phase": phase, "iteration": 3, **({"displayName": display_name} if display_name else {})}
    return {"metadata": {"name": name}, "spec": {"config": {}}, "status": status}


def test_kubetune_get_adds_a_display_name_column_only_when_a_trial_has_one():
    named = _trial_rows([trial_object("exp-00000", "lr=0.1"), trial_object("exp-00001")])
    assert named[0] == ["TRIAL", "DISPLAY-NAME", "PHASE", "ITER", "METRIC", "REASON"]
    assert named[1][:3] == ["exp-00000", "lr=0.1", "Running"] and named[2][:3] == ["exp-00001", None, "Running"]
    assert _trial_rows([trial_object("exp-00000")])[0] == ["TRIAL", "PHASE", "ITER", "METRIC", "REASON"]


def test_the_status_table_shows_the_display_name_as_rays_trial_name():
    experiment = {"metadata": {"name": "exp"}, "spec": {"config": {}}, "status": {"phase": "Running"}}
    lines = status_lines(experiment, [trial_object("exp-00000", "lr=0.1"), trial_object("exp-00001")])
    rows = [line.split()[0] for line in lines[3:]]
    assert rows == ["lr=0.1", "exp-00001"]


def test_the_analysis_keeps_object_names_as_ids_and_gives_str_the_display_name(tmp_path):
    store = f"file://{tmp_path / 'store'}"
    storage = open_storage(store)
    for name in ("exp-00000", "exp-00001"):
        storage.put_bytes(join_uri(store, "ns", "exp", "u0000000", name, "params.json"), b'{"lr": 0.1}')
    experiment = {"metadata": {"name": "exp", "namespace": "ns", "uid": "u0000000-x"}, "spec": {"storage": store}}
    trials = [trial_object("exp-00000", "lr=0.1", "Succeeded"), trial_object("exp-00001", None, "Succeeded")]
    analysis = experiment_analysis(experiment, trials)
    first, second = analysis.trials
    assert (first.trial_id, first.custom_trial_name, str(first)) == ("exp-00000", "lr=0.1", "lr=0.1")
    assert (second.trial_id, second.custom_trial_name, str(second)) == ("exp-00001", None, "exp-00001")
    assert str(analysis.reread().trials[0]) == "lr=0.1"
    assert str(ExperimentAnalysis(analysis.experiment_path).trials[0]) == "exp-00000"  # storage alone: no names
