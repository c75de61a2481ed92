#!/bin/sh
# Installs kubetune into a new virtual environment: exactly what the images hold.
#
#   docker/install.sh runtime  PREFIX   # package `kubetune` (the trial runtime), for target `runtime`
#   docker/install.sh operator PREFIX   # `kubetune` + `kubetune-operator`, for target `operator`
#
# Called by the Dockerfile's build stages (one RUN each) and by tests/unit/test_dockerfile.py,
# which runs it into a temporary folder so that what the images would install is proven to
# install here, where no image can be built. Versions come from docker/constraints.txt (the
# lock of every package the images contain); the two project packages come from this tree.
# PYTHON chooses the interpreter (default: python3); pip options such as PIP_NO_CACHE_DIR
# come from the environment.
set -eu

usage() {
    echo "usage: $0 runtime|operator PREFIX" >&2
    exit 2
}
[ "$#" -eq 2 ] || usage
target=$1
prefix=$2
src=$(cd "$(dirname "$0")/.." && pwd)

case "$target" in
    runtime) packages="./trainable-runtime"; check="import kubetune, kubetune.runtime" ;;
    operator) packages="./trainable-runtime ./operator"; check="import kubetune_operator.handlers" ;;
    *) usage ;;
esac

# Build from a scratch copy: setuptools writes build/ and *.egg-info next to the sources it builds.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for package in $packages; do
    cp -R "$src/$package" "$work/$package"
    rm -rf "$work/$package/build" "$work/$package"/*.egg-info
done

"${PYTHON:-python3}" -m venv "$prefix"
prefix=$(cd "$prefix" && pwd)
cd "$work"
# shellcheck disable=SC2086  # $packages: relative folder names without spaces
"$prefix/bin/python" -m pip install --disable-pip-version-check --no-input \
    --constraint "$src/docker/constraints.txt" $packages
"$prefix/bin/python" -m pip check
"$prefix/bin/python" -c "$check"
