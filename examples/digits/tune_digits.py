"""The digits experiment as a Ray Tune script: ``import kubetune as tune`` is the only change.

Tunes a one-hidden-layer MLP on scikit-learn's bundled handwritten digits (``DigitsTrainable``):
8 trials, 4 at a time, one GPU each, ASHA stopping the weak ones early. Then it reads the results
back from storage, prints the best config and reproduces the best trial's accuracy here, from its
checkpoint. ``make demo`` runs it on the local cluster (``examples/digits/demo.py``); so does, after
``eval "$(python -m devcluster up)"`` (the SDK's default storage and credentials Secret are exported)::

    python examples/digits/tune_digits.py

and against any cluster with the kubetune operator::

    python -m examples.digits.tune_digits --storage s3://bucket/prefix -n NAMESPACE --secret s3-creds

The trial pods must be able to import ``examples.digits`` (the local cluster's process kubelet has
the repository on ``PYTHONPATH``; on a real cluster, build the trial image with it). With Ray Tune,
replace the two imports marked below and drop the Kubernetes arguments.
"""

from __future__ import annotations

import argparse

import kubetune as tune  # Ray Tune: from ray import tune
from examples.digits.trainable import DigitsTrainable
from kubetune.schedulers import ASHAScheduler  # Ray Tune: from ray.tune.schedulers import ASHAScheduler

METRIC, MODE = "mean_accuracy", "max"


def tune_digits(namespace: str | None = None, storage: dict | str | None = None, name: str = "digits"):
    """Run the experiment and return its ``ExperimentAnalysis``."""
    return tune.run(
        DigitsTrainable,
        name=name,
        config={
            "lr": tune.loguniform(1e-4, 1e-1),  # Adam's learning rate
            "alpha": tune.loguniform(1e-6, 1e-1),  # L2 regularisation
            "hidden_units": tune.choice([32, 64, 128]),  # width of the hidden layer
            "batch_size": 32,
            "seed": 0,  # weight init and batch order
        },
        num_samples=8,
        metric=METRIC,
        mode=MODE,
        stop={"training_iteration": 12},
        scheduler=ASHAScheduler(max_t=12, grace_period=2, reduction_factor=2),
        search_alg=tune.search.BasicVariantGenerator(random_state=2024),
        max_concurrent_trials=4,
        resources_per_trial={"cpu": 1, "gpu": 1, "memory": 2**30},
        checkpoint_freq=4,
        checkpoint_at_end=True,
        max_failures=2,
        progress_reporter=tune.CLIReporter(metric_columns={"mean_loss": "mean_loss", "gpu_ids": "GPU"}),
        # Kubernetes' arguments, which Ray lacks: where trials run, write, and what their pods get.
        namespace=namespace,
        storage=storage,
        template={"env": [{"name": "OMP_NUM_THREADS", "value": "1"}]},  # one BLAS thread per CPU, as Ray sets
    )


def report(analysis) -> float:
    """Print the best trial and reproduce its accuracy from its checkpoint; return that accuracy."""
    best = analysis.get_best_trial(METRIC, MODE)
    print(
        f"\nBest trial: {best.trial_id}, {METRIC} {best.last_result[METRIC]:.4f} "
        f"at iteration {best.last_result['training_iteration']}"
    )
    print(f"Best config: {analysis.get_best_config(METRIC, MODE)}")
    checkpoint = analysis.get_best_checkpoint(best, METRIC, MODE)  # downloaded from storage
    model = DigitsTrainable(config=best.config)
    model.restore(checkpoint.path)
    accuracy = model.evaluate()[METRIC]
    print(f"The best checkpoint, restored here: {METRIC} {accuracy:.4f} (iteration {model.iteration})")
    model.stop()
    return accuracy


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m examples.digits.tune_digits [--storage URI] [-n NAMESPACE] [--secret NAME]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--storage", help="object storage URI, e.g. s3://bucket/prefix (default: $KUBETUNE_STORAGE_URI)"
    )
    parser.add_argument("-n", "--namespace")
    parser.add_argument(
        "--secret",
        help="Secret with the trial pods' storage credentials (default: $KUBETUNE_STORAGE_CREDENTIALS_SECRET)",
    )
    args = parser.parse_args(argv)
    report(tune_digits(args.namespace, {"uri": args.storage, "credentialsSecret": args.secret}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
