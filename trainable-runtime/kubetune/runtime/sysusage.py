"""System utilisation sampled in the background for ``log_sys_usage`` (Ray's ``UtilMonitor``).

:class:`Trainable` starts a :class:`SysUsageMonitor` when ``log_sys_usage`` is true (a
constructor argument, or the config key as in Ray) and merges :meth:`SysUsageMonitor.get_data`
into every result as ``result["perf"]``. Keys follow Ray's ``UtilMonitor``:
``cpu_util_percent``, ``ram_util_percent`` and, per GPU index ``i``, ``gpu_util_percent<i>``
and ``vram_util_percent<i>``. All values are percentages in [0, 100] (Ray reports the two GPU
values as fractions from GPUtil; kubetune keeps one unit).

Sources, each optional and dropped silently when unavailable: ``psutil`` if importable, else
Linux's ``/proc/stat`` and ``/proc/meminfo``; ``pynvml`` if importable, else ``nvidia-smi``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from typing import Callable

logger = logging.getLogger(__name__)

_NVIDIA_SMI_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]


def _psutil():
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def parse_proc_stat(text: str) -> tuple[float, float]:
    """Return (busy, total) CPU jiffies from the aggregate ``cpu`` line of ``/proc/stat``.

    Idle time is ``idle + iowait`` (fields 4 and 5), as ``top`` and psutil count it.
    """
    fields = [float(v) for v in text.split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # guest times are already included in user/nice
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return total - idle, total


def parse_meminfo(text: str) -> float:
    """Return used memory in percent, ``(MemTotal - MemAvailable) / MemTotal``, from ``/proc/meminfo``."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        values[key] = float(rest.split()[0]) if rest.split() else 0.0
    return 100.0 * (values["MemTotal"] - values["MemAvailable"]) / values["MemTotal"]


def parse_nvidia_smi_csv(text: str) -> dict[str, float]:
    """Return Ray-named GPU percentages from ``nvidia-smi`` CSV output (see ``_NVIDIA_SMI_QUERY``).

    Rows whose values are not numbers (``[N/A]``, ``[Not Supported]``) are left out.
    """
    out = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            index, util, used, total = int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])
        except (ValueError, IndexError):
            continue
        out[f"gpu_util_percent{index}"] = util
        if total > 0:
            out[f"vram_util_percent{index}"] = 100.0 * used / total
    return out


class _Sources:
    """Picks, once, a reader for CPU times, memory and GPUs, and drops any reader that fails."""

    def __init__(self, use_psutil: bool = True, use_gpu: bool = True):
        ps = _psutil() if use_psutil else None
        self.cpu_times: Callable[[], tuple[float, float]] | None
        self.ram_percent: Callable[[], float] | None
        if ps is not None:
            self.cpu_times = lambda: _psutil_cpu_times(ps)
            self.ram_percent = lambda: float(ps.virtual_memory().percent)
        else:
            self.cpu_times = lambda: parse_proc_stat(_read("/proc/stat"))
            self.ram_percent = lambda: parse_meminfo(_read("/proc/meminfo"))
        self.gpus = _gpu_reader() if use_gpu else None

    def call(self, name: str):
        """Call reader ``name``; on any error log once, disable it and return None."""
        reader = getattr(self, name)
        if reader is None:
            return None
        try:
            return reader()
        except Exception as e:  # a missing /proc, a driver error: degrade, never fail the trial
            logger.info("log_sys_usage: disabling %s (%s)", name, e)
            setattr(self, name, None)
            return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _psutil_cpu_times(ps) -> tuple[float, float]:
    t = ps.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def _gpu_reader() -> Callable[[], dict[str, float]] | None:
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no driver behind the library
            handles = None
        if handles is not None:

            def read_nvml() -> dict[str, float]:
                out = {}
                for i, h in enumerate(handles):
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                    out[f"gpu_util_percent{i}"] = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    out[f"vram_util_percent{i}"] = 100.0 * mem.used / mem.total
                return out

            return read_nvml
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None

    def read_smi() -> dict[str, float]:
        done = subprocess.run([smi, *_NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=10, check=True)
        return parse_nvidia_smi_csv(done.stdout)

    return read_smi


class SysUsageMonitor:
    """Samples utilisation every ``interval_s`` seconds in a daemon thread.

    Args:
        interval_s: seconds between samples (Ray's default 0.7).
        use_psutil: use psutil when importable; False forces the ``/proc`` readers.
        use_gpu: look for pynvml or nvidia-smi.
    """

    def __init__(self, interval_s: float = 0.7, *, use_psutil: bool = True, use_gpu: bool = True):
        self._interval_s = interval_s
        self._sources = _Sources(use_psutil=use_psutil, use_gpu=use_gpu)
        self._lock = threading.Lock()
        self._sample_lock = threading.Lock()
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._latest: dict[str, float] = {}
        self._prev_cpu = self._sources.call("cpu_times")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubetune-sysusage", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        values = {}
        with self._sample_lock:  # the first sample may run in the caller's thread
            cpu = self._sources.call("cpu_times")
            if cpu is not None and self._prev_cpu is not None:
                busy, total = cpu[0] - self._prev_cpu[0], cpu[1] - self._prev_cpu[1]
                if total > 0:
                    values["cpu_util_percent"] = 100.0 * busy / total
            self._prev_cpu = cpu
            ram = self._sources.call("ram_percent")
            if ram is not None:
                values["ram_util_percent"] = ram
            values.update(self._sources.call("gpus") or {})
        with self._lock:
            for key, value in values.items():
                self._sums[key] = self._sums.get(key, 0.0) + value
                self._counts[key] = self._counts.get(key, 0) + 1

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self._sample()

    def get_data(self) -> dict:
        """Return ``{"perf": {key: mean percent}}`` over the samples since the last call.

        When no sample was taken since the last call the previous means are repeated; before
        the first background sample one is taken synchronously. Returns ``{}`` once stopped
        or when no source works.
        """
        if self._stopped.is_set():
            return {}
        with self._lock:
            empty = not self._counts
        if empty and not self._latest:
            self._sample()
        with self._lock:
            if self._counts:
                # clamped: differences of cumulative counters can round a hair below 0
                self._latest = {k: min(100.0, max(0.0, self._sums[k] / self._counts[k])) for k in self._counts}
                self._sums, self._counts = {}, {}
            latest = dict(self._latest)
        return {"perf": latest} if latest else {}

    def stop(self) -> None:
        """Stop sampling; waits up to a second for the thread (a slow ``nvidia-smi`` may outlive it)."""
        self._stopped.set()
        self._thread.join(timeout=1.0)
