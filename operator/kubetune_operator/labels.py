"""API coordinates, label and annotation keys, and the names the operator gives objects.

Owns every string the operator stamps on Kubernetes objects, so the builders
(:mod:`kubetune_operator.builders`), the handlers and the pod watch (label selectors, the
annotation prefix and finalizer of kopf) and the tests share one spelling.
Pure: no kopf or Kubernetes client imports.
"""

from __future__ import annotations

import hashlib

GROUP = "kubetune.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
EXPERIMENT_KIND = "Experiment"
EXPERIMENT_PLURAL = "experiments"
TRIAL_KIND = "Trial"
TRIAL_PLURAL = "trials"

#: Label on Trials and pods: the owning Experiment's name (:func:`label_value` of it).
LABEL_EXPERIMENT = "kubetune.io/experiment"
#: Label on pods: the owning Trial's name.
LABEL_TRIAL = "kubetune.io/trial"
#: Label on pods: the attempt number (0, 1, ...) of the Trial the pod runs.
LABEL_ATTEMPT = "kubetune.io/attempt"
#: Labels of a gang member's rank (0: the head) and its gang's size; pods of one-pod trials have neither.
LABEL_RANK = "kubetune.io/rank"
LABEL_WORLD_SIZE = "kubetune.io/world-size"
#: The recommended ``app.kubernetes.io/managed-by`` label and its value on every object we create.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubetune"

#: Prefix of kopf's own annotations (progress, last-handled configuration) on our objects,
#: so they do not collide with another kopf operator's ``kopf.zalando.org``.
KOPF_ANNOTATION_PREFIX = "kopf.kubetune.io"
#: kopf's finalizer on Experiments.
FINALIZER = "kubetune.io/finalizer"

#: Name of the trial container in every trial pod.
TRIAL_CONTAINER = "trial"
#: The init container that restores a container trial's checkpoint folder before the trial's container starts.
RESTORE_CONTAINER = "kubetune-restore"
#: The metrics sidecar (an init container with ``restartPolicy: Always``) in a container trial's pod.
METRICS_SIDECAR = "kubetune-metrics"

#: Longest name :func:`trial_name` returns: leaves room for ``-<attempt>`` (up to 6 digits)
#: in the pod name within a DNS-1123 label's 63 characters.
MAX_TRIAL_NAME_LENGTH = 56
#: Longest DNS-1123 label, and longest label value.
MAX_LABEL_LENGTH = 63

_HASH_LENGTH = 8


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def _bounded(base: str, suffix: str, limit: int, *, original: str | None = None) -> str:
    """``base + suffix`` if it fits ``limit`` and ``base`` was not altered, else ``<cut base>-<hash>`` + suffix.

    The hash is of ``original`` (the unaltered base), so distinct originals keep distinct names.
    """
    original = base if original is None else original
    if base == original and len(base) + len(suffix) <= limit:
        return base + suffix
    room = limit - len(suffix) - _HASH_LENGTH - 1
    if room < 1:
        raise ValueError(f"suffix {suffix!r} leaves no room for a name within {limit} characters")
    head = base[:room].rstrip("-.")
    return f"{head}-{_digest(original)}{suffix}" if head else f"{_digest(original)}{suffix}"


def trial_name(experiment_name: str, index: int) -> str:
    """Return the deterministic name of trial ``index`` of ``experiment_name``.

    ``<experiment>-<index:05d>`` when that is a DNS-1123 label of at most
    :data:`MAX_TRIAL_NAME_LENGTH` characters. A longer experiment name (names
    may have 253 characters) or one with dots is cut, dots become dashes, and an
    8-hex-digit SHA-256 of the full name is inserted:
    ``<cut experiment>-<hash>-<index:05d>``; the same inputs always give the
    same name, and different experiments different names.

    Args:
        experiment_name: the Experiment's ``metadata.name`` (a DNS-1123 subdomain).
        index: the trial's index within the experiment, >= 0.

    Raises:
        ValueError: ``index`` is negative or ``experiment_name`` is empty.
    """
    if index < 0:
        raise ValueError(f"trial index must be >= 0, got {index}")
    if not experiment_name:
        raise ValueError("experiment name is empty")
    base = experiment_name.lower().replace(".", "-")
    return _bounded(base, f"-{index:05d}", MAX_TRIAL_NAME_LENGTH, original=experiment_name)


def pod_name(trial: str, attempt: int) -> str:
    """Return the name of the pod running ``attempt`` (0, 1, ...) of ``trial``: ``<trial>-<attempt>``.

    Names from :func:`trial_name` always fit 63 characters with attempts below
    10**6; a longer Trial name is cut and hashed as in :func:`trial_name`.

    Raises:
        ValueError: ``attempt`` is negative.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    return _bounded(trial, f"-{attempt}", MAX_LABEL_LENGTH)


def label_value(name: str) -> str:
    """Return ``name`` as a label value: unchanged up to 63 characters, else cut and hashed.

    Object names are DNS-1123 subdomains (up to 253 characters of ``[a-z0-9.-]``),
    label values at most 63 characters; use this for both the label and the
    selector so they agree.
    """
    return _bounded(name, "", MAX_LABEL_LENGTH)
