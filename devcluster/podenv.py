"""What a container sees, resolved as a kubelet would: its environment
(``env`` with ``value``/``valueFrom``, ``envFrom``) and its volumes
(emptyDir, hostPath, secret, configMap, projected service-account tokens).

Called by :mod:`devcluster.kubelet` before it starts a container. Errors a
real kubelet reports as ``CreateContainerConfigError`` raise
:class:`ConfigError`, so the pod stays Pending with that reason and is retried.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

from kubernetes import client

#: Variables of the kubelet's own environment that stand for the image's (where ``python`` is).
IMAGE_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "HOME", "VIRTUAL_ENV")


def drain(response) -> None:
    """Read a raw (``_preload_content=False``) response to its end, so urllib3 returns the connection to
    its pool (an unread one is dropped, and the next call pays a new TLS handshake)."""
    response.data  # noqa: B018 - reading it is the point


class ConfigError(Exception):
    """A referenced Secret, ConfigMap or key is missing (the kubelet's CreateContainerConfigError)."""


def _read(core: client.CoreV1Api, kind: str, namespace: str, name: str, optional: bool) -> dict | None:
    try:
        raw = (core.read_namespaced_secret if kind == "secret" else core.read_namespaced_config_map)(
            name, namespace, _preload_content=False
        )
    except client.ApiException as exc:
        if exc.status == 404:
            if optional:
                return None
            raise ConfigError(f'{kind} "{name}" not found') from None
        raise
    obj = json.loads(raw.data)
    if kind == "secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _field(pod: dict, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if path not in values:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return values[path] or status.get(path, "")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of ``value`` from ``env`` (unknown names stay as written);
    ``$$`` is a literal ``$``."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


def container_env(core: client.CoreV1Api, pod: dict, container: dict, base: dict[str, str]) -> dict[str, str]:
    """Return the process environment of ``container``: ``base``, then ``envFrom``, then ``env``.

    Raises:
        ConfigError: a non-optional reference is missing.
    """
    ns = pod["metadata"]["namespace"]
    env = dict(base)
    for src in container.get("envFrom") or []:
        kind, ref = ("secret", src["secretRef"]) if "secretRef" in src else ("configmap", src["configMapRef"])
        data = _read(core, kind, ns, ref["name"], ref.get("optional", False)) or {}
        env.update({src.get("prefix", "") + k: v.decode() for k, v in data.items()})
    for var in container.get("env") or []:
        if "valueFrom" not in var:
            env[var["name"]] = expand(var.get("value", ""), env)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[var["name"]] = _field(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            res = vf["resourceFieldRef"]["resource"]
            group, name = res.split(".", 1)
            env[var["name"]] = str(((container.get("resources") or {}).get(group) or {}).get(name, "0"))
        else:
            kind, ref = ("secret", vf["secretKeyRef"]) if "secretKeyRef" in vf else ("configmap", vf["configMapKeyRef"])
            data = _read(core, kind, ns, ref["name"], ref.get("optional", False))
            if data is None:
                continue
            if ref["key"] not in data:
                if ref.get("optional", False):
                    continue
                raise ConfigError(f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}")
            env[var["name"]] = data[ref["key"]].decode()
    return env


def _write_items(target: Path, data: dict[str, bytes], items: list | None, mode: int = 0o644) -> None:
    chosen = {i["key"]: i["path"] for i in items} if items else {k: k for k in data}
    for key, rel in chosen.items():
        if key not in data:
            raise ConfigError(f"key {key} not found")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])
        path.chmod(mode)


def _service_account_token(core: client.CoreV1Api, pod: dict, source: dict) -> bytes:
    meta = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [source["audience"]] if source.get("audience") else None,
            "expirationSeconds": source.get("expirationSeconds", 3607),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    raw = core.create_namespaced_service_account_token(
        pod["spec"].get("serviceAccountName", "default"), meta["namespace"], body, _preload_content=False
    )
    return json.loads(raw.data)["status"]["token"].encode()


def prepare_volumes(core: client.CoreV1Api, pod: dict, pod_dir: Path) -> dict[str, Path]:
    """Materialise the pod's volumes under ``pod_dir/volumes`` and return ``{volume name: host path}``.

    Raises:
        ConfigError: a referenced Secret or ConfigMap (or key) is missing, or a volume type is unsupported.
    """
    ns = pod["metadata"]["namespace"]
    paths: dict[str, Path] = {}
    for vol in pod["spec"].get("volumes") or []:
        name, target = vol["name"], pod_dir / "volumes" / vol["name"]
        if "hostPath" in vol:
            paths[name] = Path(vol["hostPath"]["path"])
            continue
        target.mkdir(parents=True, exist_ok=True)
        paths[name] = target
        if "emptyDir" in vol:
            continue
        if "secret" in vol or "configMap" in vol:
            kind, src = ("secret", vol["secret"]) if "secret" in vol else ("configmap", vol["configMap"])
            ref = src.get("secretName") or src.get("name")
            data = _read(core, kind, ns, ref, src.get("optional", False)) or {}
            _write_items(target, data, src.get("items"), src.get("defaultMode", 0o644))
        elif "projected" in vol:
            for source in vol["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    sat = source["serviceAccountToken"]
                    _write_items(
                        target, {"t": _service_account_token(core, pod, sat)}, [{"key": "t", "path": sat["path"]}]
                    )
                elif "configMap" in source or "secret" in source:
                    kind, src = (
                        ("secret", source["secret"]) if "secret" in source else ("configmap", source["configMap"])
                    )
                    data = _read(core, kind, ns, src["name"], src.get("optional", False)) or {}
                    _write_items(target, data, src.get("items"))
                elif "downwardAPI" in source:
                    data = {
                        i["path"]: _field(pod, i["fieldRef"]["fieldPath"]).encode()
                        for i in source["downwardAPI"].get("items", [])
                        if "fieldRef" in i
                    }
                    _write_items(target, data, None)
        else:
            raise ConfigError(
                f"volume {name}: unsupported type (process kubelet supports emptyDir, hostPath, "
                "secret, configMap, projected)"
            )
    return paths


def image_env() -> dict[str, str]:
    """The part of the kubelet's environment that stands for the container image's."""
    return {k: os.environ[k] for k in IMAGE_ENV if k in os.environ}
