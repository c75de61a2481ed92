"""Ray Tune's own scheduler tests, ported: ``python/ray/tune/tests/test_trial_scheduler.py`` of Ray 2.x (the
version of the ``ray.train._internal`` era that Ray 2.60 ships, read at commit 017deaf1a528), assertions unchanged.

Each test names its upstream test (``Suite::test``). Only the setup is kubetune's: Ray's scheduler classes come
from ``kubetune.schedulers`` with Ray's arguments and run as the operator runs them (their ``spec.scheduler`` to
``kubetune_operator.algorithms.create_scheduler``); a trial is its id; :class:`Runner` stands for Ray's
``_MockTrialRunner`` and makes the calls kubetune's operator makes (``kubetune_operator.controller``): a stopped
trial ends as removed (``on_trial_remove``), paused trials are resumed through ``choose_trial_to_run`` and ended
through ``trials_to_stop``, the scheduler is told when the searcher has no more trials (Ray's runner holds all of
them from the start), a PBT exploit restarts the trial from its donor with the explored config, the trial's pod
calling the user functions (``kubetune.runtime.pbt_explore``). Ray's private fields are read through kubetune's
(``_hyperbands`` -> ``_bands``, ``bracket._n`` -> ``bracket.n``, ``_num_perturbations`` -> ``num_perturbations``,
``last_scores`` -> the scores PBT keeps, ``_num_checkpoints`` -> the ``checkpoint`` answers).

Ported: 58 of the file's 77 tests: 50 here (``testPerturbationValues`` without its last assertion, see there)
and 8 that run ``tune.run`` on the local cluster, in
``tests/integration/test_upstream_trial_scheduler_on_the_cluster.py`` (``BOHBSuite::testNonstopBOHB``,
``E2EPopulationBasedTestingSuite::testCheckpointing`` and ``testCheckpointDict``,
``AsyncHyperBandSuite::testAnonymousMetricEndToEnd{FIFO,ASHA,BOHB,Median,PBT}``). Left out:

- ``HyperbandSuite::testAddAfterHalving``: a rung of kubetune's HyperBand waits for the bracket's ``n0`` trials
  (porting table, HyperBand row).
- ``HyperbandSuite::testFilterNoneBracket``: ``choose_trial_to_run`` returns a pending trial in Ray; kubetune's
  chooses among paused trials only (porting table, "choose_trial_to_run").
- ``BOHBSuite::testCheckTrialInfoUpdate``, ``testCheckTrialInfoUpdateMin``: they count the searcher's
  ``on_pause``/``on_unpause`` calls (porting table, BOHB: "pauses the searcher's concurrency").
- ``BOHBSuite::testBOHBProcessing``: asserts Ray's private ``is_being_processed`` flag of a bracket, which has no
  counterpart (a kubetune bracket is judged within the call that completes it).
- ``PopulationBasedTestingSuite::testSearchError``: a custom ``Searcher`` subclass (porting table, SDK: refused).
- ``testMetricError``, ``testMetricLog``: Ray raises or logs in the scheduler; kubetune fails the Experiment
  (porting table, PBT ``require_attrs`` and "logs a warning").
- ``testCheckpointMostPromisingTrialsSynch``: counts Ray's saves of the top trials within the sync, which
  kubetune's synchronous PBT records without an answer per trial (they are paused, which checkpoints them;
  porting table, "_num_checkpoints").
- ``testPerturbsLowPerformingTrials``, ``testPerturbsLowPerformingTrialsSynch``: assert ``@perturbed`` in the
  trial's tag (porting table, "@perturbed").
- ``testYieldsTimeToOtherTrials``, ``testSchedulesMostBehindTrialToRun``: time-multiplexing with pending trials
  (porting table, PBT: "paused when other trials wait for resources").
- ``testLogConfig``, ``testLogConfigSynch``: the policy files are written by the exploited trial's pod (porting
  table, PBT ``pbt_policy_<trial>.txt``).
- ``testFastPerturb``: calls Ray's private ``_exploit``.
- ``testReplay``: replays policy files that Ray's driver wrote during the test's own PBT run; kubetune's pods
  write them (above), so the test would need a PBT run on the cluster first (not ported).
- ``testReplaySynch``, ``testContextExit``: skipped upstream.

The ``*NanInf`` tests assert only that the scheduler takes NaN and infinities; their ports also check that the
state the operator journals stays strict JSON.
"""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from kubetune import schedulers as ray_schedulers
from kubetune.runtime.pbt_explore import explore_in_pod
from kubetune.shipping import FUNCTION_KEY, FunctionPickles
from kubetune.storage import FileStorage
from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.schedulers.base import CHECKPOINT, CONTINUE, PAUSE, STOP
from kubetune_operator.schedulers.pbt import _parse_mutations, explore

PENDING, RUNNING, PAUSED, TERMINATED = "PENDING", "RUNNING", "PAUSED", "TERMINATED"
_ids = itertools.count()


def new_trial() -> str:
    """Ray's ``Trial("PPO")``: a new trial, here its id."""
    return f"trial_{next(_ids):05d}"


def result(t, rew):
    return dict(time_total_s=t, episode_reward_mean=rew, training_iteration=int(t))


def operator_scheduler(sdk_scheduler):
    """The operator's scheduler for a ``kubetune.schedulers`` object (as ``tune.run`` hands it over)."""
    spec = sdk_scheduler.to_spec()
    return create_scheduler(spec["name"], sdk_scheduler.metric, sdk_scheduler.mode, **spec["params"])


def MedianStoppingRule(**kwargs):  # noqa: N802 (Ray's class name)
    return operator_scheduler(ray_schedulers.MedianStoppingRule(**kwargs))


def HyperBandScheduler(**kwargs):  # noqa: N802
    return operator_scheduler(ray_schedulers.HyperBandScheduler(**kwargs))


def HyperBandForBOHB(**kwargs):  # noqa: N802
    return operator_scheduler(ray_schedulers.HyperBandForBOHB(**kwargs))


def AsyncHyperBandScheduler(**kwargs):  # noqa: N802
    return operator_scheduler(ray_schedulers.AsyncHyperBandScheduler(**kwargs))


def strict_json_state(scheduler) -> None:
    """kubetune's check beside Ray's: the state the operator journals is strict JSON."""
    json.dumps(scheduler.get_state(), allow_nan=False)


class Runner:
    """Ray's ``_MockTrialRunner``: trial statuses, and the scheduler calls kubetune's operator makes."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.trials: list[str] = []
        self.status: dict[str, str] = {}

    def add_trial(self, trial):
        self.trials.append(trial)
        self.scheduler.on_trial_add(trial)

    def get_trials(self):
        return self.trials

    def searcher_finished(self):
        """Ray's runner holds all its trials from the start: the operator tells the scheduler none will come."""
        self.scheduler.choose_trial_to_run([], search_finished=True)

    def _launch_trial(self, trial):
        self.status[trial] = RUNNING

    start_trial = _launch_trial

    def pause_trial(self, trial):
        self.status[trial] = PAUSED

    def process_action(self, trial, action):
        if action == PAUSE:
            self.pause_trial(trial)
        elif action == STOP:
            self.stop_trial(trial)

    def stop_trial(self, trial):
        """A trial the scheduler stopped ends as removed (the operator's ``EarlyStopped``)."""
        if self.status.get(trial, PENDING) != TERMINATED:
            self.scheduler.on_trial_remove(trial)
        self.status[trial] = TERMINATED

    def paused(self):
        return [t for t in self.trials if self.status.get(t) == PAUSED]

    def choose_trial_to_run(self):
        return self.scheduler.choose_trial_to_run(self.paused(), search_finished=True)

    def execute_delayed_actions(self):
        """The operator's pass over paused trials: end those given up on, resume those chosen."""
        for trial in self.scheduler.trials_to_stop(self.paused()):
            self.stop_trial(trial)
        while (trial := self.choose_trial_to_run()) is not None:
            self.start_trial(trial)


# ------------------------------------------------------------------------------------------ EarlyStoppingSuite


def basic_setup(scheduler):
    """Ray's basicSetup of EarlyStoppingSuite and AsyncHyperBandSuite (the former adds no trial: a no-op for the
    median rule)."""
    t1 = new_trial()  # mean is 450, max 900, t_max=10
    t2 = new_trial()  # mean is 450, max 450, t_max=5
    scheduler.on_trial_add(t1)
    scheduler.on_trial_add(t2)
    for i in range(10):
        assert scheduler.on_trial_result(t1, result(i, i * 100)) == CONTINUE
    for i in range(5):
        assert scheduler.on_trial_result(t2, result(i, 450)) == CONTINUE
    return t1, t2


def median(**kwargs):
    return MedianStoppingRule(metric="episode_reward_mean", mode="max", **kwargs)


def test_median_stopping_constant_perf():
    """EarlyStoppingSuite::testMedianStoppingConstantPerf."""
    rule = median(grace_period=0, min_samples_required=1)
    t1, t2 = basic_setup(rule)
    rule.on_trial_complete(t1, result(10, 1000))
    assert rule.on_trial_result(t2, result(5, 450)) == CONTINUE
    assert rule.on_trial_result(t2, result(6, 0)) == CONTINUE
    assert rule.on_trial_result(t2, result(10, 450)) == STOP


def test_median_stopping_on_complete_only():
    """EarlyStoppingSuite::testMedianStoppingOnCompleteOnly."""
    rule = median(grace_period=0, min_samples_required=1)
    t1, t2 = basic_setup(rule)
    assert rule.on_trial_result(t2, result(100, 0)) == CONTINUE
    rule.on_trial_complete(t1, result(101, 1000))
    assert rule.on_trial_result(t2, result(101, 0)) == STOP


def test_median_stopping_grace_period():
    """EarlyStoppingSuite::testMedianStoppingGracePeriod."""
    rule = median(grace_period=2.5, min_samples_required=1)
    t1, t2 = basic_setup(rule)
    rule.on_trial_complete(t1, result(10, 1000))
    rule.on_trial_complete(t2, result(10, 1000))
    t3 = new_trial()
    assert rule.on_trial_result(t3, result(1, 10)) == CONTINUE
    assert rule.on_trial_result(t3, result(2, 10)) == CONTINUE
    assert rule.on_trial_result(t3, result(3, 10)) == STOP


def test_median_stopping_min_samples():
    """EarlyStoppingSuite::testMedianStoppingMinSamples."""
    rule = median(grace_period=0, min_samples_required=2)
    t1, t2 = basic_setup(rule)
    rule.on_trial_complete(t1, result(10, 1000))
    t3 = new_trial()
    # Insufficient samples to evaluate t3
    assert rule.on_trial_result(t3, result(5, 10)) == CONTINUE
    rule.on_trial_complete(t2, result(5, 1000))
    # Sufficient samples to evaluate t3
    assert rule.on_trial_result(t3, result(5, 10)) == STOP


def test_median_stopping_uses_median():
    """EarlyStoppingSuite::testMedianStoppingUsesMedian."""
    rule = median(grace_period=0, min_samples_required=1)
    t1, t2 = basic_setup(rule)
    rule.on_trial_complete(t1, result(10, 1000))
    rule.on_trial_complete(t2, result(10, 1000))
    t3 = new_trial()
    assert rule.on_trial_result(t3, result(1, 260)) == CONTINUE
    assert rule.on_trial_result(t3, result(2, 260)) == STOP


def test_median_stopping_soft_stop():
    """EarlyStoppingSuite::testMedianStoppingSoftStop."""
    rule = median(grace_period=0, min_samples_required=1, hard_stop=False)
    t1, t2 = basic_setup(rule)
    rule.on_trial_complete(t1, result(10, 1000))
    rule.on_trial_complete(t2, result(10, 1000))
    t3 = new_trial()
    assert rule.on_trial_result(t3, result(1, 260)) == CONTINUE
    assert rule.on_trial_result(t3, result(2, 260)) == PAUSE


def check_alternate_metrics(scheduler, result_func):
    """Ray's _test_metrics of EarlyStoppingSuite and AsyncHyperBandSuite, given the scheduler each builds."""
    t1 = new_trial()  # mean is 450, max 900, t_max=10
    t2 = new_trial()  # mean is 450, max 450, t_max=5
    scheduler.on_trial_add(t1)
    scheduler.on_trial_add(t2)
    for i in range(10):
        assert scheduler.on_trial_result(t1, result_func(i, i * 100)) == CONTINUE
    for i in range(5):
        assert scheduler.on_trial_result(t2, result_func(i, 450)) == CONTINUE
    scheduler.on_trial_complete(t1, result_func(10, 1000))
    assert scheduler.on_trial_result(t2, result_func(5, 450)) == CONTINUE
    assert scheduler.on_trial_result(t2, result_func(6, 0)) == CONTINUE


def median_test_metrics(result_func, metric, mode):
    rule = MedianStoppingRule(
        grace_period=0, min_samples_required=1, time_attr="training_iteration", metric=metric, mode=mode
    )
    check_alternate_metrics(rule, result_func)


def test_median_alternate_metrics():
    """EarlyStoppingSuite::testAlternateMetrics."""
    median_test_metrics(lambda t, rew: dict(training_iteration=t, neg_mean_loss=rew), "neg_mean_loss", "max")


def test_median_alternate_metrics_min():
    """EarlyStoppingSuite::testAlternateMetricsMin."""
    median_test_metrics(lambda t, rew: dict(training_iteration=t, mean_loss=-rew), "mean_loss", "min")


# --------------------------------------------------------------------------------------------- HyperbandSuite


def scheduler_setup(num_trials, max_t=81, **kwargs):
    """Ray's schedulerSetup: a scheduler and a runner holding ``num_trials`` trials (brackets as in Ray 2.x:
    (5, 81); (8, 27) -> (3, 81); (15, 9) -> (5, 27) -> (2, 81); (34, 3) -> (12, 9) -> (4, 27) -> (2, 81);
    (81, 1) -> (27, 3) -> (9, 9) -> (3, 27) -> (1, 81))."""
    sched = HyperBandScheduler(metric="episode_reward_mean", mode="max", max_t=max_t, **kwargs)
    runner = Runner(sched)
    for i in range(num_trials):
        runner.add_trial(f"ft_{i:04d}")
    runner.searcher_finished()
    return sched, runner


def default_statistics():
    """Default statistics for HyperBand: ``n`` and ``r`` of each bracket ``s`` of a band."""
    sched = HyperBandScheduler(metric="episode_reward_mean", mode="max")
    while len(sched._bands) < 2:
        sched.on_trial_add(new_trial())
    res = {str(s): {"n": b.n0, "r": b.r0} for s, b in enumerate(sched._bands[0])}
    res["max_trials"] = sum(v["n"] for v in res.values())
    res["brack_count"] = sched._s_max_1
    res["s_max"] = sched._s_max_1 - 1
    return res


def downscale(n, sched):
    return int(np.ceil(n / sched.eta))


def current_bracket(sched):
    """Ray's ``sched._state["bracket"]``."""
    return sched._bracket(sched._current)


def current_trials(bracket):
    return list(bracket.live)


def cur_band_filled(sched):
    """Ray's ``_cur_band_filled``: the current band has all its brackets."""
    return bool(sched._bands) and len(sched._bands[-1]) == sched._s_max_1


def test_config_same_eta():
    """HyperbandSuite::testConfigSameEta."""
    sched = HyperBandScheduler(metric="episode_reward_mean", mode="max")
    i = 0
    while not cur_band_filled(sched):
        sched.on_trial_add(new_trial())
        i += 1
    assert len(sched._bands[0]) == 5
    assert sched._bands[0][0].n == 5
    assert sched._bands[0][0].r == 81
    assert sched._bands[0][-1].n == 81
    assert sched._bands[0][-1].r == 1

    reduction_factor = 10
    sched = HyperBandScheduler(metric="episode_reward_mean", mode="max", max_t=1000, reduction_factor=reduction_factor)
    i = 0
    while not cur_band_filled(sched):
        sched.on_trial_add(new_trial())
        i += 1
    assert len(sched._bands[0]) == 4
    assert sched._bands[0][0].n == 4
    assert sched._bands[0][0].r == 1000
    assert sched._bands[0][-1].n == 1000
    assert sched._bands[0][-1].r == 1


def test_config_same_eta_small():
    """HyperbandSuite::testConfigSameEtaSmall."""
    sched = HyperBandScheduler(metric="episode_reward_mean", mode="max", max_t=1)
    i = 0
    while len(sched._bands) < 2:
        sched.on_trial_add(new_trial())
        i += 1
    assert len(sched._bands[0]) == 1


def test_successive_halving():
    """HyperbandSuite::testSuccessiveHalving: a full band, then the last bracket (n=81) rung by rung."""
    stats = default_statistics()
    sched, mock_runner = scheduler_setup(stats["max_trials"])
    big_bracket = current_bracket(sched)
    cur_units = stats[str(stats["s_max"])]["r"]
    # The last bracket will downscale 4 times
    for _ in range(stats["brack_count"] - 1):
        trials = current_trials(big_bracket)
        current_length = len(trials)
        for trl in trials:
            mock_runner._launch_trial(trl)

        # Provides results from 0 to 8 in order, keeping last one running
        for i, trl in enumerate(trials):
            action = sched.on_trial_result(trl, result(cur_units, i))
            if i < current_length - 1:
                assert action == PAUSE
            mock_runner.process_action(trl, action)

        assert action == CONTINUE
        new_length = len(current_trials(big_bracket))
        assert new_length == downscale(current_length, sched)
        cur_units = int(cur_units * sched.eta)
    assert len(current_trials(big_bracket)) == 1


def test_halving_stop():
    """HyperbandSuite::testHalvingStop."""
    stats = default_statistics()
    num_trials = stats[str(0)]["n"] + stats[str(1)]["n"]
    sched, mock_runner = scheduler_setup(num_trials)
    big_bracket = current_bracket(sched)
    for trl in current_trials(big_bracket):
        mock_runner._launch_trial(trl)

    # # Provides result in reverse order, killing the last one
    cur_units = stats[str(1)]["r"]
    for i, trl in reversed(list(enumerate(current_trials(big_bracket)))):
        action = sched.on_trial_result(trl, result(cur_units, i))
        mock_runner.process_action(trl, action)

    assert action == STOP


def test_stops_last_one():
    """HyperbandSuite::testStopsLastOne."""
    stats = default_statistics()
    num_trials = stats[str(0)]["n"]  # setup one bracket
    sched, mock_runner = scheduler_setup(num_trials)
    big_bracket = current_bracket(sched)
    for trl in current_trials(big_bracket):
        mock_runner._launch_trial(trl)

    # # Provides result in reverse order, killing the last one
    cur_units = stats[str(0)]["r"]
    for i, trl in enumerate(current_trials(big_bracket)):
        action = sched.on_trial_result(trl, result(cur_units, i))
        mock_runner.process_action(trl, action)

    assert action == STOP


#: How a trial ends before its rung: failed (the operator removes it from its scheduler) or completed early.
ENDINGS = {
    "errored": lambda sched, trial, result: sched.on_trial_remove(trial),
    "ended_early": lambda sched, trial, result: sched.on_trial_complete(trial, result),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_trial_errored_or_ended_early(ending):
    """HyperbandSuite::testTrialErrored and ::testTrialEndedEarly: successive halving still happens after a trial
    failed or ended early."""
    stats = default_statistics()
    trial_count = stats[str(0)]["n"] + 3
    sched, mock_runner = scheduler_setup(trial_count)
    t1, t2, t3 = current_trials(current_bracket(sched))
    for t in [t1, t2, t3]:
        mock_runner._launch_trial(t)

    ENDINGS[ending](sched, t3, result(1, 12))
    assert PAUSE == sched.on_trial_result(t1, result(stats[str(1)]["r"], 10))
    assert CONTINUE == sched.on_trial_result(t2, result(stats[str(1)]["r"], 10))


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_trial_errored_or_ended_early2(ending):
    """HyperbandSuite::testTrialErrored2 and ::testTrialEndedEarly2: successive halving happens even when the
    last trial failed or ended early."""
    stats = default_statistics()
    trial_count = stats[str(0)]["n"] + stats[str(1)]["n"]
    sched, mock_runner = scheduler_setup(trial_count)
    trials = current_trials(current_bracket(sched))
    for t in trials[:-1]:
        mock_runner._launch_trial(t)
        sched.on_trial_result(t, result(stats[str(1)]["r"], 10))

    mock_runner._launch_trial(trials[-1])
    ENDINGS[ending](sched, trials[-1], result(100, 12))
    assert len(current_trials(current_bracket(sched))) == downscale(stats[str(1)]["n"], sched)


def hyperband_test_metrics(result_func, metric, mode):
    sched = HyperBandScheduler(time_attr="time_total_s", metric=metric, mode=mode)
    stats = default_statistics()

    for _ in range(stats["max_trials"]):
        sched.on_trial_add(new_trial())
    runner = Runner(sched)

    big_bracket = sched._bands[0][-1]

    for trl in current_trials(big_bracket):
        runner._launch_trial(trl)
    current_length = len(current_trials(big_bracket))

    # Provides results from 0 to 8 in order, keeping the last one running
    for i, trl in enumerate(current_trials(big_bracket)):
        action = sched.on_trial_result(trl, result_func(1, i))
        runner.process_action(trl, action)

    new_length = len(current_trials(big_bracket))
    assert action == CONTINUE
    assert new_length == downscale(current_length, sched)


def test_hyperband_alternate_metrics():
    """HyperbandSuite::testAlternateMetrics."""
    hyperband_test_metrics(lambda t, rew: dict(time_total_s=t, neg_mean_loss=rew), "neg_mean_loss", "max")


def test_hyperband_alternate_metrics_min():
    """HyperbandSuite::testAlternateMetricsMin."""
    hyperband_test_metrics(lambda t, rew: dict(time_total_s=t, mean_loss=-rew), "mean_loss", "min")


def test_jumping_time():
    """HyperbandSuite::testJumpingTime."""
    sched, mock_runner = scheduler_setup(81)
    big_bracket = sched._bands[0][-1]

    for trl in current_trials(big_bracket):
        mock_runner._launch_trial(trl)

    # Provides results from 0 to 8 in order, keeping the last one running
    main_trials = current_trials(big_bracket)[:-1]
    jump = current_trials(big_bracket)[-1]
    for i, trl in enumerate(main_trials):
        action = sched.on_trial_result(trl, result(1, i))
        mock_runner.process_action(trl, action)

    action = sched.on_trial_result(jump, result(4, i))
    assert action == PAUSE

    current_length = len(current_trials(big_bracket))
    assert current_length < 27


def test_remove():
    """HyperbandSuite::testRemove: with 4, start 1, remove 1 pending, add 2, remove 1 pending."""
    sched, runner = scheduler_setup(4)
    trials = sorted(sched._trial_info)
    runner._launch_trial(trials[0])
    sched.on_trial_result(trials[0], result(1, 5))
    assert runner.status.get(trials[0], PENDING) == RUNNING
    assert runner.status.get(trials[1], PENDING) == PENDING

    bracket = sched._bracket(sched._trial_info[trials[1]])
    assert trials[1] in bracket.live
    sched.on_trial_remove(trials[1])
    assert trials[1] not in bracket.live

    for _ in range(2):
        trial = new_trial()
        sched.on_trial_add(trial)

    bracket = sched._bracket(sched._trial_info[trial])
    assert trial in bracket.live
    sched.on_trial_remove(trial)  # where trial is not running
    assert trial not in bracket.live


def small_max_t(stop_last_trials, overstep):
    """HyperbandSuite's testSmallMaxT*: 8 trials, max_t 8, reduction factor 2; with ``overstep`` the second
    bracket reports timestep 8 at its first rung (4), so it is finished at once."""
    sched, runner = scheduler_setup(num_trials=8, max_t=8, reduction_factor=2, stop_last_trials=stop_last_trials)
    trials = runner.get_trials()

    for trial in trials:
        runner.start_trial(trial)

    def _result(trial, timestep, reward):
        action = sched.on_trial_result(trial, {"training_iteration": timestep, "episode_reward_mean": reward})
        runner.process_action(trial, action)

    status = runner.status
    # Trials of the first bracket (s=0). These don't halve.
    _result(trials[0], timestep=4, reward=10)
    _result(trials[1], timestep=4, reward=20)
    _result(trials[2], timestep=4, reward=30)
    _result(trials[3], timestep=4, reward=40)

    assert status[trials[0]] == RUNNING
    assert status[trials[1]] == RUNNING
    assert status[trials[2]] == RUNNING
    assert status[trials[3]] == RUNNING

    # Trials of the second bracket (s=1). These halve after 4 timesteps.
    second = 8 if overstep else 4
    _result(trials[4], timestep=second, reward=10)
    _result(trials[5], timestep=second, reward=20)
    _result(trials[6], timestep=second, reward=30)
    _result(trials[7], timestep=second, reward=40)

    runner.execute_delayed_actions()

    assert status[trials[4]] == TERMINATED
    assert status[trials[5]] == TERMINATED
    if overstep:
        if stop_last_trials:
            assert status[trials[6]] == TERMINATED
            assert status[trials[7]] == TERMINATED
        else:
            assert status[trials[6]] == RUNNING
            assert status[trials[7]] == RUNNING
        return
    assert status[trials[6]] == RUNNING
    assert status[trials[7]] == RUNNING

    # First bracket. The trials will be terminated if stop_last_trials=True and continue otherwise.
    _result(trials[0], timestep=8, reward=10)
    _result(trials[1], timestep=8, reward=20)
    _result(trials[2], timestep=8, reward=30)
    _result(trials[3], timestep=8, reward=40)

    runner.execute_delayed_actions()

    if stop_last_trials:
        assert status[trials[0]] == TERMINATED
        assert status[trials[1]] == TERMINATED
        assert status[trials[2]] == TERMINATED
        assert status[trials[3]] == TERMINATED
    else:
        assert status[trials[0]] == RUNNING
        assert status[trials[1]] == RUNNING
        assert status[trials[2]] == RUNNING
        assert status[trials[3]] == RUNNING

    # Second bracket
    _result(trials[6], timestep=8, reward=30)
    _result(trials[7], timestep=8, reward=40)

    runner.execute_delayed_actions()

    if stop_last_trials:
        assert status[trials[6]] == TERMINATED
        assert status[trials[7]] == TERMINATED
    else:
        assert status[trials[6]] == RUNNING
        assert status[trials[7]] == RUNNING


def test_small_max_t_stop():
    """HyperbandSuite::testSmallMaxTStop: trials stop at max_t."""
    small_max_t(stop_last_trials=True, overstep=False)


def test_small_max_t_continue():
    """HyperbandSuite::testSmallMaxTContinue: with stop_last_trials=False they go on."""
    small_max_t(stop_last_trials=False, overstep=False)


def test_small_max_t_overstep_stop():
    """HyperbandSuite::testSmallMaxTOverstepStop: trials that report past max_t early stop."""
    small_max_t(stop_last_trials=True, overstep=True)


def test_small_max_t_overstep_continue():
    """HyperbandSuite::testSmallMaxTOverstepContinue."""
    small_max_t(stop_last_trials=False, overstep=True)


# ------------------------------------------------------------------------------------------------- BOHBSuite


def test_largest_bracket_first():
    """BOHBSuite::testLargestBracketFirst (Ray's ``state()["num_brackets"]``: the brackets created)."""
    sched = HyperBandForBOHB(metric="episode_reward_mean", mode="max", max_t=3, reduction_factor=3)
    runner = Runner(sched)
    for _ in range(3):
        t = new_trial()
        sched.on_trial_add(t)
        runner._launch_trial(t)

    assert len(sched.brackets()) == 1
    sched.on_trial_add(new_trial())
    assert len(sched.brackets()) == 2


def test_pause_resume_choose_trial():
    """BOHBSuite::testPauseResumeChooseTrial."""

    def result(score, ts):
        return {"episode_reward_mean": score, "training_iteration": ts}

    sched = HyperBandForBOHB(metric="episode_reward_mean", mode="min", max_t=10, reduction_factor=3)
    runner = Runner(sched)
    trials = [new_trial() for i in range(3)]
    for t in trials:
        runner.add_trial(t)
        runner._launch_trial(t)

    all_results = [result(1, 5), result(2, 1), result(3, 5)]
    for trial, trial_result in zip(trials, all_results):
        decision = sched.on_trial_result(trial, trial_result)
        assert decision == PAUSE
        runner.pause_trial(trial)

    run_trial = runner.choose_trial_to_run()
    assert run_trial == trials[1]
    assert [runner.status[t] for t in trials] == [PAUSED, PAUSED, PAUSED]


# ---------------------------------------------------------------------------------- PopulationBasedTestingSuite


class MockTrial:
    """Ray's ``_MockTrial``: the trial's id, its trainable name (what a restored checkpoint names), config, status."""

    def __init__(self, i, config):
        self.trainable_name = f"trial_{i}"
        self.trial_id = str(i)
        self.config = config
        self.status = PENDING
        self.restored_checkpoint = None


class PBTRunner:
    """Ray's runner under PBT as kubetune's operator drives it: a ``checkpoint`` answer is Ray's save of a top
    trial (counted, then the trial continues); a ``pause`` with an exploit restarts the trial from its donor's
    checkpoint with the explored config, which its pod completes by calling the user functions."""

    def __init__(self, pbt, storage):
        self.pbt, self.storage = pbt, storage
        self.trials: list[MockTrial] = []
        self.num_checkpoints = 0

    def add_trial(self, trial):
        self.trials.append(trial)
        self.pbt.on_trial_add(trial.trial_id)
        self.pbt.set_trial_config(trial.trial_id, trial.config)

    def get_trials(self):
        return self.trials

    def result(self, trial, result):
        decision = self.pbt.on_trial_result(trial.trial_id, result)
        if decision == CHECKPOINT:
            self.num_checkpoints += 1
            decision = CONTINUE
        for trial_id, exploit in self.pbt.take_exploits().items():
            self.exploit(next(t for t in self.trials if t.trial_id == trial_id), exploit)
        return decision

    def exploit(self, trial, exploit):
        config = exploit["config"]
        if "explore" in exploit:  # the trial's pod calls the user functions
            config = explore_in_pod(config, exploit["explore"], self.storage)
            self.pbt.explored(trial.trial_id, {"config": config})
        trial.config = config
        trial.restored_checkpoint = next(t.trainable_name for t in self.trials if t.trial_id == exploit["donor"])
        trial.status = PAUSED

    def process_action(self, trial, action):
        if action == PAUSE:
            trial.status = PAUSED

    def choose_trial_to_run(self):
        paused = [t.trial_id for t in self.trials if t.status in (PAUSED, PENDING)]
        chosen = self.pbt.choose_trial_to_run(paused, search_finished=True)
        return next((t for t in self.trials if t.trial_id == chosen), None)


def sdk_pbt(tmp_path, **kwargs):
    """Ray's ``PopulationBasedTraining(...)`` from ``kubetune.schedulers``, as the operator runs it, its functions
    shipped to storage as ``tune.run`` ships them; returns ``(scheduler, storage)``."""
    sdk = ray_schedulers.PopulationBasedTraining(**kwargs)
    functions = FunctionPickles(f"file://{tmp_path}/sdk")
    spec = sdk.to_spec(on_function=functions.marker)
    storage = FileStorage()
    functions.upload(storage)
    return create_scheduler(spec["name"], sdk.metric, sdk.mode, **spec["params"]), storage


def on_trial_result(pbt, runner, trial, result, expected_decision=None):
    """Ray's helper: the result of a running trial, and the decision (or the trial's status) it expects."""
    trial.status = RUNNING
    decision = runner.result(trial, result)
    if expected_decision is None:
        pass
    elif expected_decision == PAUSE:
        assert trial.status == PAUSED or decision == expected_decision
    elif expected_decision == CONTINUE:
        assert decision == expected_decision
    return decision


def pbt_basic_setup(
    tmp_path,
    num_trials=5,
    resample_prob=0.0,
    explore=None,
    perturbation_interval=10,
    log_config=False,
    require_attrs=True,
    hyperparams=None,
    hyperparam_mutations=None,
    step_once=True,
    synch=False,
):
    hyperparam_mutations = hyperparam_mutations or {
        "float_factor": lambda: 100.0,
        "int_factor": lambda: 10,
        "id_factor": [100],
    }
    pbt, storage = sdk_pbt(
        tmp_path,
        time_attr="training_iteration",
        metric="episode_reward_mean",
        mode="max",
        perturbation_interval=perturbation_interval,
        resample_probability=resample_prob,
        quantile_fraction=0.25,
        hyperparam_mutations=hyperparam_mutations,
        custom_explore_fn=explore,
        log_config=log_config,
        synch=synch,
        require_attrs=require_attrs,
    )
    runner = PBTRunner(pbt, storage)
    for i in range(num_trials):
        trial_hyperparams = hyperparams or {"float_factor": 2.0, "const_factor": 3, "int_factor": 10, "id_factor": i}
        trial = MockTrial(i, trial_hyperparams)
        runner.add_trial(trial)
        trial.status = RUNNING
    pbt.choose_trial_to_run([], search_finished=True)  # Ray's runner holds all its trials
    for i in range(num_trials):
        trial = runner.trials[i]
        if step_once:
            expected = PAUSE if synch else CONTINUE
            on_trial_result(pbt, runner, trial, result(10, 50 * i), expected_decision=expected)
    runner.num_checkpoints = pbt.num_perturbations = 0  # Ray's reset_stats
    return pbt, runner


def last_scores(pbt, trials):
    """Ray's ``pbt.last_scores(trials)`` (mode max: the metric itself)."""
    return [pbt._state[t.trial_id][2] for t in trials]


def test_checkpoints_most_promising_trials(tmp_path):
    """PopulationBasedTestingSuite::testCheckpointsMostPromisingTrials."""
    pbt, runner = pbt_basic_setup(tmp_path)
    trials = runner.get_trials()

    # no checkpoint: haven't hit next perturbation interval yet
    assert last_scores(pbt, trials) == [0, 50, 100, 150, 200]
    on_trial_result(pbt, runner, trials[0], result(15, 200), CONTINUE)
    assert last_scores(pbt, trials) == [0, 50, 100, 150, 200]
    assert runner.num_checkpoints == 0

    # checkpoint: both past interval and upper quantile
    on_trial_result(pbt, runner, trials[0], result(20, 200), CONTINUE)
    assert last_scores(pbt, trials) == [200, 50, 100, 150, 200]
    assert runner.num_checkpoints == 1
    on_trial_result(pbt, runner, trials[1], result(30, 201), CONTINUE)
    assert last_scores(pbt, trials) == [200, 201, 100, 150, 200]
    assert runner.num_checkpoints == 2

    # not upper quantile any more
    on_trial_result(pbt, runner, trials[4], result(30, 199), CONTINUE)
    assert runner.num_checkpoints == 2
    assert pbt.num_perturbations == 0


def test_perturb_without_resample(tmp_path):
    """PopulationBasedTestingSuite::testPerturbWithoutResample."""
    pbt, runner = pbt_basic_setup(tmp_path, resample_prob=0.0)
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(20, -100), PAUSE)
    assert trials[0].restored_checkpoint in ["trial_3", "trial_4"]
    assert trials[0].config["id_factor"] in [100]
    assert trials[0].config["float_factor"] in [2.4, 1.6]
    assert type(trials[0].config["float_factor"]) is float
    assert trials[0].config["int_factor"] in [8, 12]
    assert type(trials[0].config["int_factor"]) is int
    assert trials[0].config["const_factor"] == 3


def test_perturb_with_resample(tmp_path):
    """PopulationBasedTestingSuite::testPerturbWithResample (the lambdas are called by the trial's pod)."""
    pbt, runner = pbt_basic_setup(tmp_path, resample_prob=1.0)
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(20, -100), PAUSE)
    assert trials[0].status == PAUSED
    assert trials[0].restored_checkpoint in ["trial_3", "trial_4"]
    assert trials[0].config["id_factor"] == 100
    assert trials[0].config["float_factor"] == 100.0
    assert type(trials[0].config["float_factor"]) is float
    assert trials[0].config["int_factor"] == 10
    assert type(trials[0].config["int_factor"]) is int
    assert trials[0].config["const_factor"] == 3


def test_tune_sample_primitives(tmp_path):
    """PopulationBasedTestingSuite::testTuneSamplePrimitives."""
    import kubetune as tune

    pbt, runner = pbt_basic_setup(
        tmp_path,
        resample_prob=1.0,
        hyperparam_mutations={
            "float_factor": lambda: 100.0,
            "int_factor": lambda: 10,
            "id_factor": tune.choice([100]),
        },
    )
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(20, -100), PAUSE)
    assert trials[0].restored_checkpoint in ["trial_3", "trial_4"]
    assert trials[0].config["id_factor"] == 100
    assert trials[0].config["float_factor"] == 100.0
    assert type(trials[0].config["float_factor"]) is float
    assert trials[0].config["int_factor"] == 10
    assert type(trials[0].config["int_factor"]) is int
    assert trials[0].config["const_factor"] == 3


def test_tune_sample_from_error(tmp_path):
    """PopulationBasedTestingSuite::testTuneSampleFromError."""
    import kubetune as tune

    with pytest.raises(ValueError):
        pbt_basic_setup(tmp_path, hyperparam_mutations={"float_factor": tune.sample_from(lambda: 100.0)})


def test_perturbation_values(tmp_path):
    """PopulationBasedTestingSuite::testPerturbationValues, all but its last assertion: Ray's explore step on
    lists, tuples, functions and nested mutations, drawn from the global random stream seeded by the test.

    Here the operator decides (``kubetune_operator.schedulers.pbt.explore``, given that stream) and the pod
    calls the functions it resamples (``explore_in_pod``). Left out: ``custom_explore_fn.call_count == 100`` of a
    ``MagicMock``: a mock cannot be pickled, and the pod calls its own copy of a function, never the driver's
    object (porting table, PBT: functions run in the exploited trial's pod); the nested case runs with an
    identity ``custom_explore_fn`` instead."""
    storage = FileStorage()

    def assert_produces(fn, values):
        random.seed(0)
        seen = set()
        for _ in range(100):
            seen.add(fn()["v"])
        assert seen == values

    def explore_fn(config, mutations, resample_probability, custom_explore_fn=None):
        if custom_explore_fn is None:
            custom_explore_fn = lambda x: x  # noqa: E731
        sdk = ray_schedulers.PopulationBasedTraining(
            hyperparam_mutations=mutations, custom_explore_fn=custom_explore_fn
        )
        functions = FunctionPickles(f"file://{tmp_path}/sdk")
        spec = sdk.to_spec(on_function=functions.marker)
        functions.upload(storage)
        in_pod: list = []
        mutations = _parse_mutations(spec["params"]["hyperparam_mutations"])
        new_config, _ = explore(config, mutations, resample_probability, [1.2, 0.8], random, in_pod)
        instruction = {"resample": in_pod, "customExploreFn": spec["params"]["custom_explore_fn"][FUNCTION_KEY]}
        return explore_in_pod(new_config, instruction, storage)

    # Categorical case
    assert_produces(lambda: explore_fn({"v": 4}, {"v": [3, 4, 8, 10]}, 0.0), {3, 8})
    assert_produces(lambda: explore_fn({"v": 3}, {"v": [3, 4, 8, 10]}, 0.0), {3, 4})
    assert_produces(lambda: explore_fn({"v": 10}, {"v": [3, 4, 8, 10]}, 0.0), {8, 10})
    assert_produces(lambda: explore_fn({"v": 7}, {"v": [3, 4, 8, 10]}, 0.0), {3, 4, 8, 10})
    assert_produces(lambda: explore_fn({"v": 4}, {"v": [3, 4, 8, 10]}, 1.0), {3, 4, 8, 10})

    # Check that tuple also works
    assert_produces(lambda: explore_fn({"v": 4}, {"v": (3, 4, 8, 10)}, 0.0), {3, 8})
    assert_produces(lambda: explore_fn({"v": 3}, {"v": (3, 4, 8, 10)}, 0.0), {3, 4})

    # Passing in an invalid types should raise an error
    with pytest.raises(ValueError):
        explore_fn({"v": 4}, {"v": {3, 4, 8, 10}}, 0.0)
    with pytest.raises(ValueError):
        explore_fn({"v": 4}, {"v": "invalid"}, 0.0)

    # Continuous case
    assert_produces(lambda: explore_fn({"v": 100}, {"v": lambda: random.choice([10, 100])}, 0.0), {80, 120})
    assert_produces(lambda: explore_fn({"v": 100.0}, {"v": lambda: random.choice([10, 100])}, 0.0), {80.0, 120.0})
    assert_produces(lambda: explore_fn({"v": 100.0}, {"v": lambda: random.choice([10, 100])}, 1.0), {10.0, 100.0})

    def deep_add(seen, new_values):
        for k, new_value in new_values.items():
            if isinstance(new_value, dict):
                if k not in seen:
                    seen[k] = {}
                seen[k].update(deep_add(seen[k], new_value))
            else:
                if k not in seen:
                    seen[k] = set()
                seen[k].add(new_value)

        return seen

    def assert_nested_produces(fn, values):
        random.seed(0)
        seen = {}
        for _ in range(100):
            new_config = fn()
            seen = deep_add(seen, new_config)
        assert seen == values

    # Nested mutation and spec
    assert_nested_produces(
        lambda: explore_fn(
            {"a": {"b": 4}, "1": {"2": {"3": 100}}},
            {"a": {"b": [3, 4, 8, 10]}, "1": {"2": {"3": lambda: random.choice([10, 100])}}},
            0.0,
        ),
        {"a": {"b": {3, 8}}, "1": {"2": {"3": {80, 120}}}},
    )

    # Nested mutation and spec
    assert_nested_produces(
        lambda: explore_fn(
            {"a": {"b": 4}, "1": {"2": {"3": 100}}},
            {"a": {"b": [3, 4, 8, 10]}, "1": {"2": {"3": lambda: random.choice([10, 100])}}},
            0.0,
            custom_explore_fn=lambda x: x,
        ),
        {"a": {"b": {3, 8}}, "1": {"2": {"3": {80, 120}}}},
    )


def test_dict_perturbation(tmp_path):
    """PopulationBasedTestingSuite::testDictPerturbation."""
    pbt, runner = pbt_basic_setup(
        tmp_path,
        resample_prob=1.0,
        hyperparams={"float_factor": 2.0, "nest": {"nest_float": 3.0}, "int_factor": 10, "const_factor": 3},
        hyperparam_mutations={
            "float_factor": lambda: 100.0,
            "nest": {"nest_float": lambda: 101.0},
            "int_factor": lambda: 10,
        },
    )
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(20, -100), PAUSE)
    assert trials[0].restored_checkpoint in ["trial_3", "trial_4"]
    assert trials[0].config["float_factor"] == 100.0
    assert isinstance(trials[0].config["float_factor"], float)
    assert trials[0].config["int_factor"] == 10
    assert isinstance(trials[0].config["int_factor"], int)
    assert trials[0].config["const_factor"] == 3
    assert trials[0].config["nest"]["nest_float"] == 101.0
    assert isinstance(trials[0].config["nest"]["nest_float"], float)


def test_schedules_most_behind_trial_to_run_synch(tmp_path):
    """PopulationBasedTestingSuite::testSchedulesMostBehindTrialToRunSynch."""
    pbt, runner = pbt_basic_setup(tmp_path, synch=True)
    trials = runner.get_trials()
    runner.process_action(trials[0], on_trial_result(pbt, runner, trials[0], result(800, 1000)))
    runner.process_action(trials[1], on_trial_result(pbt, runner, trials[1], result(700, 1001)))
    runner.process_action(trials[2], on_trial_result(pbt, runner, trials[2], result(600, 1002)))
    runner.process_action(trials[3], on_trial_result(pbt, runner, trials[3], result(500, 1003)))
    runner.process_action(trials[4], on_trial_result(pbt, runner, trials[4], result(700, 1004)))
    assert runner.choose_trial_to_run() in [trials[0], trials[1], trials[3]]


def test_perturbation_resets_last_perturb_time(tmp_path):
    """PopulationBasedTestingSuite::testPerturbationResetsLastPerturbTime."""
    pbt, runner = pbt_basic_setup(tmp_path)
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(10000, 1005))
    on_trial_result(pbt, runner, trials[1], result(10000, 1004))
    on_trial_result(pbt, runner, trials[2], result(600, 1003))
    assert pbt.num_perturbations == 0
    on_trial_result(pbt, runner, trials[3], result(500, 1002))
    assert pbt.num_perturbations == 1
    on_trial_result(pbt, runner, trials[3], result(600, 100))
    assert pbt.num_perturbations == 1
    on_trial_result(pbt, runner, trials[3], result(11000, 100))
    assert pbt.num_perturbations == 2


def test_postprocessing_hook(tmp_path):
    """PopulationBasedTestingSuite::testPostprocessingHook (``custom_explore_fn``, called by the trial's pod)."""

    def explore(new_config):
        new_config["id_factor"] = 42
        new_config["float_factor"] = 43
        return new_config

    pbt, runner = pbt_basic_setup(tmp_path, resample_prob=0.0, explore=explore)
    trials = runner.get_trials()
    on_trial_result(pbt, runner, trials[0], result(20, -100), PAUSE)
    assert trials[0].config["id_factor"] == 42
    assert trials[0].config["float_factor"] == 43


# ------------------------------------------------------------------------------------------ AsyncHyperBandSuite


def nan_setup(scheduler):
    t1 = new_trial()  # mean is 450, max 450, t_max=10
    t2 = new_trial()  # mean is nan, max nan, t_max=10
    scheduler.on_trial_add(t1)
    scheduler.on_trial_add(t2)
    for i in range(10):
        assert scheduler.on_trial_result(t1, result(i, 450)) == CONTINUE
    for i in range(10):
        assert scheduler.on_trial_result(t2, result(i, np.nan)) == CONTINUE
    return t1, t2


def nan_inf_setup(scheduler):
    t1, t2, t3 = new_trial(), new_trial(), new_trial()
    scheduler.on_trial_add(t1)
    scheduler.on_trial_add(t2)
    scheduler.on_trial_add(t3)
    for i in range(10):
        scheduler.on_trial_result(t1, result(i, np.nan))
    for i in range(10):
        scheduler.on_trial_result(t2, result(i, float("inf")))
    for i in range(10):
        scheduler.on_trial_result(t3, result(i, float("-inf")))
    return t1, t2, t3


def test_async_hb_on_complete():
    """AsyncHyperBandSuite::testAsyncHBOnComplete."""
    scheduler = AsyncHyperBandScheduler(metric="episode_reward_mean", mode="max", max_t=10, brackets=1)
    t1, t2 = basic_setup(scheduler)
    t3 = new_trial()
    scheduler.on_trial_add(t3)
    scheduler.on_trial_complete(t3, result(10, 1000))
    assert scheduler.on_trial_result(t2, result(101, 0)) == STOP


def test_async_hb_grace_period():
    """AsyncHyperBandSuite::testAsyncHBGracePeriod."""
    scheduler = AsyncHyperBandScheduler(
        metric="episode_reward_mean", mode="max", grace_period=2.5, reduction_factor=3, brackets=1
    )
    t1, t2 = basic_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, 1000))
    scheduler.on_trial_complete(t2, result(10, 1000))
    t3 = new_trial()
    scheduler.on_trial_add(t3)
    assert scheduler.on_trial_result(t3, result(1, 10)) == CONTINUE
    assert scheduler.on_trial_result(t3, result(2, 10)) == CONTINUE
    assert scheduler.on_trial_result(t3, result(3, 10)) == STOP


def test_async_hb_all_completes():
    """AsyncHyperBandSuite::testAsyncHBAllCompletes."""
    scheduler = AsyncHyperBandScheduler(metric="episode_reward_mean", mode="max", max_t=10, brackets=10)
    trials = [new_trial() for i in range(10)]
    for t in trials:
        scheduler.on_trial_add(t)

    for t in trials:
        assert scheduler.on_trial_result(t, result(10, -2)) == STOP


def test_async_hb_uses_percentile():
    """AsyncHyperBandSuite::testAsyncHBUsesPercentile."""
    scheduler = AsyncHyperBandScheduler(
        metric="episode_reward_mean", mode="max", grace_period=1, max_t=10, reduction_factor=2, brackets=1
    )
    t1, t2 = basic_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, 1000))
    scheduler.on_trial_complete(t2, result(10, 1000))
    t3 = new_trial()
    scheduler.on_trial_add(t3)
    assert scheduler.on_trial_result(t3, result(1, 260)) == STOP
    assert scheduler.on_trial_result(t3, result(2, 260)) == STOP


def test_async_hb_nan_percentile():
    """AsyncHyperBandSuite::testAsyncHBNanPercentile."""
    scheduler = AsyncHyperBandScheduler(
        metric="episode_reward_mean", mode="max", grace_period=1, max_t=10, reduction_factor=2, brackets=1
    )
    t1, t2 = nan_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, 450))
    scheduler.on_trial_complete(t2, result(10, np.nan))
    t3 = new_trial()
    scheduler.on_trial_add(t3)
    assert scheduler.on_trial_result(t3, result(1, 260)) == STOP
    assert scheduler.on_trial_result(t3, result(2, 260)) == STOP


def test_async_hb_save_restore(tmp_path):
    """AsyncHyperBandSuite::testAsyncHBSaveRestore (Ray's ``save``/``restore``: the state the operator journals,
    restored into a scheduler built from the same parameters, as a restarted operator builds it)."""
    tmpfile = tmp_path / "state.json"
    params = dict(metric="episode_reward_mean", mode="max", grace_period=1, max_t=10, reduction_factor=2, brackets=1)
    scheduler = AsyncHyperBandScheduler(**params)

    # Add some trials
    trials = [new_trial() for i in range(10)]
    for t in trials:
        scheduler.on_trial_add(t)

    # Report some results
    for t in trials[0:5]:
        assert scheduler.on_trial_result(t, result(1, 10)) != STOP

    # Report worse result: Trial should stop
    assert scheduler.on_trial_result(trials[5], result(1, 5)) == STOP

    tmpfile.write_text(json.dumps(scheduler.get_state()))

    scheduler2 = AsyncHyperBandScheduler(**params)
    scheduler2.set_state(json.loads(tmpfile.read_text()))

    # Report a new bad result: Trial should stop
    assert scheduler2.on_trial_result(trials[6], result(1, 4)) == STOP

    # Create a new trial and report bad result: Trial should stop
    new = new_trial()
    scheduler2.on_trial_add(new)
    assert scheduler2.on_trial_result(new, result(1, 2)) == STOP


def test_async_hb_non_stop_trials():
    """AsyncHyperBandSuite::testAsyncHBNonStopTrials."""
    trials = [new_trial() for i in range(4)]
    scheduler = AsyncHyperBandScheduler(
        metric="metric", mode="max", grace_period=1, max_t=3, reduction_factor=2, brackets=1, stop_last_trials=False
    )
    scheduler.on_trial_add(trials[0])
    scheduler.on_trial_add(trials[1])
    scheduler.on_trial_add(trials[2])
    scheduler.on_trial_add(trials[3])

    # Report one result
    action = scheduler.on_trial_result(trials[0], {"training_iteration": 2, "metric": 10})
    assert action == CONTINUE
    action = scheduler.on_trial_result(trials[1], {"training_iteration": 2, "metric": 8})
    assert action == STOP
    action = scheduler.on_trial_result(trials[2], {"training_iteration": 2, "metric": 6})
    assert action == STOP
    action = scheduler.on_trial_result(trials[3], {"training_iteration": 2, "metric": 4})
    assert action == STOP

    # Report more. This will fail if `stop_last_trials=True`
    action = scheduler.on_trial_result(trials[0], {"training_iteration": 4, "metric": 10})
    assert action == CONTINUE

    action = scheduler.on_trial_result(trials[0], {"training_iteration": 8, "metric": 10})
    assert action == CONTINUE

    # Also continue if we fall below the cutoff eventually
    action = scheduler.on_trial_result(trials[0], {"training_iteration": 14, "metric": 1})
    assert action == CONTINUE


def test_median_stopping_nan_inf():
    """AsyncHyperBandSuite::testMedianStoppingNanInf."""
    scheduler = MedianStoppingRule(metric="episode_reward_mean", mode="max")
    t1, t2, t3 = nan_inf_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, np.nan))
    scheduler.on_trial_complete(t2, result(10, float("inf")))
    scheduler.on_trial_complete(t3, result(10, float("-inf")))
    strict_json_state(scheduler)


def test_hyperband_nan_inf():
    """AsyncHyperBandSuite::testHyperbandNanInf."""
    scheduler = HyperBandScheduler(metric="episode_reward_mean", mode="max")
    t1, t2, t3 = nan_inf_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, np.nan))
    scheduler.on_trial_complete(t2, result(10, float("inf")))
    scheduler.on_trial_complete(t3, result(10, float("-inf")))
    strict_json_state(scheduler)


def test_bohb_nan_inf():
    """AsyncHyperBandSuite::testBOHBNanInf."""
    scheduler = HyperBandForBOHB(metric="episode_reward_mean", mode="max")
    nan_inf_setup(scheduler)
    # skip trial complete in this mock setting
    strict_json_state(scheduler)


def test_pbt_nan_inf(tmp_path):
    """AsyncHyperBandSuite::testPBTNanInf."""
    scheduler, _ = sdk_pbt(tmp_path, metric="episode_reward_mean", mode="max", hyperparam_mutations={"ignored": [1]})
    t1, t2, t3 = nan_inf_setup(scheduler)
    scheduler.on_trial_complete(t1, result(10, np.nan))
    scheduler.on_trial_complete(t2, result(10, float("inf")))
    scheduler.on_trial_complete(t3, result(10, float("-inf")))
    strict_json_state(scheduler)


def asha_test_metrics(result_func, metric, mode):
    scheduler = AsyncHyperBandScheduler(
        grace_period=1, time_attr="training_iteration", metric=metric, mode=mode, brackets=1
    )
    check_alternate_metrics(scheduler, result_func)


def test_async_hb_alternate_metrics():
    """AsyncHyperBandSuite::testAlternateMetrics."""
    asha_test_metrics(lambda t, rew: dict(training_iteration=t, neg_mean_loss=rew), "neg_mean_loss", "max")


def test_async_hb_alternate_metrics_min():
    """AsyncHyperBandSuite::testAlternateMetricsMin."""
    asha_test_metrics(lambda t, rew: dict(training_iteration=t, mean_loss=-rew), "mean_loss", "min")
