"""Ray's path ``ray.tune.result``: the names of the result keys, ``from kubetune.result import SHOULD_CHECKPOINT``.

The values are Ray 2.x's (``ray/tune/result.py`` and the two it takes from ``ray.air.constants``), so a script that
builds or reads a result with them works unchanged: the trial pod's runtime fills the auto-filled keys
(:mod:`kubetune.runtime.trainable`), ``should_checkpoint`` and ``done`` mean what they mean in Ray
(``docs/ray-tune.md``, "Matched"). Ray's local paths (``DEFAULT_RESULTS_DIR`` and the like) are not here: trials write
to the experiment's object storage.
"""

__all__ = [
    "AUTO_RESULT_KEYS",
    "DEBUG_METRICS",
    "DEFAULT_METRIC",
    "DEFAULT_RESULT_KEYS",
    "DONE",
    "EPISODES_THIS_ITER",
    "EPISODES_TOTAL",
    "EPISODE_REWARD_MEAN",
    "EXPERIMENT_TAG",
    "HOSTNAME",
    "MEAN_ACCURACY",
    "MEAN_LOSS",
    "NODE_IP",
    "PID",
    "SHOULD_CHECKPOINT",
    "TIMESTAMP",
    "TIMESTEPS_THIS_ITER",
    "TIMESTEPS_TOTAL",
    "TIME_THIS_ITER_S",
    "TIME_TOTAL_S",
    "TRAINING_ITERATION",
    "TRIAL_ID",
]

#: (Optional, auto-filled) the trial is finished.
DONE = "done"
#: (Optional) checkpoint the trial after this result.
SHOULD_CHECKPOINT = "should_checkpoint"
#: (Auto-filled) the host the trial runs on (the pod's hostname).
HOSTNAME = "hostname"
#: (Auto-filled) the trial's id.
TRIAL_ID = "trial_id"
#: The trial's tag, ``<index>_<key>=<value>,...``.
EXPERIMENT_TAG = "experiment_tag"
#: (Auto-filled) the address of the host the trial runs on.
NODE_IP = "node_ip"
#: (Auto-filled) the trial process's pid.
PID = "pid"
#: (Optional) the anonymous metric: what ``report(value)`` or a returned number reports.
DEFAULT_METRIC = "_metric"
#: (Optional) mean reward of the iteration.
EPISODE_REWARD_MEAN = "episode_reward_mean"
#: (Optional) mean loss of the iteration.
MEAN_LOSS = "mean_loss"
#: (Optional) mean accuracy of the iteration.
MEAN_ACCURACY = "mean_accuracy"
#: Episodes of this iteration.
EPISODES_THIS_ITER = "episodes_this_iter"
#: (Optional, auto-filled) episodes of the trial so far.
EPISODES_TOTAL = "episodes_total"
#: Timesteps of this iteration.
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
#: (Auto-filled) timesteps of the trial so far.
TIMESTEPS_TOTAL = "timesteps_total"
#: (Auto-filled) seconds this iteration took (a result may set it itself).
TIME_THIS_ITER_S = "time_this_iter_s"
#: (Auto-filled) seconds of training of the trial so far.
TIME_TOTAL_S = "time_total_s"
#: (Auto-filled) the iteration's index, from 1.
TRAINING_ITERATION = "training_iteration"
#: (Auto-filled) the result's Unix time, in seconds.
TIMESTAMP = "timestamp"

#: The keys Ray's status table shows by default.
DEFAULT_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, MEAN_ACCURACY, MEAN_LOSS)
#: Keys a result holds before any iteration completed (Ray's strict metric check leaves them out).
DEBUG_METRICS = (TRIAL_ID, "experiment_id", "date", TIMESTAMP, PID, HOSTNAME, NODE_IP, "config")
#: The keys filled in every result (as Ray's tuple: ``time_total_s`` is in it twice).
AUTO_RESULT_KEYS = (
    TRAINING_ITERATION,
    TIME_TOTAL_S,
    EPISODES_TOTAL,
    TIMESTEPS_TOTAL,
    NODE_IP,
    HOSTNAME,
    PID,
    TIME_TOTAL_S,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    "date",
    "time_since_restore",
    "timesteps_since_restore",
    "iterations_since_restore",
    "config",
)
