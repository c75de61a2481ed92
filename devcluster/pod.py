"""One pod on the process kubelet: its containers as local processes, its
status, its GPUs and its graceful deletion.

Created by :class:`devcluster.kubelet.ProcessKubelet` for each pod bound to
one of its nodes; each :class:`PodWorker` is a thread that owns that pod until
its final delete. Containers run in a private mount namespace (``unshare``)
where volumes are bind-mounted at their ``mountPath`` (parents first, each
host path held open from before the first mount) and a per-container file at
``terminationMessagePath``, so the process cannot tell it is not in a
container; the working directory is ``workingDir`` (``/`` by default), and a pod with ``hostAliases`` gets its own
``/etc/hosts`` (the host's, with the aliases), as the kubelet writes one.

Init containers run as the kubelet runs them: each regular one to its end, in order, before the next (a failure
ends a ``restartPolicy: Never`` pod as Failed); a native sidecar (``restartPolicy: Always``) starts in its turn,
after its ``exec`` startup probe passes when it has one, and runs beside the pod's containers until they have all
ended, then gets SIGTERM (Kubernetes 1.29's sidecar containers).
"""

from __future__ import annotations

import logging
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes import client

from . import podenv, procs
from .nodes import GPU_RESOURCE, now_rfc3339

log = logging.getLogger("devcluster.pod")
MESSAGE_LIMIT = 4096
RESTART_BACKOFF = (1, 2, 4, 8, 10)


def can_isolate_mounts() -> bool:
    """Whether ``unshare --mount`` works here (root, or unprivileged user namespaces)."""
    try:
        return subprocess.run(_unshare_prefix() + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _unshare_prefix() -> list[str]:
    prefix = ["unshare", "--mount", "--propagation", "private"]
    return prefix if os.geteuid() == 0 else prefix[:1] + ["--user", "--map-root-user"] + prefix[1:]


def _mount_script(mounts: list[tuple[Path, str, bool]], workdir: str) -> str:
    """Bash script that bind-mounts each (host path, mountPath, readOnly) and then ``cd workdir; exec "$@"``.

    Every host path is opened as a file descriptor before the first mount and bound through
    ``/proc/self/fd/N``, so a mountPath that covers another mount's host path (an emptyDir at ``/tmp``
    while the cluster's folder is under ``/tmp``) cannot hide or replace it. Mounts go shallowest
    mountPath first, so a parent volume never covers a child mounted inside it (as containerd orders them).
    """
    ordered = sorted(mounts, key=lambda m: len(Path(m[1]).parts))
    lines = ["set -e"] + [f"exec {{src{i}}}<{shlex.quote(str(src))}" for i, (src, _, _) in enumerate(ordered)]
    for i, (src, dst, ro) in enumerate(ordered):
        q_dst = shlex.quote(dst)
        make = (
            f"mkdir -p {q_dst}"
            if os.path.isdir(src)
            else f'mkdir -p "$(dirname {q_dst})"; [ -e {q_dst} ] || touch {q_dst}'
        )
        lines += [make, f"mount --bind /proc/self/fd/$src{i} {q_dst}", f"exec {{src{i}}}<&-"]
        if ro:
            lines.append(f"mount -o remount,bind,ro {q_dst}")
    return "\n".join(lines + [f"mkdir -p {shlex.quote(workdir)}", f"cd {shlex.quote(workdir)}", 'exec "$@"'])


class MountPoints:
    """The folders and files a container's mounts need on the host that did not exist before (a pod mounting its
    service account token creates ``/var/run/secrets/kubernetes.io/...``): each is held while a pod that mounts
    there runs, and removed, where still empty, once the last such pod ended, so no pod leaves the host's root with
    paths that programs test for (Kubeflow's SDKs read the namespace file when ``/var/run/secrets/kubernetes.io``
    exists). Shared by every pod of a kubelet."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[Path, int] = {}  # topmost created path -> pods holding it

    def hold(self, targets: list[str]) -> list[Path]:
        """Hold the topmost missing ancestor of each target (the path a ``mkdir -p`` or ``touch`` creates)."""
        held = []
        with self._lock:
            for target in targets:
                path = Path(target)
                top = next((p for p in (path, *path.parents) if p in self._held), None)
                if top is None:
                    if path.exists():
                        continue  # there before: not ours
                    top = path
                    while not top.parent.exists():
                        top = top.parent
                self._held[top] = self._held.get(top, 0) + 1
                held.append(top)
        return held

    def release(self, held: list[Path]) -> None:
        """Let go of what :meth:`hold` gave; a path no pod holds any more is removed where empty."""
        with self._lock:
            for top in held:
                self._held[top] -= 1
                if self._held[top]:
                    continue
                del self._held[top]
                _remove_empty(top)


def _remove_empty(top: Path) -> None:
    """Remove ``top`` and what is below it, bottom-up, leaving any folder or file that is not empty."""
    if top.is_dir() and not top.is_symlink():
        for child in top.iterdir():
            _remove_empty(child)
        try:
            top.rmdir()
        except OSError:
            pass
    elif top.is_file() and top.stat().st_size == 0:
        top.unlink(missing_ok=True)


class GpuAllocator:
    """Hands out a node's GPU ids to running pods, each id to one pod at a time."""

    def __init__(self, count: int):
        self._free = list(range(count))
        self._lock = threading.Lock()

    def allocate(self, n: int) -> list[int] | None:
        """Take ``n`` free ids (lowest first), or None when fewer are free."""
        with self._lock:
            if n > len(self._free):
                return None
            taken, self._free = self._free[:n], self._free[n:]
            return taken

    def release(self, ids: list[int]) -> None:
        """Give ``ids`` back (an empty list is a no-op)."""
        with self._lock:
            self._free = sorted(set(self._free) | set(ids))


def _covers_the_image(mount_path: str) -> bool:
    """Whether a volume at ``mount_path`` would hide what stands for the pod's image: this interpreter,
    its environment or the checkout the pods import from."""
    target = Path(mount_path)
    image = (Path(sys.prefix), Path(sys.executable).parent, Path(__file__).resolve().parent.parent)
    return any(path == target or target in path.parents for path in image)


def gpu_request(pod: dict) -> int:
    """Total ``nvidia.com/gpu`` the pod's containers ask for (limits win, as for extended resources)."""
    total = 0
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        total += int((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0)
    return total


class Container:
    """One running (or finished) container process and its status."""

    def __init__(self, spec: dict, pod_dir: Path):
        self.spec = spec
        self.name = spec["name"]
        self.log_path = pod_dir / f"{self.name}.log"
        self.message_path = pod_dir / f"{self.name}.termination-log"
        self.proc: subprocess.Popen | None = None
        self.started_at: str | None = None
        self.restarts = 0
        self.state: dict = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict = {}

    @property
    def exited(self) -> bool:
        return "terminated" in self.state

    def start(self, argv: list[str], env: dict, mounts: list[tuple[Path, str, bool]], isolate: bool) -> None:
        """Start ``argv`` with ``mounts`` (host path, mountPath, readOnly) in place.

        With ``isolate``, ``argv`` runs under ``unshare --mount`` behind a bash script from :func:`_mount_script`;
        without it, the mounts are not made and only the working directory is honoured (when it exists).
        """
        self.message_path.write_bytes(b"")
        workdir = self.spec.get("workingDir") or "/"
        target_msg = self.spec.get("terminationMessagePath") or "/dev/termination-log"
        if isolate:
            script = _mount_script(mounts + [(self.message_path, target_msg, False)], workdir)
            argv = _unshare_prefix() + ["bash", "-c", script, "bash"] + argv
            cwd = None
        else:
            cwd = workdir if os.path.isdir(workdir) else None
        self.proc = procs.spawn(argv, self.log_path, env=env, cwd=cwd)
        self.started_at = now_rfc3339()
        self.state = {"running": {"startedAt": self.started_at}}

    def finish(self, returncode: int) -> None:
        """Record the exit: code (128+signal when killed), reason and termination message."""
        code = returncode if returncode >= 0 else 128 - returncode
        message = (
            self.message_path.read_bytes()[:MESSAGE_LIMIT].decode(errors="replace")
            if self.message_path.exists()
            else ""
        )
        if not message and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = self.log_path.read_bytes().decode(errors="replace").splitlines()[-80:]
            message = "\n".join(lines)[-2048:]
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"process://{self.proc.pid}",
        }
        if message:
            term["message"] = message
        self.state = {"terminated": term}

    def status(self) -> dict:
        """This container's entry of the pod's ``status.containerStatuses``."""
        image = self.spec.get("image", "")
        st = {
            "name": self.name,
            "image": image,
            "imageID": f"process://{image}",
            "restartCount": self.restarts,
            "started": "running" in self.state,
            "ready": "running" in self.state,
            "state": self.state,
        }
        if self.proc is not None:
            st["containerID"] = f"process://{self.proc.pid}"
        if self.last_state:
            st["lastState"] = self.last_state
        return st


class PodWorker(threading.Thread):
    """Runs one pod from bind to final delete."""

    def __init__(self, kubelet, pod: dict, gpus: GpuAllocator):
        super().__init__(daemon=True, name=f"pod-{pod['metadata']['name']}")
        self.kubelet = kubelet
        self.pod = pod
        self.meta = pod["metadata"]
        self.gpus = gpus
        self.gpu_ids: list[int] = []
        self.pod_dir = kubelet.workdir / "pods" / f"{self.meta['namespace']}_{self.meta['name']}"
        self.containers = [Container(c, self.pod_dir) for c in pod["spec"]["containers"]]
        self.init_containers = [Container(c, self.pod_dir) for c in pod["spec"].get("initContainers") or ()]
        self.events: queue.Queue = queue.Queue()
        self.deleting: float | None = None
        self.phase = "Pending"
        self.message = ""
        self.reason = ""
        self.volumes: dict[str, Path] = {}
        self.mount_points: list[Path] = []  # held in kubelet.mount_points until the pod's thread ends
        self._conditions: dict[str, tuple[str, str]] = {}  # type -> (status, lastTransitionTime)

    # ----- called from the watch thread ----------------------------------------------------
    def terminate(self, grace: float) -> None:
        """Begin graceful deletion with ``grace`` seconds (once; a shorter grace later wins)."""
        if self.deleting is None or grace < self.deleting:
            self.deleting = grace
            self.events.put(("delete", grace))

    def kill_processes(self, grace: float) -> None:
        """Stop every running container's process group, the pod's containers before its init containers (its
        sidecars): SIGTERM, then SIGKILL after ``grace`` seconds."""
        for c in [*self.containers, *reversed(self.init_containers)]:
            if c.proc is not None and c.proc.poll() is None:
                procs.stop_pid(c.proc.pid, timeout=grace, group=True)

    # ----- the pod's own thread ------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - one broken pod must not take the kubelet down
            log.exception("pod %s/%s: worker failed", self.meta["namespace"], self.meta["name"])
            self.kill_processes(grace=1)
        finally:
            self.gpus.release(self.gpu_ids)
            self.kubelet.mount_points.release(self.mount_points)
            self.kubelet.forget(self.meta["uid"])

    def _run(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        env_by_container = self._resolve_config()
        if env_by_container is None:  # deleted while waiting for its config
            self._final_delete()
            return
        needed = gpu_request(self.pod)
        ids = self.gpus.allocate(needed)
        if ids is None:
            self.phase, self.reason = "Failed", "UnexpectedAdmissionError"
            self.message = f"Allocate failed due to requested number of devices unavailable for {GPU_RESOURCE}"
            self._write_status()
            return
        self.gpu_ids = ids
        if not self._initialize(env_by_container):
            self.gpus.release(self.gpu_ids)
            self.gpu_ids = []
            self._write_status()
            if self.deleting is not None:
                self._final_delete()
            return
        for c in self.containers:
            self._start(c, env_by_container[c.name])
        self.phase = "Running"
        self._write_status()
        self._supervise(env_by_container)
        self._stop_sidecars()
        self.gpus.release(self.gpu_ids)
        self.gpu_ids = []
        self._write_status()
        if self.deleting is not None:
            self._final_delete()

    def _resolve_config(self) -> dict[str, dict] | None:
        """Resolve env and volumes, retrying while a reference is missing (CreateContainerConfigError)."""
        base = {
            **podenv.image_env(),
            "HOSTNAME": self.meta["name"],
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.kubelet.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.kubelet.api_port),
        }
        while self.deleting is None:
            try:
                self.volumes = podenv.prepare_volumes(self.kubelet.core, self.pod, self.pod_dir)
                return {
                    c.name: podenv.container_env(self.kubelet.core, self.pod, c.spec, base)
                    for c in [*self.init_containers, *self.containers]
                }
            except podenv.ConfigError as exc:
                for c in self.containers:
                    c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self._write_status()
                try:
                    self.events.get(timeout=2)
                except queue.Empty:
                    pass
        return None

    def _start(self, c: Container, env: dict) -> None:
        env = dict(env)
        if self.gpu_ids:
            env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpu_ids))
        argv = [podenv.expand(a, env) for a in (c.spec.get("command") or []) + (c.spec.get("args") or [])]
        if not argv:
            raise RuntimeError(f"container {c.name}: the process kubelet needs an explicit command")
        mounts = []
        for m in c.spec.get("volumeMounts") or []:
            src = self.volumes[m["name"]]
            if m.get("subPath"):
                src = src / m["subPath"]
                src.mkdir(parents=True, exist_ok=True)
            if _covers_the_image(m["mountPath"]):
                # the "image" is this host's interpreter and checkout: a volume over their folder (an
                # emptyDir at /tmp with the checkout under /tmp) would hide them, so the process gets the
                # volume's folder as its TMPDIR (what programs use /tmp through) and HOME where that was it
                if m["mountPath"].rstrip("/") == "/tmp":
                    env["TMPDIR"] = str(src)
                    if env.get("HOME", "").rstrip("/") == "/tmp":
                        env["HOME"] = str(src)
                continue
            mounts.append((src, m["mountPath"], bool(m.get("readOnly"))))
        aliases = self.pod["spec"].get("hostAliases") or ()
        if aliases and self.kubelet.isolate_mounts:  # the kubelet writes a pod's /etc/hosts: its own, with these
            hosts = self.pod_dir / "etc-hosts"
            lines = [f"{a['ip']}\t{' '.join(a.get('hostnames') or ())}" for a in aliases]
            hosts.write_text(Path("/etc/hosts").read_text() + "\n# the pod's hostAliases\n" + "\n".join(lines) + "\n")
            mounts.append((hosts, "/etc/hosts", True))
        if self.kubelet.isolate_mounts:
            self.mount_points += self.kubelet.mount_points.hold(
                [m[1] for m in mounts] + [c.spec.get("terminationMessagePath") or "/dev/termination-log"]
            )
        c.start(argv, env, mounts, self.kubelet.isolate_mounts)
        threading.Thread(target=lambda: self.events.put(("exit", c, c.proc.wait())), daemon=True).start()

    def _initialize(self, env_by_container: dict) -> bool:
        """Run the init containers in order; False when the pod ended before its containers could start (an init
        container failed, or the pod was deleted)."""
        for c in self.init_containers:
            if self.deleting is not None:
                return False
            self._start(c, env_by_container[c.name])
            self._write_status()
            if c.spec.get("restartPolicy") == "Always":  # a sidecar: on once started (and its probe passes)
                if not self._probe(c, env_by_container[c.name]):
                    self.kill_processes(grace=1)
                    self.phase = "Failed"
                    return False
                continue
            while True:
                kind, *rest = self.events.get()
                if kind == "delete":
                    self.kill_processes(rest[0])
                    continue
                done, code = rest
                done.finish(code)
                if done is c:
                    break
            self._write_status()
            if code != 0:
                self.kill_processes(grace=1)  # the sidecars started before it
                self.phase = "Failed"
                return False
        return True

    def _probe(self, c: Container, env: dict) -> bool:
        """Wait for ``c``'s ``exec`` startup probe to pass (run here, with its environment); True without one."""
        probe = (c.spec.get("startupProbe") or {}).get("exec")
        if not probe:
            return True
        settings = c.spec["startupProbe"]
        for _ in range(int(settings.get("failureThreshold", 3))):
            if self.deleting is not None or c.proc.poll() is not None:
                return False
            if subprocess.run(probe["command"], env=env, capture_output=True, timeout=10).returncode == 0:
                return True
            time.sleep(float(settings.get("periodSeconds", 10)))
        return False

    def _stop_sidecars(self) -> None:
        """The pod's containers have all ended: SIGTERM its sidecars, last started first, and wait for them."""
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        for c in reversed(self.init_containers):
            if c.proc is not None and c.proc.poll() is None:
                procs.stop_pid(c.proc.pid, timeout=grace, group=True)
        while not all(c.exited for c in self.init_containers if c.proc is not None):
            kind, *rest = self.events.get()
            if kind == "exit":
                rest[0].finish(rest[1])

    def _supervise(self, env_by_container: dict) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while not all(c.exited for c in self.containers):
            kind, *rest = self.events.get()
            if kind == "delete":
                grace = rest[0]
                for c in self.containers:  # a container waiting to restart stays at its last exit
                    if "waiting" in c.state and c.last_state:
                        c.state = c.last_state
                threading.Thread(target=self.kill_processes, args=(grace,), daemon=True).start()
                continue
            c, code = rest
            c.finish(code)
            if self.deleting is None and (policy == "Always" or (policy == "OnFailure" and code != 0)):
                delay = RESTART_BACKOFF[min(c.restarts, len(RESTART_BACKOFF) - 1)]
                c.last_state, c.restarts = c.state, c.restarts + 1
                c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {delay}s restarting"}}
                self._write_status()
                try:
                    item = self.events.get(timeout=delay)
                    self.events.put(item)
                except queue.Empty:
                    pass
                if self.deleting is None:
                    self._start(c, env_by_container[c.name])
                    self._write_status()
            elif not all(c.exited for c in self.containers):
                self._write_status()
        codes = [c.state["terminated"]["exitCode"] for c in self.containers]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        self._write_status()  # the containers' end, while the sidecars finish

    def _write_status(self) -> None:
        running = self.phase == "Running" and all("running" in c.state for c in self.containers)
        now = now_rfc3339()
        conds = [c for c in (self.pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
        started = self.phase != "Pending" or any(c.proc for c in [*self.init_containers, *self.containers])
        for ctype, ok in (
            ("PodReadyToStartContainers", started),
            ("Initialized", self.phase != "Pending" or not self.init_containers),
            ("ContainersReady", running),
            ("Ready", running),
        ):
            value = "True" if ok else "False"
            if self._conditions.get(ctype, (None,))[0] != value:  # the time moves only when the status flips
                self._conditions[ctype] = (value, now)
            conds.append({"type": ctype, "status": value, "lastTransitionTime": self._conditions[ctype][1]})
        status = {
            "phase": self.phase,
            "conditions": conds,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": (self.pod.get("status") or {}).get("startTime") or now,
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        self.pod.setdefault("status", {})["startTime"] = status["startTime"]
        try:
            podenv.drain(
                self.kubelet.core.patch_namespaced_pod_status(
                    self.meta["name"], self.meta["namespace"], {"status": status}, _preload_content=False
                )
            )
        except client.ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s: status write failed: %s", self.meta["name"], exc.reason)

    def _final_delete(self) -> None:
        """Delete with grace 0 and a UID precondition, as the kubelet's status manager does."""
        try:
            podenv.drain(
                self.kubelet.core.delete_namespaced_pod(
                    self.meta["name"],
                    self.meta["namespace"],
                    _preload_content=False,
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.meta["uid"]}},
                )
            )  # a body wins over query
            log.info("pod %s/%s: deleted", self.meta["namespace"], self.meta["name"])
        except client.ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s: final delete failed: %s %s", self.meta["name"], exc.status, exc.body)
