"""Builds Kueue (``sigs.k8s.io/kueue``) from its Go module and runs its manager beside a running cluster.

Called by the integration tests' ``kueue`` fixture (``tests/integration/test_kueue.py``), by
``bench/bench_gangs.py --phases kueue``, by ``python -m devcluster up --kueue`` and by ``python -m devcluster build
--kueue`` (which ``make node`` runs). As for the control plane (:mod:`devcluster.build`), the manager
(``cmd/kueue``) is compiled through the module proxy in a throwaway build module and cached by version
under ``$KUBETUNE_CACHE/bin``. Its CRDs and webhook configurations are the ones its release is kustomized
from (``config/components`` of the same module), applied with two changes a cluster of local processes
needs: every webhook is reached by URL on 127.0.0.1 with a serving certificate from the cluster's CA
(instead of through a Service, with Kueue's internal certificate management off), and only the webhooks
of Kueue's own API and of its ``pod`` integration are installed, as a Kueue configured with
``integrations.frameworks: [pod]`` serves. :meth:`Kueue.stop` removes the webhook configurations before
it stops the manager, so that pod creation never waits on a webhook that is gone.

Kueue reads its metrics certificate from a fixed path (``/etc/kueue/metrics/certs``) when its internal
certificate management is off: :meth:`Kueue.start` writes one there, so it must run as root (as the real
node does).
"""

from __future__ import annotations

import base64
import fcntl
import json
import socket
import ssl
from pathlib import Path

import yaml

from . import certs, procs
from .build import _building_with_go, _run_go, _write_module, cache_root

KUEUE_VERSION = "v0.17.0"
#: The namespace Kueue runs in (its ``namespace`` setting); Kueue's webhooks leave it and kube-system alone.
NAMESPACE = "kueue-system"
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
#: Where Kueue's manager reads its metrics certificate when its internal certificate management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
#: The webhooks a Kueue with only the ``pod`` integration serves: its own API's and the pod webhooks.
_POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")


def kueue_binary() -> Path:
    """Return the path of the built manager (built here if missing).

    Raises:
        RuntimeError: the go command failed (its output tail is in the message).
        FileNotFoundError: the ``go`` toolchain is not on PATH.
    """
    out = cache_root() / "bin" / f"kueue-{KUEUE_VERSION}"
    binary = out / "kueue"
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / "kueue-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            announce = f"building Kueue {KUEUE_VERSION} into {out} (about 2 minutes on 2 cores from a cold Go cache)"
            with _building_with_go("Kueue", out, announce, "Kueue built"):
                tmp = out / "kueue.tmp"
                _run_go(
                    ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "sigs.k8s.io/kueue/cmd/kueue"],
                    _workdir(),
                    "kueue",
                )
                tmp.rename(binary)
    return binary


def _workdir() -> Path:
    workdir = cache_root() / "build" / f"kueue-{KUEUE_VERSION}"
    _write_module(workdir, "kubetune.local/build/kueue", {"sigs.k8s.io/kueue": KUEUE_VERSION}, {})
    return workdir


def module_dir() -> Path:
    """Return the folder of the downloaded ``sigs.k8s.io/kueue`` module (its ``config/`` has the manifests)."""
    info = json.loads(_run_go(["mod", "download", "-json", f"sigs.k8s.io/kueue@{KUEUE_VERSION}"], _workdir(), "kueue"))
    return Path(info["Dir"])


def crds(source: Path) -> list[dict]:
    """Kueue's CRDs from ``source`` (the module folder); those its kustomization gives a conversion webhook
    get one (``/convert``; the URL and CA are filled in by :func:`serve_by_url`)."""
    folder = source / "config" / "components" / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    converted = {
        yaml.safe_load((folder / p["path"]).read_text())["metadata"]["name"] for p in kustomization.get("patches") or ()
    }
    out = []
    for path in kustomization["resources"]:
        crd = yaml.safe_load((folder / path).read_text())
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"service": {"path": "/convert"}}, "conversionReviewVersions": ["v1"]},
            }
        out.append(crd)
    return out


def webhook_configurations(source: Path) -> list[dict]:
    """Kueue's mutating and validating webhook configurations from ``source`` (the module folder), kept to
    Kueue's own API and the pod integration, with the namespace selector its kustomization gives the pod
    webhooks (not kube-system, not Kueue's namespace)."""
    folder = source / "config" / "components" / "webhook"
    skip_namespaces = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}
        ]
    }
    out = []
    for doc, name in zip(yaml.safe_load_all((folder / "manifests.yaml").read_text()), (MUTATING, VALIDATING)):
        hooks = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            if hook["name"] in _POD_WEBHOOKS:
                hook["namespaceSelector"] = skip_namespaces
            elif groups != {"kueue.x-k8s.io"}:
                continue
            hooks.append(hook)
        out.append({**doc, "metadata": {"name": name}, "webhooks": hooks})
    return out


def serve_by_url(client_config: dict, port: int, ca_pem: bytes) -> None:
    """Point a webhook's ``clientConfig`` (a Service reference with a path) at ``https://127.0.0.1:<port>``."""
    path = client_config.pop("service")["path"]
    client_config["url"] = f"https://127.0.0.1:{port}{path}"
    client_config["caBundle"] = base64.b64encode(ca_pem).decode()


class Kueue:
    """Kueue's manager running against ``cluster`` (a started :class:`devcluster.cluster.Cluster`): ``start()``, then
    ``stop()``, or ``Cluster.stop()`` (the manager's PID is in the cluster's state file)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.workdir = cluster.workdir / "kueue"
        self.proc = None

    def start(self) -> None:
        """Build what is missing, install Kueue's CRDs and webhooks, start the manager and wait until it
        serves its webhooks.

        Raises:
            RuntimeError: the build failed, or the manager exited or was not ready in 120 s (its log tail).
            PermissionError: not root (see the module's docstring).
        """
        binary = kueue_binary()
        source = module_dir()
        pki = self.cluster.pki
        ca = certs.CertificateAuthority.load(pki["ca.crt"], pki["ca.key"])
        serving = self.workdir / "certs"
        serving.mkdir(parents=True, exist_ok=True)
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for folder in (serving, METRICS_CERT_DIR):
            cert, key = ca.issue("kueue-webhook", server=True)
            (folder / "tls.crt").write_bytes(cert)
            (folder / "tls.key").write_bytes(key)
            (folder / "tls.key").chmod(0o600)
        webhook_port, health_port = procs.free_port(), procs.free_port()
        manifests = crds(source)
        for crd in manifests:
            if "conversion" in crd["spec"]:
                serve_by_url(crd["spec"]["conversion"]["webhook"]["clientConfig"], webhook_port, ca.cert_pem)
        self._apply(manifests)
        names = [f"crd/{c['metadata']['name']}" for c in manifests]
        self.cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(serving)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["pod"]},
        }
        path = self.workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.proc, log = self.cluster._spawn(
            "kueue",
            [
                str(binary),
                f"--config={path}",
                f"--kubeconfig={self.cluster.kubeconfig}",
                # its visibility API is an aggregated API server of its own, with certificates from a Secret
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=2",
            ],
        )
        procs.wait_until(
            lambda: procs.http_ok(f"http://127.0.0.1:{health_port}/readyz"),
            timeout=120,
            what="Kueue",
            proc=self.proc,
            log=log,
        )
        tls = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        procs.wait_until(
            lambda: _serves_tls(webhook_port, tls), timeout=60, what="Kueue's webhooks", proc=self.proc, log=log
        )
        hooks = webhook_configurations(source)
        for doc in hooks:
            for hook in doc["webhooks"]:
                serve_by_url(hook["clientConfig"], webhook_port, ca.cert_pem)
        self._apply(hooks)

    def stop(self) -> None:
        """Remove the webhook configurations, then stop the manager; idempotent. The CRDs stay."""
        for kind, name in (("mutatingwebhookconfiguration", MUTATING), ("validatingwebhookconfiguration", VALIDATING)):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        pid = self.cluster.state["pids"].pop("kueue", None)
        if pid is not None and self.proc is not None:
            procs.stop_pid(pid, timeout=10)
            self.proc.poll()
        self.cluster._save_state()

    def _apply(self, docs: list[dict]) -> None:
        text = yaml.safe_dump_all(docs)
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)


def _serves_tls(port: int, context: ssl.SSLContext) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            with context.wrap_socket(sock, server_hostname="127.0.0.1"):
                return True
    except OSError:
        return False
