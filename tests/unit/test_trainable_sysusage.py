"""``log_sys_usage``: CPU, memory and GPU utilisation in results (Ray's ``UtilMonitor`` keys)."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from kubetune import Trainable
from kubetune.runtime.sysusage import SysUsageMonitor, parse_meminfo, parse_nvidia_smi_csv, parse_proc_stat


class Busy(Trainable):
    def step(self):
        end = time.perf_counter() + 0.01
        while time.perf_counter() < end:
            pass
        return {}


def _check_perf(perf):
    assert 0.0 <= perf["cpu_util_percent"] <= 100.0
    assert 0.0 < perf["ram_util_percent"] < 100.0
    has_gpu_keys = any(key.startswith("gpu_util_percent") for key in perf)
    assert has_gpu_keys == (shutil.which("nvidia-smi") is not None)


@pytest.mark.parametrize("how", ["kwarg", "config"])
def test_results_carry_perf_when_enabled(tmp_path, how):
    kwargs = {"log_sys_usage": True} if how == "kwarg" else {"config": {"log_sys_usage": True}}
    t = Busy(logdir=str(tmp_path), **kwargs)
    first = t.train()
    _check_perf(first["perf"])
    time.sleep(0.8)  # let the background thread take a sample
    _check_perf(t.train()["perf"])
    t.stop()
    assert not any(th.name == "kubetune-sysusage" and th.is_alive() for th in threading.enumerate())


def test_no_perf_by_default(tmp_path):
    assert "perf" not in Busy(logdir=str(tmp_path)).train()


def test_proc_readers_without_psutil():
    monitor = SysUsageMonitor(interval_s=0.05, use_psutil=False)
    time.sleep(0.2)
    perf = monitor.get_data()["perf"]
    monitor.stop()
    _check_perf(perf)
    assert monitor.get_data() == {}


def test_parse_proc_stat():
    text = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n"
    busy, total = parse_proc_stat(text)
    assert total == 1000.0 and busy == 1000.0 - 840.0


def test_parse_meminfo():
    text = (
        "MemTotal:       16000000 kB\nMemFree:         2000000 kB\n"
        "MemAvailable:    4000000 kB\nHugePages_Total:       0\n"
    )
    assert parse_meminfo(text) == pytest.approx(75.0)


def test_parse_nvidia_smi_csv():
    text = "0, 87, 40960, 81559\n1, [N/A], 0, 81559\n2, 0, 0, 0\n"
    assert parse_nvidia_smi_csv(text) == {
        "gpu_util_percent0": 87.0,
        "vram_util_percent0": pytest.approx(100.0 * 40960 / 81559),
        "gpu_util_percent2": 0.0,
    }
