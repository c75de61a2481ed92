"""Starts and stops a local Kubernetes control plane with fake GPU nodes, a
process kubelet and an S3 endpoint, all as local processes on loopback; or,
with ``ClusterConfig.real_node``, the same control plane with a real node
(:mod:`devcluster.realnode`: kubelet, containerd, kube-proxy, CoreDNS) instead
of the process kubelet, listening on the node's bridge address.

Called by the CLI (``python -m devcluster up|down|status``), by the pytest
session fixture in ``tests/integration/conftest.py`` and by the demo. Start
order: moto (S3), etcd, kube-apiserver, CRDs, kube-scheduler,
kube-controller-manager, process kubelet (which registers the nodes); stop is
the reverse, each process by its own PID. Everything a running cluster needs
to be found again (PIDs, ports, paths) is in ``<workdir>/state.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from . import build, certs, procs, realnode

S3_ACCESS_KEY = "devcluster"
S3_SECRET_KEY = "devcluster-secret"
S3_REGION = "us-east-1"
S3_BUCKET = "kubetune"
CONTROLLERS = (
    "garbage-collector-controller,namespace-controller,deployment-controller,replicaset-controller,"
    "serviceaccount-controller,root-ca-certificate-publisher-controller,resourcequota-controller"
)
#: What Services need on the real node (kube-proxy and CoreDNS read EndpointSlices).
REAL_NODE_CONTROLLERS = ",endpointslice-controller"
#: The kube-scheduler's gang scheduling (KEP-4671, alpha in 1.36): the PodGroup API on the API server and the
#: scheduler's plugin, so that kubetune's gangs are admitted whole as on a cluster that enables them.
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"


@dataclass
class ClusterConfig:
    """What to start.

    Attributes:
        nodes: how many fake nodes the process kubelet registers.
        gpus_per_node: ``nvidia.com/gpu`` capacity of each node.
        node_cpu: cpu capacity of each node (Kubernetes quantity).
        node_memory: memory capacity of each node (Kubernetes quantity).
        node_pods: pod capacity of each node.
        crds: CRD manifests applied before the controller manager starts (its garbage collector
            learns resources from discovery, so owner-based deletion works at once).
        s3: whether to start moto's S3 server with bucket ``S3_BUCKET``.
        detach: children outlive this process (the CLI's ``up``); otherwise they die with it.
        node_gpus: GPUs of each node, one entry per node; overrides ``nodes`` and ``gpus_per_node``.
        real_node: run pods on one real node (kubelet, containerd, runc) with ``gpus_per_node`` fake
            GPUs from a device plugin, instead of the process kubelet's fake nodes; needs root and
            the Debian packages :func:`devcluster.realnode.unavailable_reason` names.
    """

    nodes: int = 1
    gpus_per_node: int = 4
    node_cpu: str = "32"
    node_memory: str = "128Gi"
    node_pods: int = 110
    crds: list[str] = field(default_factory=list)
    s3: bool = True
    detach: bool = False
    node_gpus: list[int] | None = None
    real_node: bool = False

    def gpus_by_node(self) -> list[int]:
        """GPU capacity of each node, in node order."""
        return list(self.node_gpus) if self.node_gpus else [self.gpus_per_node] * self.nodes


def default_state_dir() -> Path:
    """Where ``python -m devcluster up`` keeps its cluster (``$KUBETUNE_DEVCLUSTER_DIR``)."""
    return Path(os.environ.get("KUBETUNE_DEVCLUSTER_DIR", build.cache_root() / "devcluster"))


class Cluster:
    """A running (or stoppable) local cluster rooted at ``workdir``.

    Use as a context manager, or ``start()``/``stop()``. ``stop()`` is idempotent and also
    stops a cluster found again from its state file (``Cluster.attach``).
    """

    def __init__(self, config: ClusterConfig | None = None, workdir: Path | None = None):
        self.config = config or ClusterConfig()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="devcluster-"))
        self.state: dict = {
            "pids": {},
            "ports": {},
            "startTimes": {},
            "config": asdict(self.config),
            "workdir": str(self.workdir),
        }
        self._procs: dict[str, subprocess.Popen] = {}
        self.node: realnode.RealNode | None = None

    # ----- paths and exports -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificate in ``system:masters``)."""
        return self.workdir / "kubeconfig"

    @property
    def host(self) -> str:
        """The address the API server and S3 listen on: loopback, or the real node's gateway (pods reach it)."""
        return realnode.GATEWAY if self.config.real_node else "127.0.0.1"

    @property
    def api_url(self) -> str:
        return f"https://{self.host}:{self.state['ports']['apiserver']}"

    @property
    def s3_endpoint(self) -> str | None:
        port = self.state["ports"].get("s3")
        return f"http://{self.host}:{port}" if port else None

    def env(self) -> dict[str, str]:
        """The variables a user (or test) needs to talk to this cluster and its S3 endpoint; ``PATH`` has
        the built binaries (``kubectl``, ``helm``), then this interpreter's folder (``python``, ``kubetune``)."""
        env = {
            "KUBECONFIG": str(self.kubeconfig),
            "KUBETUNE_DEVCLUSTER_DIR": str(self.workdir),
            "PATH": f"{build.bin_dir()}{os.pathsep}{_image_path()}",
        }
        if self.s3_endpoint:
            env.update(
                AWS_ENDPOINT_URL_S3=self.s3_endpoint,
                AWS_ACCESS_KEY_ID=S3_ACCESS_KEY,
                AWS_SECRET_ACCESS_KEY=S3_SECRET_KEY,
                AWS_DEFAULT_REGION=S3_REGION,
                KUBETUNE_S3_BUCKET=S3_BUCKET,
            )
        return env

    def pod_log_dir(self) -> Path:
        """Where the process kubelet keeps each pod's folder (``<namespace>_<name>``: logs, volumes)."""
        return self.workdir / "pods"

    # ----- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component and wait until each is ready.

        Raises:
            RuntimeError: a component exited or did not become ready (with its log tail).
        """
        started = time.monotonic()
        bins = build.ensure_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.config.real_node:
            reason = realnode.unavailable_reason()
            if reason:
                raise RuntimeError(f"cannot start the real node: {reason}")
            self.node = realnode.RealNode(self, self.config.gpus_per_node)  # builds what is missing first
            realnode.prepare_network()
        self.pki = certs.write_pki(self.workdir / "pki", (self.host,) if self.config.real_node else ())
        self._write_kubeconfig()
        if self.config.s3:
            self._start_s3()
        self._start_etcd(bins["etcd"])
        self._start_apiserver(bins["kube-apiserver"])
        for crd in self.config.crds:
            self.kubectl("apply", "--server-side", "-f", str(crd))
        for crd in self.config.crds:
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd))
        self._start_scheduler(bins["kube-scheduler"])
        self._start_controller_manager(bins["kube-controller-manager"])
        if self.node is not None:
            self.node.start(self.api_url)
        else:
            self._start_kubelet()
        self.state["startSeconds"] = round(time.monotonic() - started, 2)
        self._save_state()

    def stop(self) -> None:
        """Stop every process this cluster started, in reverse order, by PID; idempotent."""
        for name in reversed(list(self.state["pids"])):
            pid = self.state["pids"][name]
            if self._is_ours(pid):
                procs.stop_pid(pid, timeout=15 if name == "kubelet" else 10)
            proc = self._procs.get(name)
            if proc is not None:
                proc.poll()
        self.state["pids"] = {}
        self._save_state()
        if self.config.real_node:
            realnode.cleanup(self.workdir / "node")
            realnode.release(self.workdir)
        if self._own_workdir and not self.config.detach:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @classmethod
    def attach(cls, workdir: Path) -> "Cluster":
        """Find a cluster again from its state file.

        Raises:
            FileNotFoundError: no cluster state in ``workdir``.
        """
        state = json.loads((Path(workdir) / "state.json").read_text())
        cluster = cls(ClusterConfig(**state["config"]), Path(workdir))
        cluster.state = state
        return cluster

    def running(self) -> dict[str, bool]:
        """``{component: alive}`` for every process in the state file."""
        return {name: self._is_ours(pid) for name, pid in self.state["pids"].items()}

    # ----- helpers -----------------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        """Run the built kubectl against this cluster; raises CalledProcessError with stderr on failure."""
        proc = subprocess.run(
            [str(build.binary_path("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` for the admin user."""
        from kubernetes import config as kconfig

        return kconfig.new_client_from_config(str(self.kubeconfig))

    def _is_ours(self, pid: int) -> bool:
        """Whether ``pid`` is still the process we started (not a recycled PID)."""
        return procs.pid_alive(pid) and procs.start_time(pid) == self.state["startTimes"].get(str(pid))

    def _save_state(self) -> None:
        if self.workdir.exists():
            (self.workdir / "state.json").write_text(json.dumps(self.state, indent=2))

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> tuple[subprocess.Popen, Path]:
        log = self.workdir / "logs" / f"{name}.log"
        proc = procs.spawn(argv, log, env=env, die_with_parent=not self.config.detach)
        self._procs[name] = proc
        self.state["pids"][name] = proc.pid
        self.state.setdefault("startTimes", {})[str(proc.pid)] = procs.start_time(proc.pid)
        self._save_state()
        return proc, log

    def _tls_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki["ca.crt"]))
        ctx.load_cert_chain(str(self.pki["admin.crt"]), str(self.pki["admin.key"]))
        return ctx

    def _write_kubeconfig(self) -> None:
        self.state["ports"]["apiserver"] = procs.free_port()
        certs.write_kubeconfig(
            self.kubeconfig,
            self.api_url,
            self.pki["ca.crt"],
            self.pki["admin.crt"],
            self.pki["admin.key"],
            user="admin",
            namespace="default",
        )

    def _start_s3(self) -> None:
        port = self.state["ports"]["s3"] = procs.free_port()
        proc, log = self._spawn("s3", [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(port)])
        procs.wait_until(
            lambda: procs.http_ok(f"{self.s3_endpoint}/moto-api/"), timeout=60, what="S3 (moto)", proc=proc, log=log
        )
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            region_name=S3_REGION,
        ).create_bucket(Bucket=S3_BUCKET)

    def _start_etcd(self, binary: Path) -> None:
        port, peer = procs.free_port(), procs.free_port()
        self.state["ports"]["etcd"] = port
        proc, log = self._spawn(
            "etcd",
            [
                str(binary),
                "--data-dir",
                str(self.workdir / "etcd"),
                "--unsafe-no-fsync",
                "--listen-client-urls",
                f"http://127.0.0.1:{port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--log-level",
                "warn",
            ],
        )
        procs.wait_until(
            lambda: procs.http_ok(f"http://127.0.0.1:{port}/health", expect=b'"true"'),
            timeout=60,
            what="etcd",
            proc=proc,
            log=log,
        )

    def _start_apiserver(self, binary: Path) -> None:
        p = self.pki
        proc, log = self._spawn(
            "apiserver",
            [
                str(binary),
                f"--etcd-servers=http://127.0.0.1:{self.state['ports']['etcd']}",
                f"--bind-address={self.host}",
                f"--secure-port={self.state['ports']['apiserver']}",
                f"--advertise-address={self.host}",
                # the real node's pods reach the API through the `kubernetes` Service, whose endpoint is the host
                f"--endpoint-reconciler-type={'lease' if self.config.real_node else 'none'}",
                f"--tls-cert-file={p['apiserver.crt']}",
                f"--tls-private-key-file={p['apiserver.key']}",
                f"--client-ca-file={p['ca.crt']}",
                "--authorization-mode=RBAC",
                f"--kubelet-certificate-authority={p['ca.crt']}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={p['apiserver-kubelet-client.crt']}",
                f"--kubelet-client-key={p['apiserver-kubelet-client.key']}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={p['sa.pub']}",
                f"--service-account-signing-key-file={p['sa.key']}",
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                f"--feature-gates={FEATURE_GATES}",
                f"--runtime-config={RUNTIME_CONFIG}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "-v=1",
            ],
        )
        procs.wait_until(
            lambda: procs.http_ok(f"{self.api_url}/readyz", context=self._tls_context()),
            timeout=120,
            what="kube-apiserver",
            proc=proc,
            log=log,
            interval=0.2,
        )

    def _component_flags(self, name: str) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.state['ports'][name]}",
            f"--cert-dir={self.workdir / (name + '-certs')}",
        ]

    def _wait_healthz(self, name: str, proc, log) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # its own self-signed serving cert
        url = f"https://127.0.0.1:{self.state['ports'][name]}/healthz"
        procs.wait_until(lambda: procs.http_ok(url, context=ctx), timeout=60, what=name, proc=proc, log=log)

    def _start_scheduler(self, binary: Path) -> None:
        self.state["ports"]["scheduler"] = procs.free_port()
        cfg = self.workdir / "scheduler.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        flags = [f for f in self._component_flags("scheduler") if not f.startswith("--kubeconfig")]
        proc, log = self._spawn(
            "scheduler", [str(binary), f"--config={cfg}", f"--feature-gates={FEATURE_GATES}", *flags]
        )
        self._wait_healthz("scheduler", proc, log)

    def _start_controller_manager(self, binary: Path) -> None:
        self.state["ports"]["controller-manager"] = procs.free_port()
        proc, log = self._spawn(
            "controller-manager",
            [
                str(binary),
                *self._component_flags("controller-manager"),
                "--leader-elect=false",
                f"--controllers={CONTROLLERS}{REAL_NODE_CONTROLLERS if self.config.real_node else ''}",
                f"--root-ca-file={self.pki['ca.crt']}",
                f"--service-account-private-key-file={self.pki['sa.key']}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--concurrent-gc-syncs=10",
            ],
        )
        self._wait_healthz("controller-manager", proc, log)

    def _start_kubelet(self) -> None:
        c = self.config
        ready = self.workdir / "kubelet.ready"
        ready.unlink(missing_ok=True)
        proc, log = self._spawn(
            "kubelet",
            [
                sys.executable,
                "-m",
                "devcluster.kubelet",
                "--workdir",
                str(self.workdir),
                "--node-gpus",
                ",".join(map(str, c.gpus_by_node())),
                "--cpu",
                c.node_cpu,
                "--memory",
                c.node_memory,
                "--pods",
                str(c.node_pods),
            ],
            env={**os.environ, "PYTHONPATH": _package_parent(), "PATH": _image_path()},
        )
        procs.wait_until(ready.exists, timeout=60, what="process kubelet", proc=proc, log=log)


def _image_path() -> str:
    """PATH for pod processes: this interpreter's folder first, standing for the image's ``python``."""
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _package_parent() -> str:
    parent = str(Path(__file__).resolve().parent.parent)
    existing = os.environ.get("PYTHONPATH")
    return f"{parent}{os.pathsep}{existing}" if existing else parent
