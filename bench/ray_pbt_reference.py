"""Ray Tune's PBT decisions on a scripted population, for ``tests/unit/test_pbt_user_code.py`` (issue 23.3).

Runs Ray's ``PopulationBasedTraining`` through ``tune.run`` on four trials whose score grows by a constant of
their config (``base``) per step, from their checkpoint: a trial that exploits another takes its checkpoint
and its ``base``, so the population's scores, and so Ray's quantiles and donors, do not depend on the random
values explored (``lr`` is resampled by a function, ``lambda: random.uniform(1e-4, 1e-1)``, as Ray's examples
write it). With four trials and ``quantile_fraction=0.25`` each quantile holds one trial, so the donor is not
a random choice either. Prints the exploits of ``pbt_global.txt`` as ``[trial, donor, trial step, donor step]``
(trial indices from Ray's tags), per mode: the unit test holds these lines.

Ray Tune is not a dependency of kubetune: run with a Python that has it, e.g. the benchmark venv of
``bench/bench_vs_ray.py`` (``pip install "ray[tune]"``): ``python bench/ray_pbt_reference.py``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile

BASES = [0.1, 0.4, 0.2, 0.3]
STEPS = 8


def trainable(config):
    from ray import tune
    from ray.tune import Checkpoint

    state = {"step": 0, "acc": 0.0}
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as file:
            state = json.load(file)
    while state["step"] < STEPS:
        state["step"] += 1
        state["acc"] = round(state["acc"] + config["base"], 6)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as file:
                json.dump(state, file)
            tune.report({"acc": state["acc"], "step": state["step"]}, checkpoint=Checkpoint.from_directory(folder))


def run(synch: bool) -> list[list]:
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="step",
        perturbation_interval=2,
        quantile_fraction=0.25,
        resample_probability=0.5,
        hyperparam_mutations={"lr": lambda: random.uniform(1e-4, 1e-1)},
        synch=synch,
    )
    storage = tempfile.mkdtemp(prefix="ray-pbt-")
    analysis = tune.run(
        trainable,
        name="pbt",
        config={"base": tune.grid_search(BASES), "lr": 0.01},
        scheduler=pbt,
        metric="acc",
        mode="max",
        stop={"step": STEPS},
        storage_path=storage,
        verbose=0,
    )
    with open(os.path.join(analysis.experiment_path, "pbt_global.txt")) as file:
        lines = [json.loads(line) for line in file]
    return [[int(t.split("_")[0]), int(d.split("_")[0]), ti, di] for t, d, ti, di, *_ in lines]


if __name__ == "__main__":
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    for synch in (True,) if "--synch-only" in sys.argv else (True, False):
        print(json.dumps({"synch": synch, "exploits": run(synch)}))
