"""The real node: a kubelet with containerd, runc and CNI, kube-proxy, cluster DNS and a fake-GPU
device plugin, joined to the local control plane.

Called by :class:`devcluster.cluster.Cluster` when ``ClusterConfig.real_node`` is set (the
``realnode`` test fixtures, ``python -m devcluster up --real-node``). Where the process kubelet
(:mod:`devcluster.kubelet`) runs pods as local processes, this node runs them in containers from
images (:mod:`devcluster.images`), so what users' clusters enforce is enforced here: users and file
modes, read-only root filesystems, memory limits (OOMKilled), Service networking and DNS, the
kubelet's termination messages, evictions and device manager.

Network: a Linux bridge ``kubetune0`` with the gateway address :data:`GATEWAY` is made before the
API server starts, since the API server, moto (S3) and CoreDNS listen there for pods to reach them
(the kubelet's ``KUBE-FIREWALL`` drops pod traffic to 127.0.0.0/8). A ``FORWARD`` rule keeps pod
traffic on the bridge: nothing from a pod leaves the machine.

One real node per machine (port 10250, the bridge, the global ``KUBE-*`` iptables chains, the
kubelet's fixed device-plugin folder): :data:`LOCK` names the cluster that owns it, and
:func:`cleanup` removes what a crashed run left behind before a new node starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import yaml

from . import certs, images, nodebuild, procs

BRIDGE = "kubetune0"
POD_CIDR = "10.88.0.0/16"
GATEWAY = "10.88.0.1"
NODE_NAME = "kubetune-node"
KUBELET_PORT = 10250
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
LOCK = Path("/run/kubetune-realnode.json")
_CHAIN_PREFIXES = ("KUBE-", "CNI-", "KUBETUNE-")
_FORWARD_CHAIN = "KUBETUNE-NODE"


def unavailable_reason() -> str | None:
    """One line saying why this host cannot run the real node, or None when it can."""
    if os.geteuid() != 0:
        return "the real node needs root (containerd, runc, iptables, a bridge)"
    lacking = nodebuild.missing_host_programs() + images.missing_tools()
    if lacking:
        return "the real node needs these Debian packages: " + ", ".join(lacking)
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup file system at /sys/fs/cgroup"
    if not Path("/proc/sys/net/bridge").is_dir():
        subprocess.run(["modprobe", "br_netfilter"], capture_output=True)
        if not Path("/proc/sys/net/bridge").is_dir():
            return "the kernel has no bridge netfilter (br_netfilter)"
    return None


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def _owner() -> dict | None:
    """The cluster that holds the node now (its kubelet alive), or None."""
    try:
        owner = json.loads(LOCK.read_text())
    except (FileNotFoundError, ValueError):
        return None
    pid = owner.get("kubeletPid")
    if pid and procs.pid_alive(pid) and procs.start_time(pid) == owner.get("kubeletStart"):
        return owner
    return None


def _iptables_cleanup() -> None:
    """Remove every chain and rule of the node (kubelet, kube-proxy, CNI portmap, ours) from each table."""
    for table in ("filter", "nat", "mangle"):
        saved = _sh("iptables-save", "-t", table, check=False).stdout
        if not any(p in saved for p in _CHAIN_PREFIXES):
            continue
        kept = []
        for line in saved.splitlines():
            words = line.split()
            if line.startswith(":") and line[1:].startswith(_CHAIN_PREFIXES):
                continue
            if line.startswith("-A") and any(w.startswith(_CHAIN_PREFIXES) for w in words[1:]):
                continue
            kept.append(line)
        subprocess.run(["iptables-restore", "-T", table], input="\n".join(kept) + "\n", text=True, check=True)


def _kill_tree(proc: psutil.Process) -> None:
    for p in [*proc.children(recursive=True), proc]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def cleanup(node_dir: Path | None = None) -> None:
    """Remove what a real node leaves on the host: container processes, mounts, network namespaces,
    iptables chains, the bridge, pod cgroups and the device-plugin sockets. Idempotent.

    Args:
        node_dir: the node's folder, whose mounts are removed (every earlier node's when None: any
            mount of a ``devcluster-*/node`` folder).
    """
    shim = nodebuild.node_bin_dir() / "containerd-shim-runc-v2"
    for p in psutil.process_iter(["exe", "name"]):
        try:
            if p.info["exe"] == str(shim) or p.info["name"] in ("containerd", "containerd-shim-runc-v2"):
                _kill_tree(p)
        except psutil.Error:
            pass
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    ours = [
        m
        for m in mounts
        if (node_dir is not None and m.startswith(str(node_dir)))
        or (node_dir is None and "/node/" in m and "devcluster-" in m)
        or m.startswith("/run/netns/cni-")
        or m.startswith(str(DEVICE_PLUGIN_DIR.parent / "pods"))
    ]
    for mount in sorted(set(ours), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    _iptables_cleanup()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _sh("ip", "link", "del", BRIDGE, check=False)
    for top in Path("/sys/fs/cgroup").glob("*/kubepods*"):
        for folder in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass
    if DEVICE_PLUGIN_DIR.is_dir():
        for entry in DEVICE_PLUGIN_DIR.iterdir():
            entry.unlink(missing_ok=True) if not entry.is_dir() else shutil.rmtree(entry, ignore_errors=True)


def release(workdir: Path) -> None:
    """Give up the node's lock if the cluster in ``workdir`` holds it (after :func:`cleanup`)."""
    try:
        owner = json.loads(LOCK.read_text())
    except (FileNotFoundError, ValueError):
        return
    if owner.get("workdir") == str(workdir) or _owner() is None:
        LOCK.unlink(missing_ok=True)


def prepare_network() -> None:
    """Make the bridge with the gateway address, turn on forwarding and bridge netfilter, and keep
    pod traffic on the bridge. Call before anything listens on :data:`GATEWAY`.

    Raises:
        RuntimeError: another cluster's real node runs on this machine, or a command failed.
    """
    owner = _owner()
    if owner:
        raise RuntimeError(
            f"a real node already runs on this machine (cluster in {owner['workdir']}); "
            f"stop it first: python -m devcluster --dir {owner['workdir']} down"
        )
    cleanup()
    _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    _sh("ip", "addr", "add", f"{GATEWAY}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        Path("/proc/sys", key).write_text("1")
    _sh("iptables", "-N", _FORWARD_CHAIN)
    _sh("iptables", "-A", _FORWARD_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")
    _sh("iptables", "-I", "FORWARD", "1", "-j", _FORWARD_CHAIN)


class RealNode:
    """The node's processes beside a :class:`devcluster.cluster.Cluster` (which spawns and stops them).

    Args:
        cluster: the cluster being started; its ``_spawn`` records each process in its state file.
        gpus: fake GPUs the device plugin advertises as ``nvidia.com/gpu`` (0: no plugin).
    """

    def __init__(self, cluster, gpus: int):
        self.cluster = cluster
        self.gpus = gpus
        self.dir = cluster.workdir / "node"
        self.bins = nodebuild.ensure_node_binaries()
        self.images: dict[str, images.Image] = {}
        self._commands: dict[str, tuple[list[str], dict | None]] = {}

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def start(self, api_url: str) -> None:
        """Start containerd (and load the images), the kubelet, kube-proxy, CoreDNS and the device plugin;
        return once the node is Ready and DNS answers.

        Raises:
            RuntimeError: a component exited or did not become ready (with its log tail).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        pki = self._pki()
        self.images = images.build_images()
        self._start_containerd()
        images.load_images(self.images, self.bins["ctr"], self.socket)
        self._bind_roles()
        kubelet = self._start_kubelet(api_url, pki)
        LOCK.write_text(
            json.dumps(
                {
                    "workdir": str(self.cluster.workdir),
                    "kubeletPid": kubelet.pid,
                    "kubeletStart": procs.start_time(kubelet.pid),
                }
            )
        )
        self._start_kube_proxy(api_url, pki)
        self._start_coredns()
        if self.gpus:
            self._start_device_plugin()
        self._wait_ready()

    def restart(self, name: str) -> None:
        """Stop one of the node's processes (``kubelet``, ``containerd``...) with SIGTERM and start it again
        with the same command, as a service manager restarts it; containers keep running meanwhile.

        Raises:
            RuntimeError: it did not become healthy again (with its log tail).
        """
        procs.stop_pid(self.cluster.state["pids"][name], timeout=30)
        argv, env = self._commands[name]
        proc, log = self._spawn(name, argv, env)
        if name == "kubelet":
            self._wait_kubelet(proc, log)
        elif name == "containerd":
            self._wait_containerd(proc, log)

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's main process through containerd, as the kernel's OOM killer or a crash ends
        it; the kubelet then restarts it as its pod's ``restartPolicy`` says.

        Args:
            container_id: the ID a pod's ``containerStatuses`` give (``containerd://<id>``, or ``<id>``).

        Raises:
            subprocess.CalledProcessError: containerd refused (no such running container).
        """
        task = container_id.split("://", 1)[-1]
        ctr = [str(self.bins["ctr"]), "--address", str(self.socket), "--namespace", "k8s.io"]
        subprocess.run(
            [*ctr, "tasks", "kill", "--signal", "SIGKILL", task], check=True, capture_output=True, timeout=30
        )

    def image(self, name: str) -> str:
        """The reference of a loaded image: ``runtime``, ``operator``, ``examples``, ``trial-python``, ``trial-shell``
        or ``pause``."""
        return self.images[name].ref

    # ----- pieces ------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict | None = None):
        self._commands[name] = (argv, env)
        return self.cluster._spawn(name, argv, env)

    def _pki(self) -> dict[str, Path]:
        ca = certs.CertificateAuthority.load(self.cluster.pki["ca.crt"], self.cluster.pki["ca.key"])
        out = {}
        for name, (cn, org, server) in {
            "node-client": (f"system:node:{NODE_NAME}", "system:nodes", False),
            "node-serving": (NODE_NAME, None, True),
            "kube-proxy": ("system:kube-proxy", None, False),
        }.items():
            cert, key = ca.issue(cn, org=org, server=server, ips=(GATEWAY,), dns=(NODE_NAME,))
            for suffix, data in ((".crt", cert), (".key", key)):
                path = self.dir / "pki" / f"{name}{suffix}"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o600)
                out[name + suffix] = path
        return out

    def _bind_roles(self) -> None:
        """RBAC-only authorization: the node's user gets ``system:node``, kube-proxy ``system:node-proxier``."""
        for name, role, kind, subject in (
            ("kubetune-devcluster-nodes", "system:node", "Group", "system:nodes"),
            ("kubetune-devcluster-kube-proxy", "system:node-proxier", "User", "system:kube-proxy"),
        ):
            self.cluster.kubectl(
                "create", "clusterrolebinding", name, f"--clusterrole={role}", f"--{kind.lower()}={subject}"
            )

    def _start_containerd(self) -> None:
        root = self.dir / "containerd"
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        cni_conf = self.dir / "cni"
        cni_conf.mkdir(exist_ok=True)
        (cni_conf / "10-kubetune.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "kubetune",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                                # Service IPs are routed to the host (kube-proxy's rules); the FORWARD
                                # rule of prepare_network drops anything else leaving the bridge
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.dir / "cni-ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )
        config.write_text(
            f"""version = 3
root = "{root / "root"}"
state = "{root / "state"}"

[grpc]
  address = "{self.socket}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{self.image("pause")}'

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  disable_apparmor = true
  # root here lacks CAP_SYS_RESOURCE: runc cannot give a container a negative OOM score
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '{shutil.which("runc")}'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{nodebuild.cni_bin_dir()}']
    conf_dir = '{cni_conf}'

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
"""
        )
        env = {**os.environ, "PATH": f"{nodebuild.node_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"}
        proc, log = self._spawn("containerd", [str(self.bins["containerd"]), "--config", str(config)], env=env)
        self._wait_containerd(proc, log)

    def _wait_containerd(self, proc, log) -> None:
        ctr = [str(self.bins["ctr"]), "--address", str(self.socket), "version"]
        procs.wait_until(
            lambda: subprocess.run(ctr, capture_output=True, timeout=5).returncode == 0,
            timeout=60,
            what="containerd",
            proc=proc,
            log=log,
            interval=0.3,
        )

    def _start_kubelet(self, api_url: str, pki: dict[str, Path]):
        resolv = self.dir / "resolv.conf"
        resolv.write_text("")  # pods resolve through the cluster DNS only; nothing outside is reachable
        config = self.dir / "kubelet.yaml"
        self.healthz_port = procs.free_port()
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": GATEWAY,
                    "port": KUBELET_PORT,
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": self.healthz_port,
                    "tlsCertFile": str(pki["node-serving.crt"]),
                    "tlsPrivateKeyFile": str(pki["node-serving.key"]),
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.cluster.pki["ca.crt"])},
                    },
                    "authorization": {"mode": "Webhook"},
                    "cgroupDriver": "cgroupfs",
                    "failCgroupV1": False,
                    "failSwapOn": False,
                    "containerRuntimeEndpoint": f"unix://{self.socket}",
                    "clusterDNS": [GATEWAY],
                    "clusterDomain": "cluster.local",
                    "resolvConf": str(resolv),
                    "podLogsDir": str(self.dir / "pod-logs"),
                    "serializeImagePulls": False,
                    # no registry to pull from again: never collect the loaded images
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "imagefs.available": "1%",
                        "nodefs.inodesFree": "1%",
                    },
                    "nodeStatusReportFrequency": "10s",
                    "protectKernelDefaults": False,
                }
            )
        )
        kubeconfig = certs.write_kubeconfig(
            self.dir / "kubelet.kubeconfig",
            api_url,
            self.cluster.pki["ca.crt"],
            pki["node-client.crt"],
            pki["node-client.key"],
            user="node",
        )
        proc, log = self._spawn(
            "kubelet",
            [
                str(self.bins["kubelet"]),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                f"--root-dir={self.dir / 'kubelet'}",
                "-v=1",
            ],
        )
        self._wait_kubelet(proc, log)
        return proc

    def _wait_kubelet(self, proc, log) -> None:
        procs.wait_until(
            lambda: procs.http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz"),
            timeout=90,
            what="kubelet",
            proc=proc,
            log=log,
            interval=0.3,
        )

    def _start_kube_proxy(self, api_url: str, pki: dict[str, Path]) -> None:
        kubeconfig = certs.write_kubeconfig(
            self.dir / "kube-proxy.kubeconfig",
            api_url,
            self.cluster.pki["ca.crt"],
            pki["kube-proxy.crt"],
            pki["kube-proxy.key"],
            user="node",
        )
        health = procs.free_port()
        config = self.dir / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "hostnameOverride": NODE_NAME,
                    "mode": "iptables",
                    "clusterCIDR": POD_CIDR,
                    # zeros: kube-proxy writes no conntrack sysctls (not allowed here)
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                    "healthzBindAddress": f"127.0.0.1:{health}",
                    "metricsBindAddress": f"127.0.0.1:{procs.free_port()}",
                }
            )
        )
        proc, log = self._spawn("kube-proxy", [str(self.bins["kube-proxy"]), f"--config={config}", "-v=1"])
        procs.wait_until(
            lambda: procs.http_ok(f"http://127.0.0.1:{health}/healthz"),
            timeout=60,
            what="kube-proxy",
            proc=proc,
            log=log,
        )

    def _start_coredns(self) -> None:
        health, ready = procs.free_port(), procs.free_port()
        corefile = self.dir / "Corefile"
        corefile.write_text(
            f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.cluster.kubeconfig} devcluster
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""
        )
        proc, log = self._spawn("coredns", [str(self.bins["coredns"]), "-conf", str(corefile)])
        procs.wait_until(
            lambda: procs.http_ok(f"http://127.0.0.1:{ready}/ready"), timeout=60, what="CoreDNS", proc=proc, log=log
        )

    def _start_device_plugin(self) -> None:
        procs.wait_until(
            (DEVICE_PLUGIN_DIR / "kubelet.sock").exists, timeout=60, what="the kubelet's device-plugin socket"
        )
        self._spawn("deviceplugin", [str(self.bins["deviceplugin"]), "-count", str(self.gpus)])

    def _wait_ready(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.cluster.api_client())

        def ready() -> bool:
            node = core.read_node(NODE_NAME)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            gpus = (node.status.allocatable or {}).get("nvidia.com/gpu", "0")
            return conditions.get("Ready") == "True" and int(gpus) == self.gpus

        log = self.cluster.workdir / "logs" / "kubelet.log"
        procs.wait_until(ready, timeout=120, what=f"node {NODE_NAME} Ready", log=log, interval=0.5)
