"""What the cluster showed when a cluster test failed, printed with its failure (issue 34).

A test against the local cluster or the real node that fails gets one more section in its report, right after
its traceback: the Experiments of its namespace (phase, conditions, trial counts), each Trial's phase, reason,
attempt, iteration and message, each pod's phase and container states (with the last log lines of a pod that did
not end), the namespace's last Warning events, and the tail of the operator's log (the
test's :class:`devcluster.operator.OperatorProcess`, or the chart's operator pod on the real node). So a flaky
failure in CI is diagnosed from CI's output alone. Tests without a cluster (``tests/unit``) use none of the
fixtures it reads and get nothing added. Reading the cluster is bounded (a few requests with a 10 s timeout
each) and never turns a failure into an error: what cannot be read is said in the section.
"""

from __future__ import annotations

import json

import pytest

GROUP, VERSION = "kubetune.io", "v1alpha1"
MAX_TRIALS, MAX_EVENTS, LOG_LINES = 40, 15, 40
MAX_PODS, POD_LOG_LINES = 20, 8
TIMEOUT_S = 10


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        text = cluster_state(item.funcargs)
        if text:
            report.sections.append(("kubetune: what the cluster showed at the failure", text))
    return report


def cluster_state(fixtures: dict) -> str:
    """The state of the test's namespace and operator, as text ("" for a test that used no cluster)."""
    namespace = fixtures.get("namespace") or fixtures.get("team")
    custom, core = fixtures.get("custom"), fixtures.get("core")
    lines: list[str] = []
    if isinstance(namespace, str) and custom is not None and core is not None:
        for part, api in ((_experiments, custom), (_trials, custom), (_pods, core), (_events, core)):
            try:
                lines += part(api, namespace)
            except Exception as exc:  # noqa: BLE001 - the section says what it could not read
                lines.append(f"({part.__name__[1:]} of {namespace} not read: {type(exc).__name__}: {exc})")
    lines += _operator_log(fixtures, core)
    return "\n".join(lines)


def _experiments(custom, namespace: str) -> list[str]:
    found = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", _request_timeout=TIMEOUT_S)
    lines = [f"Experiments in {namespace}: {len(found['items'])}"]
    for exp in found["items"]:
        status = exp.get("status", {})
        lines.append(f"  {exp['metadata']['name']}: phase={status.get('phase')} trials={status.get('trials')}")
        for cond in status.get("conditions", []):
            lines.append(f"    {cond.get('type')}={cond.get('status')} {cond.get('reason')}: {cond.get('message')}")
    return lines


def _trials(custom, namespace: str) -> list[str]:
    found = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials", _request_timeout=TIMEOUT_S)
    items = sorted(found["items"], key=lambda t: t["metadata"]["name"])
    lines = [f"Trials: {len(items)}" + (f" (the first {MAX_TRIALS})" if len(items) > MAX_TRIALS else "")]
    for trial in items[:MAX_TRIALS]:
        status = trial.get("status", {})
        keys = ("phase", "reason", "attempt", "iteration", "message")
        shown = {k: status[k] for k in keys if status.get(k) is not None}
        lines.append(f"  {trial['metadata']['name']}: {json.dumps(shown, default=str)[:300]}")
    return lines


def _pods(core, namespace: str) -> list[str]:
    found = core.list_namespaced_pod(namespace, _request_timeout=TIMEOUT_S)
    items = sorted(found.items, key=lambda p: p.metadata.name)
    lines = [f"Pods: {len(items)}" + (f" (the first {MAX_PODS})" if len(items) > MAX_PODS else "")]
    for pod in items[:MAX_PODS]:
        status = pod.status
        states = [
            f"{c.name}={_container_state(c.state)}"
            for c in (status.init_container_statuses or []) + (status.container_statuses or [])
        ]
        deleting = " deleting" if pod.metadata.deletion_timestamp else ""
        lines.append(f"  {pod.metadata.name}: {status.phase}{deleting} {' '.join(states)}")
        if status.phase in ("Pending", "Running"):  # what a pod that did not end was doing
            for c in status.container_statuses or []:
                if c.state and c.state.running:
                    raw = core.read_namespaced_pod_log(  # raw: the client's str of a log is repr(bytes)
                        pod.metadata.name,
                        namespace,
                        container=c.name,
                        tail_lines=POD_LOG_LINES,
                        _request_timeout=TIMEOUT_S,
                        _preload_content=False,
                    )
                    text = raw.data.decode("utf-8", "replace")
                    lines += [f"    {c.name}: {line[:200]}" for line in text.splitlines()]
    return lines


def _container_state(state) -> str:
    if state is None:
        return "?"
    if state.terminated:
        return f"terminated({state.terminated.exit_code},{state.terminated.reason})"
    if state.waiting:
        return f"waiting({state.waiting.reason})"
    return "running" if state.running else "?"


def _events(core, namespace: str) -> list[str]:
    found = core.list_namespaced_event(namespace, field_selector="type=Warning", _request_timeout=TIMEOUT_S)
    items = sorted(found.items, key=lambda e: str(e.last_timestamp or e.event_time or ""))[-MAX_EVENTS:]
    lines = [f"Warning events (the last {MAX_EVENTS}): {len(items)}"]
    lines += [f"  {e.involved_object.name}: {e.reason}: {(e.message or '')[:300]}" for e in items]
    return lines


def _operator_log(fixtures: dict, core) -> list[str]:
    operator = fixtures.get("operator")
    log = getattr(operator, "log", None)
    try:
        if log is not None:
            tail = log.read_text(errors="replace").splitlines()[-LOG_LINES:]
            return [f"operator log {log} (the last {LOG_LINES} lines):", *tail]
        if "release" in fixtures and core is not None:
            from devcluster.operator import OPERATOR_NAMESPACE

            pods = core.list_namespaced_pod(OPERATOR_NAMESPACE, _request_timeout=TIMEOUT_S).items
            lines = []
            for pod in pods:
                raw = core.read_namespaced_pod_log(
                    pod.metadata.name,
                    OPERATOR_NAMESPACE,
                    tail_lines=LOG_LINES,
                    _request_timeout=TIMEOUT_S,
                    _preload_content=False,
                )
                text = raw.data.decode("utf-8", "replace")
                lines += [f"operator pod {pod.metadata.name} (the last {LOG_LINES} lines):", *text.splitlines()]
            return lines
    except Exception as exc:  # noqa: BLE001 - the section says what it could not read
        return [f"(operator log not read: {type(exc).__name__}: {exc})"]
    return []
