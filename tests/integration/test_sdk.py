"""The Python SDK and the ``kubetune`` command against the local cluster: ``tune.run``, ``Tuner.fit``,
``with_parameters``, stoppers, results read back from storage, detaching with Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import kubetune as tune
from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.sdk.client import Cluster, InvalidExperiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = "sdk"


class Quadratic(tune.Trainable):
    """Defined in a test module the trial image cannot import: shipped cloudpickled by value."""

    def setup(self, config):
        self.x = 0.0

    def step(self):
        self.x += config_step(self.config)
        return {"score": -((self.x - self.config["target"]) ** 2)}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "x.json"), "w") as f:
            json.dump({"x": self.x}, f)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "x.json")) as f:
            self.x = json.load(f)["x"]


def config_step(config):
    return config["lr"]


def train_fn(config):
    """A function trainable reporting with checkpoints."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d, open(os.path.join(d, "n.json")) as f:
            start = json.load(f)["n"]
    for n in range(start + 1, 5):
        d = f"/tmp/ck-{os.getpid()}-{n}"
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "n.json"), "w") as f:
            json.dump({"n": n}, f)
        tune.report({"loss": config["a"] / n, "n": n}, checkpoint=tune.Checkpoint.from_directory(d))


def array_sum(config, data=None):
    tune.report({"sum": float(data.sum()) * config["k"], "size": int(data.size)})


@pytest.fixture
def sdk_env(cluster, monkeypatch):
    """The user's shell after ``eval $(python -m devcluster up)``: kubeconfig and S3 credentials."""
    for key, value in cluster.env().items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def storage(secret):
    return {"uri": f"s3://{S3_BUCKET}/{PREFIX}", "credentialsSecret": secret}


def experiment(custom, namespace, name):
    return custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", name)


def test_run_ships_a_test_module_class_by_value_and_returns_the_analysis(
    operator, custom, namespace, storage_secret, sdk_env
):
    analysis = tune.run(
        Quadratic,
        name="quad",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"lr": tune.grid_search([0.5, 1.0]), "target": tune.choice([4])},
        num_samples=2,
        metric="score",
        mode="max",
        stop={"training_iteration": 4},
        verbose=0,
        checkpoint_at_end=True,
        poll_interval_s=0.5,
    )
    exp = experiment(custom, namespace, "quad")
    assert exp["spec"]["trainable"]["pickleURI"].startswith(f"s3://{S3_BUCKET}/{PREFIX}/{namespace}/quad/sdk/")
    assert exp["status"]["phase"] == "Succeeded"
    # grid_search × num_samples: 2 × 2 trials, the grid varying fastest (Ray's order)
    assert [t.config["lr"] for t in analysis.trials] == [0.5, 1.0, 0.5, 1.0]
    assert all(t.last_result["training_iteration"] == 4 for t in analysis.trials)
    best = exp["status"]["bestTrial"]
    assert analysis.get_best_trial().trial_id == best["name"]
    assert analysis.best_config == analysis.get_best_config("score", "max") == {"lr": 1.0, "target": 4}
    frame = analysis.dataframe()
    assert len(frame) == 4 and "config/lr" in frame.columns
    checkpoint = analysis.get_best_checkpoint(analysis.best_trial, "score", "max")
    with open(os.path.join(checkpoint.path, "x.json")) as f:
        assert json.load(f)["x"] == 4.0


def test_tuner_fit_with_a_function_trainable_by_import_path(operator, custom, namespace, storage_secret, sdk_env):
    tuner = tune.Tuner(
        "tests.integration.test_sdk:train_fn",
        param_space={"a": tune.grid_search([1.0, 2.0, 4.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
        run_config=tune.RunConfig(name="fn", verbose=0),
        namespace=namespace,
        storage=storage(storage_secret),
        poll_interval_s=0.5,
    )
    grid = tuner.fit()
    exp = experiment(custom, namespace, "fn")
    assert exp["spec"]["trainable"] == {"entrypoint": "tests.integration.test_sdk:train_fn"}
    assert exp["spec"]["maxConcurrentTrials"] == 2
    assert len(grid) == 3 and grid.num_errors == 0 and tuner.get_results() is grid
    best = grid.get_best_result()
    assert best.config == {"a": 1.0} and best.metrics["loss"] == 0.25
    assert best.path.endswith("/" + exp["status"]["bestTrial"]["name"])
    with best.checkpoint.as_directory() as d, open(os.path.join(d, "n.json")) as f:
        assert json.load(f) == {"n": 4}


def test_with_parameters_uploads_a_large_array_once(operator, namespace, storage_secret, sdk_env, s3):
    data = np.ones(50 * 2**20 // 8)  # 50 MB
    trainable = tune.with_parameters(array_sum, data=data)
    analysis = tune.run(
        trainable,
        name="params",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"k": tune.grid_search([1, 2, 3])},
        verbose=0,
        poll_interval_s=0.5,
    )
    assert sorted(t.last_result["sum"] for t in analysis.trials) == [data.size, 2 * data.size, 3 * data.size]
    prefix = f"{PREFIX}/{namespace}/params/sdk/parameters/"
    objects = s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix)["Contents"]
    assert len(objects) == 1 and objects[0]["Size"] > data.nbytes
    uploaded_at = objects[0]["LastModified"]
    # the same object again (a second run) is not uploaded again
    again = tune.with_parameters(array_sum, data=data)
    from kubetune.storage import open_storage

    store = open_storage(f"s3://{S3_BUCKET}", os.environ["AWS_ENDPOINT_URL_S3"])
    assert again._kubetune_parameters[0].upload(store, f"s3://{S3_BUCKET}/{PREFIX}/{namespace}/params/sdk") == 0
    assert s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix)["Contents"][0]["LastModified"] == uploaded_at


def test_built_in_stoppers_and_analysis_from_storage_alone(operator, custom, namespace, storage_secret, sdk_env):
    stop = tune.stopper.CombinedStopper(tune.stopper.MaximumIterationStopper(3))
    tune.run(
        Quadratic,
        name="stopped",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"lr": tune.grid_search([1.0, 2.0]), "target": 1},
        stop=stop,
        verbose=0,
        poll_interval_s=0.5,
    )
    exp = experiment(custom, namespace, "stopped")
    assert exp["spec"]["stoppers"] == [{"name": "maximum_iteration", "params": {"max_iter": 3}}]
    # no cluster needed: the storage URI alone
    analysis = ExperimentAnalysis(
        f"s3://{S3_BUCKET}/{PREFIX}/{namespace}/stopped",
        default_metric="score",
        default_mode="max",
        storage_endpoint=os.environ["AWS_ENDPOINT_URL_S3"],
    )
    assert [t.last_result["training_iteration"] for t in analysis.trials] == [3, 3]
    assert analysis.best_config == {"lr": 1.0, "target": 1}


class CloseEnough(tune.Stopper):
    """A Stopper of the user's own: runs in each trial's pod."""

    def __call__(self, trial_id, result):
        return result["training_iteration"] >= 2 and result["score"] > -1.0


def test_sample_from_and_a_users_stopper_run_in_the_trial_pods(operator, custom, namespace, storage_secret, sdk_env):
    stop = tune.stopper.CombinedStopper(tune.stopper.MaximumIterationStopper(10), CloseEnough())
    analysis = tune.run(
        Quadratic,
        name="user-code",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"lr": tune.grid_search([0.5, 1.0]), "target": tune.sample_from(lambda spec: spec.config.lr * 4)},
        stop=stop,
        metric="score",
        mode="max",
        verbose=0,
        poll_interval_s=0.5,
    )
    exp = experiment(custom, namespace, "user-code")
    assert exp["spec"]["stoppers"] == [{"name": "maximum_iteration", "params": {"max_iter": 10}}]
    assert list(exp["spec"]["config"]["target"]) == ["kubetune/pickled_function"]  # resolved in the pod
    assert [t.config for t in analysis.trials] == [{"lr": 0.5, "target": 2.0}, {"lr": 1.0, "target": 4.0}]
    # score = -(lr * (n - 4))**2: above -1 at n = 3 for lr 0.5, at n = 4 for lr 1.0
    assert [t.last_result["training_iteration"] for t in analysis.trials] == [3, 4]


def drawn_once(config):
    """Its first attempt checkpoints the ``sample_from`` value it ran with, then fails; the retry reports whether
    it runs with the same value."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        d = f"/tmp/drawn-{os.getpid()}"
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "seed.json"), "w") as f:
            json.dump({"seed": config["seed"]}, f)
        tune.report({"score": 0.0, "same": 1}, checkpoint=tune.Checkpoint.from_directory(d))
        raise RuntimeError("the first attempt fails once its checkpoint is taken")
    with checkpoint.as_directory() as d, open(os.path.join(d, "seed.json")) as f:
        first = json.load(f)["seed"]
    tune.report({"score": 1.0, "same": int(first == config["seed"])})


def test_a_retried_trial_runs_with_the_sample_from_values_its_first_attempt_drew(
    operator, custom, namespace, storage_secret, sdk_env
):
    analysis = tune.run(
        drawn_once,
        name="drawn-once",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"seed": tune.sample_from(lambda spec: __import__("random").random())},
        max_failures=1,
        metric="score",
        mode="max",
        verbose=0,
        poll_interval_s=0.5,
    )
    (trial,) = analysis.trials
    assert trial.last_result["score"] == 1.0 and trial.last_result["same"] == 1  # Ray draws once per trial
    status = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "trials", "drawn-once-00000")[
        "status"
    ]
    assert status["attempt"] == 1 and status["config"] == trial.config and 0 <= trial.config["seed"] < 1


def seeded_name(trial):
    """A ``trial_name_creator``: called in the trial's first pod, with the config that pod drew."""
    return f"{trial.trainable_name}-seed-{trial.config['seed']:.6f}"


def test_trial_name_creator_names_a_trial_in_its_first_pod_for_its_whole_life(
    operator, custom, namespace, storage_secret, sdk_env
):
    """Ray's trial_name_creator: the trial's first pod calls it with the values it drew; the retried attempt keeps
    the name; the Trial's status, ``kubetune get NAME`` and the analysis's ``str(trial)`` show it, and the object
    keeps its name."""
    analysis = tune.run(
        drawn_once,
        name="named",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"seed": tune.sample_from(lambda spec: __import__("random").random())},
        max_failures=1,
        trial_name_creator=seeded_name,
        metric="score",
        mode="max",
        verbose=0,
        poll_interval_s=0.5,
    )
    (trial,) = analysis.trials
    expected = f"drawn_once-seed-{trial.config['seed']:.6f}"
    status = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "trials", "named-00000")[
        "status"
    ]
    assert (status["attempt"], status["displayName"]) == (1, expected)  # the retry kept the first pod's name
    assert trial.last_result["score"] == 1.0 and trial.trial_id == "named-00000" and str(trial) == expected
    header, row = kubetune_cli("get", "named", "-n", namespace, env=sdk_env).stdout.splitlines()[-2:]
    assert header.split()[:3] == ["TRIAL", "DISPLAY-NAME", "PHASE"], header
    assert row.split()[:3] == ["named-00000", expected, "Succeeded"], row


def test_a_spec_the_operator_refuses_raises_and_leaves_nothing(operator, custom, namespace, storage_secret, sdk_env):
    scheduler = tune.schedulers.ASHAScheduler(metric="score", mode="max", grace_period=5, max_t=2)
    with pytest.raises(InvalidExperiment, match="grace_period"):
        tune.run(
            Quadratic,
            name="refused",
            namespace=namespace,
            storage=storage(storage_secret),
            config={"lr": 1.0, "target": 1},
            scheduler=scheduler,
            verbose=0,
            poll_interval_s=0.5,
        )
    cluster = Cluster.connect(namespace=namespace)
    wait_for(
        lambda: not [e for e in cluster.list() if e["metadata"]["name"] == "refused"],
        timeout=30,
        what="the refused experiment to be deleted",
    )


def test_failed_trials_raise_tune_error_with_their_message(operator, namespace, storage_secret, sdk_env):
    with pytest.raises(tune.TuneError, match="Trials did not complete"):
        tune.run(
            "tests.integration.trainables:Counter",
            name="failing",
            namespace=namespace,
            storage=storage(storage_secret),
            config={"x": 1, "always_fail": True},
            verbose=0,
            poll_interval_s=0.5,
        )
    grid = tune.Tuner.restore("failing", namespace=namespace, storage=storage(storage_secret)).fit()
    assert grid.num_errors == 1 and "always fails" in str(grid.errors[0])


def kubetune_cli(*args, env, check=True):
    done = subprocess.run(
        [sys.executable, "-m", "kubetune.sdk.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_the_kubetune_command(operator, custom, namespace, storage_secret, sdk_env, tmp_path, cluster):
    manifest = tmp_path / "exp.yaml"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "kubetune.io/v1alpha1",
                "kind": "Experiment",
                "metadata": {"name": "cli"},
                "spec": {
                    "trainable": {"entrypoint": "tests.integration.trainables:Counter"},
                    "config": {"x": {"grid_search": [1, 3]}},
                    "metric": "score",
                    "mode": "max",
                    "stop": {"training_iteration": 2},
                    "checkpoint": {"atEnd": True},
                    "podRetentionPolicy": {"whenSucceeded": "Retain"},
                    "storage": {**storage(storage_secret), "endpoint": cluster.s3_endpoint},
                },
            }
        )
    )
    ns = ["-n", namespace]
    assert "created" in kubetune_cli("run", str(manifest), "--watch", *ns, env=sdk_env).stderr
    listed = kubetune_cli("get", *ns, env=sdk_env).stdout.splitlines()
    assert listed[0].split() == ["NAME", "PHASE", "RUNNING", "SUCCEEDED", "FAILED", "BEST", "REASON", "AGE"]
    assert listed[1].split()[:6] == ["cli", "Succeeded", "0", "2", "0", "6"]
    shown = kubetune_cli("get", "cli", *ns, "-o", "json", env=sdk_env).stdout
    assert json.loads(shown)["status"]["phase"] == "Succeeded"
    best = json.loads(kubetune_cli("best", "cli", *ns, "-o", "json", env=sdk_env).stdout)
    assert best["config"] == {"x": 3} and best["metricValue"] == 6.0
    rows = kubetune_cli("analysis", "cli", *ns, "-o", "csv", env=sdk_env).stdout.splitlines()
    assert len(rows) == 3 and "config/x" in rows[0].split(",")
    assert kubetune_cli("watch", "cli", *ns, env=sdk_env).returncode == 0
    log = kubetune_cli("logs", "cli-00001", *ns, env=sdk_env).stdout  # the runtime's log, via the API server
    assert "trial ends" in log and kubetune_cli("logs", "cli-00001", "-f", *ns, env=sdk_env).stdout == log
    gone = kubetune_cli("logs", "cli-00001", "--attempt", "5", *ns, env=sdk_env, check=False)
    assert gone.returncode == 3 and "is gone" in gone.stderr
    ran = kubetune_cli(
        "run",
        "tests.integration.trainables:Counter",
        "--name",
        "cli-fn",
        "--config",
        '{"x": {"grid_search": [1, 2]}}',
        "--stop",
        '{"training_iteration": 2}',
        "--metric",
        "score",
        "--mode",
        "max",
        "--storage",
        storage(storage_secret)["uri"],
        "--secret",
        storage_secret,
        *ns,
        env=sdk_env,
    )
    assert json.loads(ran.stdout) == {"best_config": {"x": 2}}
    nomodule = kubetune_cli(
        "run", "nomodule:Foo", "--name", "cli-nomod", "--storage", storage(storage_secret)["uri"], "--secret",
        storage_secret, *ns, env=sdk_env, check=False,
    )  # fmt: skip
    last = nomodule.stderr.strip().splitlines()[-1]
    assert nomodule.returncode == 1 and last.startswith("error: 1 of 1 trials failed; cli-nomod-00000: "), last
    assert "No module named 'nomodule'" in last and last.endswith("(kubetune logs cli-nomod-00000 shows its log)")
    kubetune_cli("suspend", "cli", *ns, env=sdk_env)
    assert experiment(custom, namespace, "cli")["spec"]["suspend"] is True
    kubetune_cli("resume", "cli", *ns, env=sdk_env)
    assert experiment(custom, namespace, "cli")["spec"]["suspend"] is False
    kubetune_cli("delete", "cli", *ns, env=sdk_env)
    missing = kubetune_cli("get", "cli", *ns, env=sdk_env, check=False)
    assert missing.returncode == 3 and "not found" in missing.stderr
    usage = kubetune_cli("get", *ns, "-o", "toml", env=sdk_env, check=False)
    assert usage.returncode == 2


def test_ctrl_c_detaches_and_the_experiment_keeps_running(operator, custom, namespace, storage_secret, sdk_env):
    script = textwrap.dedent(f"""
        import kubetune as tune
        tune.run("tests.integration.trainables:Counter", name="detach", namespace={namespace!r},
                 storage={storage(storage_secret)!r}, config={{"x": 1, "sleep": 1}},
                 stop={{"training_iteration": 30}}, poll_interval_s=0.5)
    """)
    # Ctrl-C as a terminal sends it: SIGINT handled as by default. A test run started in the background by a shell
    # (`make test &`, a CI runner) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=sdk_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for(
            lambda: (experiment_or_none(custom, namespace, "detach") or {}).get("status", {}).get("phase") == "Running",
            timeout=60,
            what="the experiment to run",
        )
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]  # the hint is the traceback's last line, with no chained exception above
    assert last.startswith(f"kubetune.tuner.Detached: detached from experiment {namespace}/detach, which keeps")
    assert f"tune.run(..., restore='detach', namespace='{namespace}')" in last
    assert f"`kubetune watch detach -n {namespace}`" in last and "During handling" not in err
    time.sleep(2)
    exp = experiment(custom, namespace, "detach")
    assert exp["status"]["phase"] == "Running" and not exp["spec"].get("suspend")


def experiment_or_none(custom, namespace, name):
    from kubernetes.client import ApiException

    try:
        return experiment(custom, namespace, name)
    except ApiException:
        return None


def test_a_pbt_policy_is_written_as_ray_writes_it_and_replays_on_a_new_trial(
    operator, custom, namespace, storage_secret, sdk_env, s3
):
    pbt = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"x": [1, 2, 3, 4]},
        resample_probability=0,
    )
    tune.run(
        "tests.integration.trainables:Counter",
        name="pbt-src",
        namespace=namespace,
        storage=storage(storage_secret),
        config={"x": tune.grid_search([1, 2, 3, 4]), "sleep": 0.3},
        metric="score",
        mode="max",
        stop={"training_iteration": 8},
        scheduler=pbt,
        max_concurrent_trials=4,
        checkpoint_at_end=True,
        verbose=0,
        poll_interval_s=0.5,
    )
    found = {
        t["metadata"]["name"]: t
        for t in custom.list_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "trials")["items"]
        if t["spec"]["experiment"] == "pbt-src"
    }
    perturbed = [t for t in found.values() if t["status"].get("perturbations")]
    assert perturbed
    trial = perturbed[0]
    name, last = trial["metadata"]["name"], trial["status"]["perturbations"][-1]
    uid = experiment(custom, namespace, "pbt-src")["metadata"]["uid"][:8]
    key = f"{PREFIX}/{namespace}/pbt-src/{uid}/pbt_policy_{name}.txt"
    lines = [json.loads(x) for x in s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read().decode().splitlines()]
    assert lines[-1][:2] == [name, last["donor"]] and lines[-1][3] == last["iteration"]
    assert lines[-1][5] == trial["status"]["config"]  # Ray's line: the donor's config, then the new one
    # the replay: the policy's first config, then its configs at its steps, restoring the trial's own checkpoint
    replay = tune.schedulers.PopulationBasedTrainingReplay(f"s3://{S3_BUCKET}/{key}")
    analysis = tune.run(
        "tests.integration.trainables:Counter",
        name="pbt-replay",
        namespace=namespace,
        storage=storage(storage_secret),
        metric="score",
        mode="max",
        stop={"training_iteration": 8},
        scheduler=replay,
        checkpoint_at_end=True,
        verbose=0,
        poll_interval_s=0.5,
    )
    (replayed,) = [
        t
        for t in custom.list_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "trials")["items"]
        if t["spec"]["experiment"] == "pbt-replay"
    ]
    assert replayed["spec"]["config"] == replay.config
    changes = [(step, config) for step, config in replay.params["policy"] if step < 8]  # the stop wins at 8
    assert [p["iteration"] for p in replayed["status"].get("perturbations", [])] == [s for s, _ in changes]
    assert replayed["status"].get("config", replayed["spec"]["config"]) == (
        changes[-1][1] if changes else replay.config
    )
    assert analysis.trials[0].last_result["training_iteration"] == 8
