"""The Pod Security Standards a trial pod must meet, and what in it breaks them.

Trial pods meet the ``restricted`` level as :func:`kubetune_operator.builders.build_pod` makes
them; an Experiment's ``spec.template`` (pod ``securityContext``, ``volumes``) can loosen that. The
operator's ``trials.pod_security_level`` setting (the chart's ``trials.podSecurityLevel``, default
``restricted``) is the loosest level an Experiment may ask for: ``SpecIntake.parse`` (``spec_intake.py``)
builds a sample pod and refuses the spec (``Ready=False``, ``InvalidSpec``) with every
:func:`violations` line. Only what a template can change is checked (the fields the levels of the
Kubernetes "Pod Security Standards" page name for the pod spec, its volumes and the trial container).
"""

from __future__ import annotations

from typing import Mapping

#: The levels, strictest first (Kubernetes Pod Security Standards).
LEVELS = ("restricted", "baseline", "privileged")

# Pod Security Standards, baseline: sysctls allowed, seLinux types allowed; restricted: volume types allowed.
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def violations(pod: Mapping, level: str) -> list[str]:
    """What in ``pod`` breaks ``level``.

    Args:
        pod: a Pod manifest (dict).
        level: one of :data:`LEVELS`.

    Returns:
        One line per broken rule, naming the field (empty: the pod meets ``level``).

    Raises:
        ValueError: an unknown ``level``.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r}; one of {', '.join(LEVELS)}")
    if level == "privileged":
        return []
    spec = pod.get("spec") or {}
    pod_sc = spec.get("securityContext") or {}
    containers = spec.get("containers") or []
    found = [f"spec.{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    volumes = spec.get("volumes") or []
    found += [f"volume {v.get('name')!r} is a hostPath" for v in volumes if "hostPath" in v]
    found += [
        f"securityContext.sysctls: {s.get('name')} is not a safe sysctl"
        for s in pod_sc.get("sysctls") or ()
        if s.get("name") not in _SAFE_SYSCTLS
    ]
    contexts = [("securityContext", pod_sc)] + [
        (f"container {c.get('name')!r} securityContext", c.get("securityContext") or {}) for c in containers
    ]
    for where, sc in contexts:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"{where}.seccompProfile.type: Unconfined")
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in _SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"{where}.seLinuxOptions: {selinux}")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}.windowsOptions.hostProcess: true")
        if sc.get("privileged"):
            found.append(f"{where}.privileged: true")
        added = set((sc.get("capabilities") or {}).get("add") or ())
        if added - _BASELINE_CAPABILITIES:
            found.append(f"{where}.capabilities.add: {sorted(added - _BASELINE_CAPABILITIES)}")
    if level == "baseline":
        return found
    found += [
        f"volume {v.get('name')!r} is of a type the restricted level does not allow"
        for v in volumes
        if "hostPath" not in v and not set(v) - {"name"} <= _RESTRICTED_VOLUMES
    ]
    for name, sc in contexts[1:]:
        effective = {**pod_sc, **sc}
        if effective.get("runAsNonRoot") is not True:
            found.append(f"{name}: runAsNonRoot is not true (pod or container)")
        if effective.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser is 0 (root)")
        if (effective.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile.type is not RuntimeDefault or Localhost")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}.allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()) or set(caps.get("add") or ()) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}.capabilities: must drop ALL and add at most NET_BIND_SERVICE")
    return found
