#!/bin/sh
# Installs kubetune into a new virtual environment: exactly what the images hold.
#
#   docker/install.sh runtime  PREFIX   # package `kubetune` (the trial runtime), for target `runtime`
#   docker/install.sh examples PREFIX   # `runtime` plus scikit-learn and JAX, what examples/ imports, for target `examples`
#   docker/install.sh operator PREFIX   # `kubetune` + `kubetune-operator` with every search algorithm's
#                                       # and scheduler's dependencies (extras `optuna`, `pb2`), and
#                                       # optuna-dashboard for the chart's dashboard, for target `operator`
#
# Called by the Dockerfile's build stages (one RUN each) and by tests/unit/test_dockerfile.py,
# which runs it into a temporary folder so that what the images would install is proven to
# install here, where no image can be built. Versions come from docker/constraints.txt (the
# lock of every package the images contain); the two project packages come from this tree.
# PYTHON chooses the interpreter (default: python3); pip options such as PIP_NO_CACHE_DIR
# come from the environment.
set -eu

usage() {
    echo "usage: $0 runtime|examples|operator PREFIX" >&2
    exit 2
}
[ "$#" -eq 2 ] || usage
target=$1
prefix=$2
src=$(cd "$(dirname "$0")/.." && pwd)

case "$target" in
    runtime) folders="./trainable-runtime"; packages="./trainable-runtime[tensorboard,sidecar]"
        check="import kubetune, kubetune.runtime, kubetune.runtime.sidecar, kubetune.runtime.katib_db, tensorboardX, crc32c
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader" ;;
    examples) folders="./trainable-runtime"; packages="./trainable-runtime[tensorboard,sidecar] scikit-learn jax jaxlib"
        check="import kubetune.runtime, sklearn, jax" ;;
    operator) folders="./trainable-runtime ./operator"; packages="./trainable-runtime ./operator[optuna,pb2] optuna-dashboard"
        # every registered search algorithm and scheduler imports in exactly this environment; and the
        # chart's dashboard (dashboard.enabled) runs `kubetune dashboard` from it (optuna-dashboard)
        check="import kubetune_operator.handlers
import kubetune.sdk.cli, kubetune.sdk.experiment_studies, optuna_dashboard
import cmaes, scipy.stats.qmc  # what Optuna's cmaes and qmc samplers import when they sample
import kubetune_operator.schedulers.pb2_gp  # PB2's explore step (scikit-learn), run in a worker process
from kubetune_operator.algorithms import SCHEDULERS, SEARCH_ALGORITHMS, scheduler_class, searcher_class
for name in SEARCH_ALGORITHMS: searcher_class(name)
for name in SCHEDULERS: scheduler_class(name)
print('imports:', ', '.join(sorted(SEARCH_ALGORITHMS)), '|', ', '.join(sorted(SCHEDULERS)))" ;;
    *) usage ;;
esac

# Build from a scratch copy: setuptools writes build/ and *.egg-info next to the sources it builds.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for folder in $folders; do
    cp -R "$src/$folder" "$work/$folder"
    rm -rf "$work/$folder/build" "$work/$folder"/*.egg-info
done

"${PYTHON:-python3}" -m venv "$prefix"
prefix=$(cd "$prefix" && pwd)
cd "$work"
# shellcheck disable=SC2086  # $packages: relative folder names (and extras) without spaces
"$prefix/bin/python" -m pip install --disable-pip-version-check --no-input \
    --constraint "$src/docker/constraints.txt" $packages
"$prefix/bin/python" -m pip check
"$prefix/bin/python" -c "$check"
