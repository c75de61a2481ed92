"""Controller-level restart tests, no cluster: an Experiment is run to its end by a deterministic
simulation of the daemon, the collector and trial pods, once without interruption and once with
the operator "killed" over and over at every kind of instant (before and after its journal is
committed, before a plan is carried out). Every searcher and scheduler must make the same
decisions, at the same iterations, with the same configs, as the uninterrupted run.

The API server is a dict of Trials (status as the operator's patches left it) and the in-memory
ConfigMaps of ``devcluster.testkit``; nothing survives a kill but what the operator wrote.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import math

import pytest

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.env import OUTCOME_COMPLETED, OUTCOME_PAUSED, OUTCOME_STOPPED
from kubetune.shipping import FUNCTION_KEY, holds_function
from kubetune_operator import journal
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.schedulers.pb2_gp import select
from kubetune_operator.settings import Settings

KEY = b"k" * 32
MAX_ITER = 9


def experiment(**spec):
    base = {
        "trainable": {"entrypoint": "m:T"},
        "config": {"x": {"uniform": [0, 1]}, "y": {"choice": [1, 2, 3]}},
        "numSamples": 12,
        "metric": "score",
        "mode": "max",
        "maxConcurrentTrials": 3,
        "stop": {"training_iteration": MAX_ITER},
        "storage": {"uri": "s3://b/p"},
        "searchAlgorithm": {"name": "basic", "seed": 7},
    }
    if "objectives" in spec:  # in place of metric and mode
        del base["metric"], base["mode"]
    base.update(spec)
    return experiment_object(uid="0123456789-uid", **base)


def score(config, iteration):
    """A learning curve that depends on the config (``z``: a ``sample_from`` value, when drawn): different trials
    are stopped at different rungs."""
    x, y = config["x"], config["y"]
    drawn = 0.2 * config.get("z", 0.0)
    return round((x * y + 0.1 + drawn) * math.log1p(iteration) + (0.3 if y == 2 else 0.0) * iteration / MAX_ITER, 6)


def cost(config, iteration):
    """A second objective at odds with ``score`` (multi-objective experiments)."""
    return round(config["x"] * config["y"] + iteration / MAX_ITER, 6)


def loss(config, iteration):
    """A curve that falls, then rises again (over-fitting), at its least at an iteration that depends on ``x``: a
    trial's best value is not its last."""
    return round((iteration - 1 - 8 * config["x"]) ** 2 / 10 + config["y"], 6)


def merge(target, patch):
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def draw(pod: str, key: str) -> float:
    """A value in [0, 1) that differs from pod to pod, as a random ``sample_from`` function's would."""
    return int(hashlib.sha256(f"{pod}/{key}".encode()).hexdigest()[:6], 16) / 0x1000000


def pod_explore(config: dict, explore: dict, pod: str) -> dict:
    """What a trial pod's PBT explore step does with the user functions of ``tests`` below (a function of the
    pod's name, as a user function's value would differ from pod to pod): each resampled key, then
    ``custom_explore_fn``, which keeps ``x`` within [0, 1]."""
    config = copy.deepcopy(config)
    for step in explore["resample"]:
        assert step["function"] == "s3://b/p/ns/exp/sdk/functions/x.pkl"
        config[step["path"][-1]] = draw(pod, "")
    if explore["customExploreFn"]:
        config["x"] = min(max(config["x"], 0.0), 1.0)
    return config


class Killed(Exception):
    """The operator process died here."""


class World:
    """The API server, the trial pods and one operator (controller + registry) at a time.

    Args:
        spec: the Experiment's spec overrides.
        kill_at: step numbers (trial iterations run so far) after which the operator dies, at the next
            instant ``n % 4`` of the kill for step ``n``: 0 after taking a batch but before
            committing it, 1 after committing but before answering, 2 after planning but before
            committing, 3 after committing a plan but before carrying it out.
        fail_at: the iteration after which each trial's first attempt fails (its pod exits 1), or None.
    """

    def __init__(self, spec: dict, kill_at=(), fail_at: int | None = None):
        self.exp = experiment(**spec)
        self.workers = ((spec.get("resourcesPerTrial") or {}).get("workers") or {}).get("replicas", 0)
        self.trials: dict[str, dict] = {}
        self.pods: dict[str, PodView] = {}
        self.runs: dict[str, int] = {}  # running pod -> iterations done
        self.checkpoint: dict[str, int] = {}  # trial -> iteration of its latest checkpoint
        self.lineage: dict[str, str | None] = {}  # trial -> the restoreFrom its latest checkpoint descends from
        self.pod_env: dict[str, dict] = {}  # pod -> its KUBETUNE_ variables and its config file ("config")
        self.pod_configs: dict[str, dict] = {}  # pod -> the config its PBT explore step chose
        self.drawn: dict[str, dict] = {}  # pod -> its config with the values it drew for sample_from functions
        self.ran: dict[str, set[float]] = {}  # trial -> the sample_from values (z) its pods ran with
        self.named: dict[str, str] = {}  # pod -> the display name its trial_name_creator gave
        self.fail_at = fail_at
        self.store = ConfigMaps()
        self.kill_at, self.step, self.kills = sorted(kill_at), 0, 0
        self.decisions: dict[tuple[str, int], str] = {}  # (trial, iteration) -> decision the pod acted on
        self.now = 1_800_000_000.0
        self.boot()

    def boot(self):
        self.ctl = ExperimentController(self.exp, Settings(), KEY)
        self.registry = Registry(Settings(), KEY, self.store.write)
        for trial in copy.deepcopy(list(self.trials.values())):
            self.ctl.observe_trial(trial)
        self.ctl.restore(self.store.list())

    def maybe_kill(self, instant: int):
        if self.kill_at and self.kill_at[0] <= self.step and self.kill_at[0] % 4 == instant:
            self.kill_at.pop(0)
            raise Killed

    def commit(self):
        asyncio.run(self.registry.commit(self.ctl))

    def send(self, pod: PodView, result: dict, explored: dict | None = None, display_name: str | None = None) -> str:
        """The runtime's POST, retried until it gets an answer (from whichever operator is up)."""
        while True:
            try:
                decision = self.ctl.record_results(
                    pod.trial, pod.attempt, [result], None, explored=explored, display_name=display_name
                )
                self.maybe_kill(0)
                self.commit()
                self.maybe_kill(1)
                return decision
            except Killed:
                self.kills += 1
                self.boot()

    def reconcile(self):
        """One pass of the daemon; a killed operator is replaced at once (before any pod moves on, so
        the searcher and scheduler see events in the same order as without the kill)."""
        while True:
            try:
                job = self.ctl.exploration()  # PB2: the explore step the daemon runs in a worker, done at once
                if job is not None:
                    self.ctl.explored(job["trial"], select(job))
                plan = self.ctl.plan(dict(self.pods), self.now)
                self.maybe_kill(2)
                self.commit()
                self.maybe_kill(3)
                break
            except Killed:
                self.kills += 1
                self.boot()
        for manifest in plan.create_trials:
            name = manifest["metadata"]["name"]
            manifest["metadata"].update(uid=f"uid-{name}", ownerReferences=[{"uid": self.exp["metadata"]["uid"]}])
            self.trials.setdefault(name, manifest)
            self.ctl.trial_created(name, self.trials[name]["metadata"]["uid"])
        for manifest in plan.create_pods:
            name = manifest["metadata"]["name"]
            labels = manifest["metadata"]["labels"]
            if name not in self.pods:
                trial = labels["kubetune.io/trial"]
                members = [manifest, *(plan.gangs[name].workers if self.workers else [])]
                for rank, member in enumerate(members):  # a gang's workers run beside its head
                    self.pods[member["metadata"]["name"]] = PodView(
                        member["metadata"]["name"],
                        trial,
                        int(labels["kubetune.io/attempt"]),
                        "Running",
                        owner_uid=f"uid-{trial}",
                        **({"rank": rank, "world_size": len(members)} if self.workers else {}),
                    )
                env = {e["name"]: e.get("value") for e in manifest["spec"]["containers"][0]["env"]}
                env["config"] = plan.token_secrets[name]["stringData"]["config.json"]  # the pod's config file
                self.pod_env[name] = env
                restore_from = env.get("KUBETUNE_RESTORE_FROM")  # a PBT exploit: the donor's checkpoint
                own = self.checkpoint.get(trial, 0) if self.lineage.get(trial) == restore_from else 0
                self.runs[name] = own or (int(restore_from.rsplit("_", 1)[1]) if restore_from else 0)
        for name, patch in plan.trial_status.items():
            merge(self.trials[name].setdefault("status", {}), patch)
            self.ctl.status_written(name)
        for name, _ in plan.delete_pods:  # only a gang's workers, once its head ended
            assert self.workers and self.pods[name].rank, name
            del self.pods[name]

    def train(self, pod: PodView):
        """One step of a running trial pod: report, obey, end as the runtime does."""
        env = self.pod_env[pod.name]
        config, lineage = json.loads(env["config"]), env.get("KUBETUNE_RESTORE_FROM")
        explore = json.loads(env["KUBETUNE_PBT_EXPLORE"]) if env.get("KUBETUNE_PBT_EXPLORE") else None
        computed = explore or holds_function(config)
        if holds_function(config):  # the runtime draws sample_from values (here, z) once per pod
            config = self.drawn.setdefault(pod.name, {**config, "z": draw(pod.name, "z")})
        if explore:  # the pod calls the PBT exploit's user functions once, and reports the config with its results
            config = self.pod_configs.setdefault(pod.name, pod_explore(config, explore, pod.name))
        self.ran.setdefault(pod.trial, set()).add(config.get("z"))
        display_name = None
        if env.get("KUBETUNE_TRIAL_NAME_CREATOR") and pod.name not in self.named:  # called once, sent until answered
            display_name = self.named[pod.name] = f"run {pod.name}"
        iteration = self.runs[pod.name] + 1
        result = {"training_iteration": iteration, "score": score(config, iteration), "cost": cost(config, iteration)}
        if self.exp["spec"]["metric"] == "loss" if "metric" in self.exp["spec"] else False:
            result["loss"] = loss(config, iteration)
        decision = self.send(pod, result, explored=config if computed else None, display_name=display_name)
        previous = self.decisions.setdefault((pod.trial, lineage, iteration), decision)
        assert previous == decision, (pod.trial, iteration, previous, decision)
        self.runs[pod.name] = self.checkpoint[pod.trial] = iteration
        self.lineage[pod.trial] = lineage
        outcome = (
            OUTCOME_COMPLETED
            if iteration >= MAX_ITER
            else {"stop": OUTCOME_STOPPED, "pause": OUTCOME_PAUSED}.get(decision)
        )
        if not outcome and iteration == self.fail_at and pod.attempt == 0:
            pod.phase, pod.exit_code, pod.message = "Failed", 1, "RuntimeError: the trainable failed"
            del self.runs[pod.name]
        elif outcome:
            pod.phase, pod.message = (
                "Succeeded",
                json.dumps(
                    {
                        "outcome": outcome,
                        "iteration": iteration,
                        "result": result,
                    }
                ),
            )
            del self.runs[pod.name]

    def run(self, rounds: int = 400) -> dict:
        for _ in range(rounds):
            self.reconcile()
            if self.ctl.finished:
                break
            for pod in sorted(self.pods.values(), key=lambda p: p.name):
                if pod.name in self.runs:
                    self.step += 1
                    self.train(pod)
            self.now += 1.0
        assert self.ctl.finished, "the experiment did not finish"
        return {
            name: {
                "config": t["status"].get("config", t["spec"]["config"]),
                "phase": t["status"]["phase"],
                "reason": t["status"].get("reason"),
                "iteration": t["status"].get("iteration"),
                "attempt": t["status"].get("attempt"),
                "displayName": t["status"].get("displayName"),
            }
            for name, t in sorted(self.trials.items())
        }


SCHEDULERS = {
    "fifo": {"name": "fifo"},
    "asha": {"name": "asha", "params": {"grace_period": 1, "reduction_factor": 2, "max_t": MAX_ITER}},
    "hyperband": {"name": "hyperband", "params": {"max_t": MAX_ITER, "reduction_factor": 3}},
    "median": {
        "name": "median_stopping_rule",
        "params": {"time_attr": "training_iteration", "grace_period": 2, "min_samples_required": 2},
    },
    "katib_medianstop": {"name": "katib-medianstop", "params": {"min_trials_required": 2, "start_step": 3}},
    "pbt": {
        "name": "pbt",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "hyperparam_mutations": {"x": {"uniform": [0, 1]}, "y": [1, 2, 3]},
        },
    },
    "pbt_functions": {
        "name": "pbt",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "resample_probability": 0.5,
            "hyperparam_mutations": {"x": {"kubetune/pickled_function": "s3://b/p/ns/exp/sdk/functions/x.pkl"}},
            "custom_explore_fn": {"kubetune/pickled_function": "s3://b/p/ns/exp/sdk/functions/c.pkl"},
        },
    },
    "pbt_synch": {
        "name": "pbt",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "hyperparam_mutations": {"x": {"uniform": [0, 1]}, "y": [1, 2, 3]},
            "synch": True,
        },
    },
    "pbt_replay": {"name": "pbt_replay", "params": {"policy": [[2, {"x": 0.25, "y": 2}], [4, {"x": 0.75, "y": 3}]]}},
    "pb2": {
        "name": "pb2",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "hyperparam_bounds": {"x": [0, 1], "y": [1, 3]},
        },
    },
}
SEARCHERS = {
    "basic": {"name": "basic", "seed": 7},
    "optuna": {"name": "optuna", "seed": 7, "params": {"sampler_args": {"n_startup_trials": 4}}},
}


@pytest.mark.parametrize("searcher", sorted(SEARCHERS))
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_killed_at_any_instant_the_operator_decides_as_an_uninterrupted_run(scheduler, searcher):
    spec = {"scheduler": SCHEDULERS[scheduler], "searchAlgorithm": SEARCHERS[searcher]}
    calm = World(spec)
    expected = calm.run()
    stormy = World(spec, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.decisions == calm.decisions
    assert stormy.kills >= max(stormy.step // 4, 5)  # about one kill every 3 trial iterations
    assert len(expected) == 12
    if scheduler != "fifo":
        assert {"stop", "pause"} & set(calm.decisions.values()), "the scheduler never decided anything"


def killed_and_restored_from_snapshots(spec: dict, world: type = None) -> tuple[World, World, dict]:
    """``(calm, stormy, outcome)``: ``spec`` run uninterrupted and killed at every kind of instant (with snapshots,
    when the caller makes them small), the same outcome; at least 5 kills, and a snapshot among the stored state.
    ``world``: the simulation (default :class:`World`)."""
    world = world or World
    calm = world(spec)
    expected = calm.run()
    stormy = world(spec, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.kills >= 5 and any(
        cm["metadata"]["labels"][journal.LABEL_STATE] == "snapshot" for cm in stormy.store.items.values()
    )
    return calm, stormy, expected


OPTUNA_SAMPLERS = {
    "cmaes": {"n_startup_trials": 3, "popsize": 4},
    "qmc": {"qmc_type": "sobol", "scramble": True},
    "nsga2": {"population_size": 4},
    "tpe": {"multivariate": True, "group": True, "n_startup_trials": 4},
}


@pytest.mark.parametrize("sampler", sorted(OPTUNA_SAMPLERS))
def test_each_optuna_sampler_decides_as_an_uninterrupted_run_when_killed_and_restored_from_snapshots(
    monkeypatch, sampler
):
    """Kills at every kind of instant, and a snapshot after almost every commit, so that restarts load the
    searcher's state (``set_state``) as well as replaying entries."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)
    spec = {
        "searchAlgorithm": {
            "name": "optuna",
            "seed": 7,
            "params": {"sampler": sampler, "sampler_args": OPTUNA_SAMPLERS[sampler]},
        }
    }
    calm, stormy, expected = killed_and_restored_from_snapshots(spec)
    assert len({json.dumps(t["config"], sort_keys=True) for t in expected.values()}) >= 10


def test_a_multi_objective_experiment_reports_its_pareto_front_across_restarts(monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)
    spec = {
        "objectives": [{"metric": "score", "mode": "max"}, {"metric": "cost", "mode": "min"}],
        "searchAlgorithm": {
            "name": "optuna",
            "seed": 3,
            "params": {"sampler": "nsga2", "sampler_args": {"population_size": 4}},
        },
    }
    calm = World(spec)
    expected = calm.run()
    stormy = World(spec, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    status = stormy.ctl.exp_status
    assert status["phase"] == "Succeeded" and "bestTrial" not in status
    front = status["paretoFront"]
    assert front == calm.ctl.exp_status["paretoFront"]
    finals = {
        name: [t["status"]["lastResult"]["score"], t["status"]["lastResult"]["cost"]]
        for name, t in stormy.trials.items()
    }
    on_front = {p["trial"] for p in front["trials"]}
    assert front["count"] == len(on_front) >= 1 and all(p["values"] == finals[p["trial"]] for p in front["trials"])
    for name, (s, c) in finals.items():  # no trial dominates one on the front; every other is dominated
        dominated = any(s2 >= s and c2 <= c and (s2, c2) != (s, c) for s2, c2 in finals.values())
        assert dominated == (name not in on_front), name
    assert all("metricValue" not in t["status"] for t in stormy.trials.values())


def test_a_snapshot_replaces_the_entries_it_covers(monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 2000)
    spec = {"scheduler": SCHEDULERS["median"], "searchAlgorithm": SEARCHERS["optuna"], "numSamples": 20}
    expected = World(spec).run()
    world = World(spec, kill_at=range(7, 10_000, 9))
    assert world.run() == expected
    decisions = world.ctl.decisions  # an ended trial's decision is kept only until a status write shows its end
    assert not set(decisions.applied) & decisions.ended, sorted(set(decisions.applied) & decisions.ended)
    kinds = [cm["metadata"]["labels"][journal.LABEL_STATE] for cm in world.store.items.values()]
    assert kinds.count("snapshot") == 1, kinds  # older snapshots and covered segments were deleted
    assert world.store.size() < 40_000
    state = json.loads(
        next(cm for cm in world.store.items.values() if cm["metadata"]["labels"][journal.LABEL_STATE] == "snapshot")[
            "data"
        ]["state"]
    )
    assert len(state["searcher"]["trials"]) >= 10 and state["scheduler"]["results"]


def test_a_failed_commit_sends_no_decision_and_loses_nothing():
    world = World({"scheduler": SCHEDULERS["asha"], "searchAlgorithm": SEARCHERS["optuna"]})
    world.store.fail = 1
    plan = world.ctl.plan({}, world.now)
    with pytest.raises(RuntimeError, match="injected"):
        world.commit()
    world.ctl.plan_not_carried_out(plan)
    assert world.ctl.trials == {} and world.ctl.book.missing == {0, 1, 2}
    world.reconcile()
    assert sorted(world.trials) == ["exp-00000", "exp-00001", "exp-00002"]
    configs = [t["spec"]["config"] for t in world.trials.values()]
    fresh = World({"scheduler": SCHEDULERS["asha"], "searchAlgorithm": SEARCHERS["optuna"]})
    fresh.reconcile()
    fresh.reconcile()
    assert configs == [t["spec"]["config"] for t in fresh.trials.values()]  # the same suggestions, none lost


def test_a_re_sent_batch_reaches_the_scheduler_once_and_gets_the_same_answer():
    world = World({"scheduler": SCHEDULERS["median"]})
    world.reconcile()
    world.reconcile()
    pod = world.pods["exp-00000-0"]
    result = {"training_iteration": 1, "score": 0.5}
    assert world.ctl.record_results(pod.trial, 0, [result], None) == "continue"
    state = json.dumps(world.ctl.decisions.scheduler.get_state())
    assert world.ctl.record_results(pod.trial, 0, [result], None) == "continue"
    assert json.dumps(world.ctl.decisions.scheduler.get_state()) == state
    assert [e[0] for e in world.ctl.journal.pending] == ["results"]


def test_a_missing_journal_entry_is_reported_not_guessed():
    world = World({"scheduler": SCHEDULERS["asha"]})
    for _ in range(4):
        world.reconcile()
        for pod in list(world.pods.values()):
            if pod.name in world.runs:
                world.train(pod)
    segment = next(cm for cm in world.store.items.values())
    first = sorted(segment["data"])[1]
    del segment["data"][first]
    with pytest.raises(journal.JournalCorrupt, match=f"entry {int(first)} is missing"):
        world.boot()


def test_the_journal_of_an_earlier_experiment_of_the_same_name_is_ignored():
    world = World({"scheduler": SCHEDULERS["asha"]})
    world.reconcile()
    world.reconcile()
    assert world.store.items
    world.exp["metadata"]["uid"] = "another-uid"
    world.trials.clear()
    world.boot()
    assert world.ctl.journal.next_seq == 0 and world.ctl.decisions.applied == {} and not world.ctl.trials


def test_nan_and_infinite_metrics_reach_the_scheduler_and_the_journal_but_never_a_status():
    world = World({"scheduler": SCHEDULERS["asha"]})
    world.reconcile()
    world.reconcile()
    decisions = [
        world.ctl.record_results(f"exp-0000{i}", 0, [{"training_iteration": 1, "score": value}], None)
        for i, value in enumerate([math.nan, math.inf, -math.inf])
    ]
    assert decisions == ["continue", "continue", "stop"]  # NaN is ignored by the cutoff, -inf is below inf
    world.commit()
    rung = world.ctl.decisions.scheduler.rungs[0][-1][1]  # the grace-period rung
    assert math.isnan(rung["exp-00000"]) and rung["exp-00001"] == math.inf
    plan = world.ctl.plan(dict(world.pods), world.now + 10)
    json.dumps([plan.trial_status, plan.experiment_status], allow_nan=False)  # Kubernetes' JSON has no NaN
    world.boot()  # the journal keeps NaN and infinities as they were
    rung = world.ctl.decisions.scheduler.rungs[0][-1][1]
    assert math.isnan(rung["exp-00000"]) and rung["exp-00001"] == math.inf and rung["exp-00002"] == -math.inf


def test_a_snapshot_encoded_in_steps_is_the_same_text_and_lets_the_loop_run(monkeypatch):
    monkeypatch.setattr(journal, "STEP_SECONDS", 0.0)  # a step after every item
    state = {
        "seq": 3,
        "scheduler": {"results": {f"t{i}": [[i, math.nan], [i + 1, math.inf]] for i in range(40)}, "stopped": ["t1"]},
        "applied": {f"t{i}": [i, "continue", 0] for i in range(20)},
        "1": None,
        "empty": {},
    }
    ticks = []

    async def main():
        async def tick():
            while True:
                ticks.append(1)
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        text = await journal._dumps_in_steps(state, [0.0])
        ticker.cancel()
        return text

    assert asyncio.run(main()) == journal._dumps(state)
    # the loop ran between the items, and not one step of another task per step of the encoding (after a
    # bare sleep(0) the encoding would be ready again first, so a request would wait a step per await)
    leaves = 2 + 40 + 20 + 2  # seq, a results list per trial, an applied list per trial, "stopped", "1"
    assert len(ticks) > 5 * leaves


def test_commits_go_on_while_a_snapshot_is_written_and_a_restart_at_any_point_finds_every_entry(monkeypatch):
    """A snapshot is encoded and written outside the commit lock: a commit behind it writes its entries at once
    (into a segment the snapshot does not cover); a restart before the snapshot is complete replays every
    entry, one after it starts from the snapshot and replays only the later entries."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 10)
    store, gate, counted = ConfigMaps(), asyncio.Event(), {"n": 0}

    async def write(w):
        if any(m["metadata"]["labels"][journal.LABEL_STATE] == "snapshot" for m in w.creates):
            await gate.wait()  # the API server is slow to take the snapshot
        await store.write("ns", w)

    def record(j, n):
        for _ in range(n):
            j.record(["entry", counted["n"]])
            counted["n"] += 1

    def restart():
        return journal.load(journal.Journal("ns", "exp", "uid-0123456789"), store.list())

    async def main():
        j = journal.Journal("ns", "exp", "uid-0123456789")
        record(j, 5)
        first = asyncio.create_task(journal.commit(j, write, lambda: {"n": counted["n"]}))
        while not j.snapshotting:
            await asyncio.sleep(0)
        record(j, 3)
        await asyncio.wait_for(journal.commit(j, write, lambda: {"n": counted["n"]}), timeout=5)
        assert j.durable_seq == 8 and j.snapshotting and not first.done()
        assert restart() == (None, [["entry", i] for i in range(8)])  # killed now: nothing lost
        gate.set()
        await asyncio.wait_for(first, timeout=5)
        assert restart() == ({"seq": 5, "n": 5}, [["entry", i] for i in range(5, 8)])
        segments = [cm for cm in store.items.values() if cm["metadata"]["labels"][journal.LABEL_STATE] == "journal"]
        assert [sorted(cm["data"]) for cm in segments] == [["000000000005"]]  # the covered one is deleted

    asyncio.run(main())


def test_stoppers_continue_where_they_were_after_restarts():
    spec = {
        "stoppers": [
            {"name": "trial_plateau", "params": {"std": 0.05, "num_results": 3, "grace_period": 3}},
            {"name": "experiment_plateau", "params": {"top": 3, "std": 0.2, "patience": 2}},
        ]
    }
    calm = World(spec)
    expected = calm.run()
    stormy = World(spec, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.decisions == calm.decisions and stormy.kills >= 5
    reasons = {t["reason"] for t in expected.values()}
    assert "EarlyStopped" in reasons, reasons  # FIFO never stops a trial: the plateau stopper did


@pytest.mark.parametrize("scheduler", ["asha", "pbt", "hyperband"])
def test_gangs_killed_at_any_instant_decide_as_an_uninterrupted_run_of_one_pod_trials(scheduler):
    """Trials of a head and 2 workers: the same decisions as one-pod trials, with or without kills."""
    spec = {"scheduler": SCHEDULERS[scheduler], "searchAlgorithm": SEARCHERS["basic"]}
    expected = World(spec).run()
    gangs = {**spec, "resourcesPerTrial": {"cpu": 1, "workers": {"replicas": 2}}}
    calm = World(gangs)
    assert calm.run() == expected
    assert not [p for p in calm.pods.values() if p.rank and p.phase == "Running"]  # no worker left running
    stormy = World(gangs, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.kills >= 5


@pytest.mark.parametrize("scheduler", ["fifo", "pbt", "pb2"])
def test_sample_from_values_are_drawn_once_per_trial_through_retries_exploits_and_restarts(monkeypatch, scheduler):
    """Ray draws a trial's ``sample_from`` values once: a retried attempt runs with them, and a PBT exploit copies
    the donor's. Here each trial's first attempt fails after its third iteration; the operator is killed at every
    kind of instant and restarts from snapshots as well as from entries."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)
    z = {FUNCTION_KEY: "s3://b/p/ns/exp/sdk/functions/z.pkl"}
    spec = {
        "config": {"x": {"uniform": [0, 1]}, "y": {"choice": [1, 2, 3]}, "z": z},
        "scheduler": SCHEDULERS[scheduler],
        "failure": {"maxFailures": 1},
    }
    calm = World(spec, fail_at=3)
    expected = calm.run()
    first_draws = {pod.split("-")[1]: config["z"] for pod, config in calm.drawn.items()}  # exp-<index>-<attempt>
    assert len(calm.drawn) == len(expected) == 12  # one draw per trial: no retry or exploit drew again
    assert all(t["attempt"] >= 1 for t in expected.values())  # every trial was retried
    assert all(t["config"]["z"] in first_draws.values() for t in expected.values())
    for trial, values in calm.ran.items():
        assert len(values) == 1 or scheduler != "fifo", (trial, values)  # only an exploit changes z: the donor's
    if scheduler != "fifo":
        assert any(len(values) > 1 for values in calm.ran.values()), "no trial was exploited"
    else:  # FIFO and the basic searcher keep no state: the journal holds only the values drawn
        snapshot, entries = journal.load(calm.ctl.journal, calm.store.list())
        assert entries and {entry[0] for entry in entries} == {"sampled"}, entries
    stormy = World(spec, kill_at=range(2, 10_000, 3), fail_at=3)
    assert stormy.run() == expected
    assert stormy.decisions == calm.decisions and stormy.drawn == calm.drawn
    assert stormy.kills >= 5 and any(
        cm["metadata"]["labels"][journal.LABEL_STATE] == "snapshot" for cm in stormy.store.items.values()
    )


@pytest.mark.parametrize("scheduler", ["fifo", "pbt"])
def test_a_trial_keeps_the_display_name_its_first_pod_gave_through_retries_exploits_and_restarts(
    monkeypatch, scheduler
):
    """Ray names a trial once (``trial_name_creator``): the first pod of each Trial calls the creator and reports the
    name with its first batch; the operator journals it, writes it as ``status.displayName`` and gives it to the
    later attempts (retries, PBT exploits), which call nothing. The operator is killed at every kind of instant and
    restarts from snapshots as well as from entries."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 50)  # names are short: a snapshot after a few
    spec = {
        "scheduler": SCHEDULERS[scheduler],
        "failure": {"maxFailures": 1},
        "trialNameCreator": {"pickleURI": "s3://b/p/ns/exp/sdk/functions/name.pkl"},
    }
    calm = World(spec, fail_at=3)
    expected = calm.run()
    assert {name: t["displayName"] for name, t in expected.items()} == {name: f"run {name}-0" for name in expected}
    assert sorted(calm.named) == [f"{name}-0" for name in expected]  # only each Trial's first pod called it
    for pod, env in calm.pod_env.items():
        trial, attempt = pod.rsplit("-", 1)
        assert ("KUBETUNE_TRIAL_NAME_CREATOR" in env) == (attempt == "0"), pod
        assert env.get("KUBETUNE_DISPLAY_NAME") == (None if attempt == "0" else f"run {trial}-0"), pod
        tag = env.get("KUBETUNE_TRIAL_TAG")  # Ray's experiment_tag, for the creator only
        assert tag.startswith(f"{int(trial.rsplit('-', 1)[1])}_x=") if attempt == "0" else tag is None, (pod, tag)
    if scheduler == "fifo":  # FIFO and the basic searcher keep no state: the journal holds only the names
        _, entries = journal.load(calm.ctl.journal, calm.store.list())
        assert entries and {entry[0] for entry in entries} == {"named"}, entries
    stormy = World(spec, kill_at=range(2, 10_000, 3), fail_at=3)
    assert stormy.run() == expected
    assert stormy.named == calm.named and stormy.kills >= 5
    assert any(cm["metadata"]["labels"][journal.LABEL_STATE] == "snapshot" for cm in stormy.store.items.values())


def test_katib_hyperband_waits_for_each_rung_and_decides_as_an_uninterrupted_run_when_killed(monkeypatch):
    """Katib's hyperband (searcher katib-hyperband) through kills at every kind of instant and snapshots after almost
    every commit: no config drawn twice, each rung's copies chosen from the same results, the same trials in the
    end (tests/unit/test_katib_hyperband.py has the rules of each rung)."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)
    params = {"resource_name": "epochs", "r_l": 9, "eta": 3}  # brackets 9-3-1, 5-2 and 3 trials: 23
    spec = {
        "config": {"x": {"uniform": [0, 1]}, "y": {"choice": [1, 2, 3]}, "epochs": 1},
        "numSamples": 100,
        "searchAlgorithm": {"name": "katib-hyperband", "seed": 7, "params": params},
    }
    calm = World(spec)
    recorded = []
    record = calm.ctl.decisions.journal.record
    calm.ctl.decisions.journal.record = lambda entry: (recorded.append(entry[0]), record(entry))
    expected = calm.run()
    # a "not now" while a rung runs is not journaled: one suggest entry per trial, and the one that said FINISHED
    assert recorded.count("suggest") == len(expected) + 1
    stormy = World(spec, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.kills >= 5 and any(
        cm["metadata"]["labels"][journal.LABEL_STATE] == "snapshot" for cm in stormy.store.items.values()
    )
    trials = [t for _, t in sorted((int(name.rsplit("-", 1)[1]), t) for name, t in expected.items())]
    assert [t["config"]["epochs"] for t in trials] == [1] * 9 + [3] * 3 + [9] + [3] * 5 + [9] * 2 + [9] * 3
    assert all(t["phase"] == "Succeeded" for t in trials)
    new = [trials[i]["config"] for i in (*range(9), *range(13, 18), *range(20, 23))]
    assert len({(c["x"], c["y"]) for c in new}) == len(new)  # every new config drawn once
    # a copy is a config of the rung before (the best by score), with the next budget
    assert {(c["x"], c["y"]) for c in (t["config"] for t in trials[9:12])} <= {(c["x"], c["y"]) for c in new[:9]}
    assert (trials[12]["config"]["x"], trials[12]["config"]["y"]) in {
        (t["config"]["x"], t["config"]["y"]) for t in trials[9:12]
    }


def test_best_trial_scope_all_ranks_each_trials_best_value_and_restarts_rebuild_its_metric_range(monkeypatch):
    """``bestTrialScope: all`` (Katib's default metricStrategies): each Trial's ``status.metricRange`` is the least
    and greatest of every value it reported, rebuilt after kills at every kind of instant from the Trial, the
    journal's entries and its snapshots (with basic and fifo, which keep nothing of their own, the results are
    journaled for it), and ``bestTrial`` is the trial with the least loss at any iteration, not the least last one
    (``loss`` falls, then rises again)."""
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)
    spec = {
        "metric": "loss",
        "mode": "min",
        "bestTrialScope": "all",
        "scheduler": SCHEDULERS["fifo"],
        "searchAlgorithm": SEARCHERS["basic"],
    }
    calm, stormy, expected = killed_and_restored_from_snapshots(spec)
    for name, trial in stormy.trials.items():
        config, last = trial["status"].get("config", trial["spec"]["config"]), trial["status"]["iteration"]
        values = {f.__name__: [f(config, i) for i in range(1, last + 1)] for f in (loss, score, cost)}
        assert trial["status"]["metricRange"] == {k: {"min": min(v), "max": max(v)} for k, v in values.items()}, name
        assert list(trial["status"]["metricRange"])[0] == "loss"  # the metric first; training_iteration left out
        assert trial["status"]["metricRange"] == calm.trials[name]["status"]["metricRange"]
    bests = {name: t["status"]["metricRange"]["loss"]["min"] for name, t in stormy.trials.items()}
    lasts = {name: t["status"]["metricValue"] for name, t in stormy.trials.items()}
    best = stormy.ctl.exp_status["bestTrial"]
    assert best["name"] == min(bests, key=bests.get) and best["metricValue"] == min(bests.values())
    assert best == calm.ctl.exp_status["bestTrial"]
    assert min(lasts, key=lasts.get) != best["name"]  # ranked by the last value, another trial would be best


def test_without_best_trial_scope_all_no_range_is_kept_and_basic_with_fifo_journals_no_result():
    world = World(
        {"metric": "loss", "mode": "min", "scheduler": SCHEDULERS["fifo"], "searchAlgorithm": SEARCHERS["basic"]}
    )
    world.run()
    assert all("metricRange" not in t["status"] for t in world.trials.values())
    assert not world.store.items  # nothing to journal: the searcher and scheduler keep nothing
