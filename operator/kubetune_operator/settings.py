"""The operator's settings: grouped dataclasses, loaded once at start-up from the environment.

Modelled on kopf's ``OperatorSettings`` (one dataclass per concern, a docstring
under every field). The operator's entry point calls :meth:`Settings.from_env`
once and hands the object to the handlers, the collector and the builders
(:func:`kubetune_operator.builders.build_pod`). Nothing reads the environment
later.

Every field ``<group>.<field>`` is read from ``KUBETUNE_OPERATOR_<GROUP>_<FIELD>``
(upper case), e.g. ``collector.bind_port`` from
``KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT``. Tuples are comma-separated; an empty
value of an optional field means None.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from typing import Mapping

from kubetune.env import MAX_BATCH_BYTES

from .podsecurity import LEVELS

ENV_PREFIX = "KUBETUNE_OPERATOR_"
#: Values of ``trials.gang_scheduling``.
GANG_SCHEDULING = ("auto", "podgroup", "none")
#: Values of ``metrics.auth``.
METRICS_AUTH = ("kubernetes", "none")


@dataclass(frozen=True)
class WatchSettings:
    """Which Experiments the operator serves."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means the whole cluster (``kopf run --all-namespaces``)."""


@dataclass(frozen=True)
class CollectorSettings:
    """The HTTP endpoint that receives trial results (``kubetune.env.COLLECTOR_RESULTS_PATH``)."""

    bind_host: str = "0.0.0.0"
    """Address the collector listens on."""

    bind_port: int = 8080
    """TCP port the collector listens on."""

    url: str | None = None
    """Base URL trial pods report to (``KUBETUNE_COLLECTOR_URL``), e.g. the operator's Service
    ``http://kubetune-operator.kubetune-system.svc:8080``. None: ``http://127.0.0.1:<bind_port>``,
    which reaches the operator only when trial processes run on its host (the local dev cluster)."""

    max_body_bytes: int = MAX_BATCH_BYTES
    """Largest request body accepted, in bytes; larger bodies get 413."""

    max_results_per_batch: int = 1000
    """Most results one request may carry; more is rejected as malformed (400)."""

    key_secret_name: str = "kubetune-collector-key"
    """Secret holding the HMAC key that trial tokens are derived from (created if missing)."""

    key_secret_namespace: str = "kubetune-system"
    """Namespace of that Secret (the operator's own namespace)."""

    def base_url(self) -> str:
        """The URL given to trial pods: :attr:`url`, else ``http://127.0.0.1:<bind_port>``."""
        return self.url or f"http://127.0.0.1:{self.bind_port}"


@dataclass(frozen=True)
class MetricsSettings:
    """Who may read ``/metrics`` (:mod:`kubetune_operator.metricsauth`)."""

    auth: str = "kubernetes"
    """``kubernetes``: only requests whose bearer token the API server authenticates (TokenReview) and whose
    user RBAC allows ``get`` on the non-resource URL ``/metrics`` (SubjectAccessReview); ``none``: anyone
    who reaches the port."""


@dataclass(frozen=True)
class StatusSettings:
    """How often the operator writes status."""

    write_interval_s: float = 2.0
    """Least time between two status writes of one object, in seconds, however often trials
    report; phase changes are written at once."""


@dataclass(frozen=True)
class TrialSettings:
    """Defaults and limits for Trials and their pods."""

    default_image: str = "kubetune/runtime:0.1.0"
    """Trial image when an Experiment has no ``spec.image``."""

    default_max_concurrent_trials: int = 16
    """Most trials running at once when an Experiment has no ``spec.maxConcurrentTrials``."""

    termination_grace_period_s: int = 60
    """Seconds a trial pod has between SIGTERM (stop, pause) and SIGKILL to write its checkpoint."""

    run_as_user: int = 1000
    """UID trial containers run as unless the Experiment's ``template.securityContext`` says otherwise."""

    pod_security_level: str = "restricted"
    """The loosest Pod Security Standards level (``restricted``, ``baseline`` or ``privileged``) an
    Experiment's ``template`` may bring its trial pods to; a template that goes further is refused
    (:mod:`kubetune_operator.podsecurity`)."""

    gang_scheduling: str = "auto"
    """How the gangs of trials with workers are admitted whole: ``podgroup`` gives each attempt a PodGroup
    (``scheduling.k8s.io/v1alpha2``, the kube-scheduler's gang scheduling, KEP-4671), ``none`` relies on the
    Experiment's ``workers.scheduleTimeoutSeconds`` alone; ``auto`` (the default) is ``podgroup`` when the API
    server serves PodGroups at start-up, else ``none``."""


@dataclass(frozen=True)
class StorageSettings:
    """Object storage used when an Experiment has no ``spec.storage.uri``."""

    default_uri: str | None = None
    """Default ``s3://bucket/prefix`` or ``file://`` root; None requires ``spec.storage.uri``."""

    default_endpoint: str | None = None
    """S3 endpoint URL for :attr:`default_uri` (None: AWS)."""

    default_region: str | None = None
    """S3 region for :attr:`default_uri`."""


@dataclass(frozen=True)
class KatibSettings:
    """Katib's ``kubeflow.org/v1beta1`` API, served by kubetune (docs/katib.md, "Katib's API, served")."""

    enabled: bool = False
    """Serve Katib's Experiments (:mod:`kubetune_operator.katib_handlers`); Katib's CRDs must be installed (the chart's
    ``katib.enabled`` installs them)."""


@dataclass(frozen=True)
class Settings:
    """All settings of the operator."""

    watch: WatchSettings = field(default_factory=WatchSettings)
    collector: CollectorSettings = field(default_factory=CollectorSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    trials: TrialSettings = field(default_factory=TrialSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    katib: KatibSettings = field(default_factory=KatibSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from ``KUBETUNE_OPERATOR_<GROUP>_<FIELD>``; absent variables keep the default.

        Args:
            environ: the variables (default ``os.environ``).

        Raises:
            ValueError: a variable does not parse as its field's type, or a number is out of range;
                the message names the variable.
        """
        env = os.environ if environ is None else environ
        groups = {}
        for group in dataclasses.fields(cls):
            group_cls = typing.get_type_hints(cls)[group.name]
            hints = typing.get_type_hints(group_cls)
            values = {}
            for f in dataclasses.fields(group_cls):
                var = f"{ENV_PREFIX}{group.name}_{f.name}".upper()
                if var in env:
                    values[f.name] = _parse(var, env[var], hints[f.name])
            groups[group.name] = group_cls(**values)
        settings = cls(**groups)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Check ranges.

        Raises:
            ValueError: a port outside 0-65535, a size, count, interval or UID out of range, an
                unknown Pod Security level, metrics authentication or gang scheduling.
        """
        checks = [
            (0 <= self.collector.bind_port <= 65535, "collector.bind_port must be in 0..65535"),
            (self.collector.max_body_bytes > 0, "collector.max_body_bytes must be > 0"),
            (self.collector.max_results_per_batch > 0, "collector.max_results_per_batch must be > 0"),
            (self.status.write_interval_s >= 0, "status.write_interval_s must be >= 0"),
            (self.trials.default_max_concurrent_trials > 0, "trials.default_max_concurrent_trials must be > 0"),
            (self.trials.termination_grace_period_s >= 0, "trials.termination_grace_period_s must be >= 0"),
            (self.trials.run_as_user > 0, "trials.run_as_user must be > 0 (trial pods run as non-root)"),
            (self.metrics.auth in METRICS_AUTH, f"metrics.auth must be one of {', '.join(METRICS_AUTH)}"),
            (self.trials.pod_security_level in LEVELS, f"trials.pod_security_level must be one of {', '.join(LEVELS)}"),
            (
                self.trials.gang_scheduling in GANG_SCHEDULING,
                f"trials.gang_scheduling must be one of {', '.join(GANG_SCHEDULING)}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def _parse(var: str, text: str, hint: object) -> object:
    """Convert ``text`` to ``hint`` (str, int, float, bool, tuple[str, ...], or one of them | None)."""
    args = typing.get_args(hint)
    if type(None) in args:
        if text.strip() == "":
            return None
        (hint,) = [a for a in args if a is not type(None)]
    try:
        if hint is str:
            return text
        if hint is bool:
            if text.strip().lower() not in ("true", "false"):
                raise ValueError(f"expected true or false, got {text!r}")
            return text.strip().lower() == "true"
        if hint in (int, float):
            return hint(text.strip())
        if typing.get_origin(hint) is tuple:
            return tuple(part.strip() for part in text.split(",") if part.strip())
    except ValueError as e:
        raise ValueError(f"{var}: {e}") from None
    raise TypeError(f"{var}: unsupported settings type {hint!r}")
