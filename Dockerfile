# kubetune's two images, built from this tree:
#
#   docker build --target operator -t kubetune/operator:0.1.0 .   # the operator the Helm chart runs
#   docker build --target runtime  -t kubetune/runtime:0.1.0 .    # the base of trial images
#   docker build --target examples -t kubetune/examples:0.1.0 .   # trial image of examples/ (scikit-learn, JAX)
#
# Each build stage runs docker/install.sh, the same script tests/unit/test_dockerfile.py runs
# into a temporary folder, so what the images install is proven to install without building
# them; docker/constraints.txt pins every package. The final stages hold only the base image
# and one virtual environment, and run as a non-root user.
#
# Trial images start FROM kubetune/runtime and add the user's code under /app (the working
# directory, so `package.module:Class` entrypoints import from there). GPU images start from a
# CUDA base instead and `pip install` the kubetune package: see README.md, "Images".

# Python 3.11.14 on Debian bookworm, pinned by tag and by the digest of its multi-arch index. Any
# image with python3 3.11 (with venv), groupadd and useradd can stand in: devcluster/images.py builds
# these targets without a registry on a Debian bookworm base made by mmdebstrap.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${PYTHON_IMAGE} AS build-base
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY docker/ docker/
COPY trainable-runtime/ trainable-runtime/

# PIP_CERT: a CA bundle for pip where the network to the package index needs one (a TLS-intercepting
# proxy): mount the file into the build and pass its path (devcluster/images.py passes the host's).
# An ARG of the install stages only: it is in no image.
FROM build-base AS build-runtime
ARG PIP_CERT
RUN docker/install.sh runtime /opt/kubetune

FROM build-base AS build-operator
ARG PIP_CERT
COPY operator/ operator/
RUN docker/install.sh operator /opt/kubetune

FROM build-base AS build-examples
ARG PIP_CERT
RUN docker/install.sh examples /opt/kubetune

# The base users extend: `python -m kubetune.runtime` runs a trial from the operator's environment.
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="kubetune runtime" \
      org.opencontainers.image.description="Base image of kubetune trial pods: the kubetune package and its runtime"
RUN groupadd --gid 1000 kubetune \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/kubetune kubetune \
    && install -d -o 1000 -g 1000 /app
COPY --from=build-runtime /opt/kubetune /opt/kubetune
ENV PATH=/opt/kubetune/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/kubetune
WORKDIR /app
USER 1000:1000
CMD ["python", "-m", "kubetune.runtime"]

# The trial image of this repository's examples (examples/digits, examples/distributed): the runtime with
# scikit-learn and JAX (CPU).
FROM runtime AS examples
COPY --from=build-examples /opt/kubetune /opt/kubetune
COPY --chown=1000:1000 examples/ /app/examples/
USER 1000:1000

# The operator (kopf) with its results collector on 8080 and its liveness endpoint on 8081. The chart's
# dashboard (dashboard.enabled) runs `kubetune dashboard` from this image too (it holds optuna-dashboard).
FROM ${PYTHON_IMAGE} AS operator
LABEL org.opencontainers.image.title="kubetune operator" \
      org.opencontainers.image.description="The kubetune operator: Experiments and Trials on Kubernetes"
COPY --from=build-operator /opt/kubetune /opt/kubetune
ENV PATH=/opt/kubetune/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "kubetune_operator"]
CMD ["--liveness", "http://0.0.0.0:8081/healthz"]
