"""The section a failed cluster test adds to its report (``tests/conftest.py``): what it reads, and that a cluster it
cannot read is said, not raised."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import LOG_LINES, POD_LOG_LINES, cluster_state


class Custom:
    def list_namespaced_custom_object(self, group, version, namespace, plural, _request_timeout=None):
        assert (group, version, namespace, _request_timeout) == ("kubetune.io", "v1alpha1", "t-1", 10)
        if plural == "experiments":
            condition = {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "bad domain"}
            status = {"phase": "Running", "trials": {"total": 2}, "conditions": [condition]}
            return {"items": [{"metadata": {"name": "exp"}, "status": status}]}
        return {"items": [{"metadata": {"name": "exp-00000"}, "status": {"phase": "Pending", "attempt": 0}}]}


class Core:
    def list_namespaced_event(self, namespace, field_selector=None, _request_timeout=None):
        assert field_selector == "type=Warning"
        event = SimpleNamespace(
            last_timestamp="2026-11-27T13:00:00Z", event_time=None, involved_object=SimpleNamespace(name="exp")
        )
        event.reason, event.message = "TrialNameTaken", "exp-00000 already exists"
        return SimpleNamespace(items=[event])

    def list_namespaced_pod(self, namespace, _request_timeout=None):
        def container(name, **state):
            full = {"running": None, "terminated": None, "waiting": None, **state}
            return SimpleNamespace(name=name, state=SimpleNamespace(**full))

        done = SimpleNamespace(exit_code=0, reason="Completed")
        running = SimpleNamespace(
            phase="Running",
            init_container_statuses=[container("restore", terminated=done), container("metrics", running=True)],
            container_statuses=[container("trial", running=True)],
        )
        ended = SimpleNamespace(phase="Succeeded", init_container_statuses=None, container_statuses=[])
        return SimpleNamespace(
            items=[
                SimpleNamespace(metadata=SimpleNamespace(name="exp-00001", deletion_timestamp=None), status=ended),
                SimpleNamespace(metadata=SimpleNamespace(name="exp-00000", deletion_timestamp="now"), status=running),
            ]
        )

    def read_namespaced_pod_log(
        self, name, namespace, container=None, tail_lines=None, _request_timeout=None, _preload_content=True
    ):
        assert (name, container, _preload_content) == ("exp-00000", "trial", False)
        return SimpleNamespace(data="\n".join(f"epoch={i}" for i in range(12)[-tail_lines:]).encode())


class Down:
    def list_namespaced_custom_object(self, *args, **kwargs):
        raise ConnectionError("the API server is gone")


def test_the_section_shows_conditions_trials_pods_warnings_and_the_operator_log_tail(tmp_path):
    log = tmp_path / "operator.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    text = cluster_state({"namespace": "t-1", "custom": Custom(), "core": Core(), "operator": SimpleNamespace(log=log)})
    lines = text.splitlines()
    assert "  exp: phase=Running trials={'total': 2}" in lines
    assert "    Ready=False InvalidSpec: bad domain" in lines
    assert '  exp-00000: {"phase": "Pending", "attempt": 0}' in lines
    assert "  exp: TrialNameTaken: exp-00000 already exists" in lines
    pods = lines.index("Pods: 2")
    assert (
        lines[pods + 1] == "  exp-00000: Running deleting restore=terminated(0,Completed) metrics=running trial=running"
    )
    # the log tail of a pod that did not end, of its running regular containers
    assert lines[pods + 2 : pods + 2 + POD_LOG_LINES] == [f"    trial: epoch={i}" for i in range(4, 12)]
    assert "  exp-00001: Succeeded " in lines
    assert lines[-LOG_LINES:] == [f"line {i}" for i in range(100 - LOG_LINES, 100)]


def test_a_test_without_a_cluster_gets_nothing_and_an_unreadable_cluster_is_said():
    assert cluster_state({"tmp_path": "/tmp"}) == ""
    text = cluster_state({"namespace": "t-1", "custom": Down(), "core": Core()})
    assert "(experiments of t-1 not read: ConnectionError: the API server is gone)" in text
    assert "  exp: TrialNameTaken: exp-00000 already exists" in text
