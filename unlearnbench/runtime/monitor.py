"""Cost of one call: wall time, peak memory above the level before it, and utilisation (docs/metrics.md).

A background thread samples at 10 Hz: on CUDA, NVML's per-process utilisation samples (de-duplicated by their
timestamps) and PyTorch's allocator peak; on the CPU, the resident memory of the process tree, and the process's
CPU time over the call for utilisation. What a platform cannot measure is reported as None with a reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

import psutil
import torch

log = logging.getLogger(__name__)
GIB = 1024**3
MIN_CPU_INTERVAL_S = 0.1


@dataclass
class Cost:
    time_s: float | None = None
    memory_gib: float | None = None
    utilisation_pct: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, float | None]:
        return {"time_s": self.time_s, "memory_gib": self.memory_gib, "utilisation_pct": self.utilisation_pct}


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Linux names each thread's children in /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN, on in the common
# kernels); psutil's `children(recursive=True)` instead reads the parent of every process on the machine, which at
# 10 Hz on a busy machine (a test suite, a node of many jobs) costs the sampling thread a good part of a core.
CHILDREN_FILES = sys.platform == "linux" and os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def process_started() -> float:
    """When this process started, as a `time.time()` value. psutil's `create_time()` adds the start's offset from
    boot to the boot time, which Linux gives in whole seconds (/proc/stat's btime): up to a second off the wall
    clock, so a start-up timed with it could exceed the wall clock around it. Here the process's age is read on the
    boot clock alone (/proc/self/stat's start, in clock ticks, against CLOCK_BOOTTIME) and taken from now."""
    try:
        with open("/proc/self/stat") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
        started_after_boot = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot)
    except (OSError, AttributeError, ValueError, IndexError):  # no /proc (macOS) or no CLOCK_BOOTTIME
        return psutil.Process().create_time()


def tree_rss(process: psutil.Process) -> int:
    """The resident memory of `process` and of every process below it, in bytes."""
    if not CHILDREN_FILES:
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # a child that ended meanwhile
                total += child.memory_info().rss
        return total
    total, pending = 0, [process.pid]
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):  # a process that ended meanwhile
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
            for thread in os.listdir(f"/proc/{pid}/task"):
                pending.extend(int(child) for child in Path(f"/proc/{pid}/task/{thread}/children").read_text().split())
    return total


def nvml_now() -> int:
    """The current time in the unit of NVML's sample timestamps: microseconds since the epoch."""
    return int(time.time() * 1e6)


def nvml_uuid(props) -> str | None:
    """NVML's spelling of a torch device's UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    raw = getattr(uuid, "bytes", None)
    text = str(UUID(bytes=bytes(raw))) if raw is not None else str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def nvml_pci_bus_id(props) -> str | None:
    """NVML's spelling of a torch device's PCI address, "DDDDDDDD:BB:DD.0", where torch reports it."""
    try:
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def nvml_handle(nvml, device_index: int):
    """The NVML handle of torch's device `device_index`.

    NVML numbers every GPU of the machine while torch numbers the visible ones (CUDA_VISIBLE_DEVICES=2 makes
    NVML's GPU 2 torch's cuda:0), so the device is found by its UUID, else its PCI bus id; the torch index is the
    last resort, right only when all GPUs are visible in NVML's order.
    """
    try:
        props = torch.cuda.get_device_properties(device_index)
    except Exception:  # no properties: only the index is left
        props = None
    lookups = (("nvmlDeviceGetHandleByUUID", nvml_uuid), ("nvmlDeviceGetHandleByPciBusId", nvml_pci_bus_id))
    for function, key_of in lookups:
        key = key_of(props) if props is not None else None
        if key is None or not hasattr(nvml, function):
            continue
        try:
            return getattr(nvml, function)(key)
        except Exception as error:  # NVMLError: not found, not supported (a MIG slice's UUID)
            log.debug("NVML: %s(%s) failed: %s", function, key, error)
    return nvml.nvmlDeviceGetHandleByIndex(device_index)


class NvmlUtilisation:
    """Time-averaged SM utilisation of this process on one GPU, from NVML's sample buffer.

    Created when the measured call starts: NVML keeps a buffer of past samples, and only those after that moment
    (NVML returns the samples newer than `last_seen`) belong to the call.
    """

    def __init__(self, device_index: int) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = nvml_handle(pynvml, device_index)
        self.pid = os.getpid()
        self.started = self.last_seen = nvml_now()
        self.samples: dict[int, int] = {}

    def sample(self) -> None:
        try:
            for s in self.nvml.nvmlDeviceGetProcessUtilization(self.handle, self.last_seen):
                if s.pid == self.pid and s.timeStamp >= self.started:
                    self.samples[s.timeStamp] = s.smUtil
                    self.last_seen = max(self.last_seen, s.timeStamp)
        except self.nvml.NVMLError:
            pass  # no sample since last_seen: NVML reports NOT_FOUND

    def mean(self) -> float | None:
        return sum(self.samples.values()) / len(self.samples) if self.samples else None


class CostMonitor:
    """Usage: `with monitor.measure() as cost: ...`; `cost` is filled when the block ends."""

    def __init__(self, device: torch.device, interval_s: float = 0.1) -> None:
        self.device = device
        self.interval_s = interval_s
        self.process = psutil.Process()

    @contextmanager
    def measure(self) -> Iterator[Cost]:
        cost = Cost()
        cuda = self.device.type == "cuda"
        gpu_util = None
        stop = threading.Event()
        peak_rss = [tree_rss(self.process)]

        def sample() -> None:
            while not stop.wait(self.interval_s):
                peak_rss[0] = max(peak_rss[0], tree_rss(self.process))
                if gpu_util is not None:
                    gpu_util.sample()

        self.synchronize()
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            allocated_before = torch.cuda.memory_allocated(self.device)
        rss_before = peak_rss[0]
        cpu_before = self.process.cpu_times()
        if cuda:
            gpu_util = self.open_nvml(cost)  # last: NVML's samples count from here
        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        start = time.perf_counter()
        try:
            yield cost
        finally:
            self.synchronize()
            cost.time_s = time.perf_counter() - start
            stop.set()
            thread.join()
            peak_rss[0] = max(peak_rss[0], tree_rss(self.process))
            if cuda:
                cost.memory_gib = (torch.cuda.max_memory_allocated(self.device) - allocated_before) / GIB
                if gpu_util is not None:
                    gpu_util.sample()
                    cost.utilisation_pct = gpu_util.mean()
                    if cost.utilisation_pct is None:
                        cost.notes.append("utilisation_pct: NVML gave no sample for this process during the call")
            else:
                cost.memory_gib = (peak_rss[0] - rss_before) / GIB
                cost.utilisation_pct = self.cpu_utilisation(cpu_before, cost.time_s, cost)
            for note in cost.notes:
                log.info("cost not measured: %s", note)

    def cpu_utilisation(self, before, elapsed: float, cost: Cost) -> float | None:
        """CPU time of the process over the call as a percentage of the cores it may use; None for a call too
        short for the CPU-time clock (it ticks in 10 ms steps on Linux)."""
        if elapsed < MIN_CPU_INTERVAL_S:
            cost.notes.append(f"utilisation_pct: the call took {elapsed * 1000:.1f} ms, too short for CPU time")
            return None
        after = self.process.cpu_times()
        busy = (after.user - before.user) + (after.system - before.system)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return 100.0 * busy / (elapsed * cores)

    def open_nvml(self, cost: Cost) -> NvmlUtilisation | None:
        try:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            return NvmlUtilisation(index)
        except Exception as error:  # no NVML library, no permission, a MIG slice: report null, never 0
            cost.notes.append(f"utilisation_pct: NVML unavailable ({error})")
            return None

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
