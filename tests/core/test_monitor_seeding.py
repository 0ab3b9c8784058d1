"""The cost monitor on the CPU and the per-stage random streams (docs/metrics.md, docs/reproducibility.md)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.seeding import Streams, global_seed, streams


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# ------------------------------------------------------------------------------------------ monitor


def test_cost_keys():
    assert set(Cost(1.0, 0.5, 10.0).as_dict()) == {"time_s", "memory_gib", "utilisation_pct"}
    assert Cost(1.0, 0.5, 10.0).as_dict() == {"time_s": 1.0, "memory_gib": 0.5, "utilisation_pct": 10.0}


def test_time_of_a_sleep():
    with CostMonitor(torch.device("cpu")).measure() as cost:
        started = time.perf_counter()
        time.sleep(0.3)
        slept = time.perf_counter() - started
    assert slept >= 0.3
    assert cost.time_s >= slept
    assert cost.time_s < slept + 0.5  # the sampler stops at once: no waiting for its next 0.1 s tick


def test_utilisation_is_low_for_a_sleep():
    with CostMonitor(torch.device("cpu")).measure() as cost:
        time.sleep(0.3)
    assert cost.utilisation_pct is not None
    assert 0.0 <= cost.utilisation_pct < 10.0


def test_utilisation_is_high_for_a_busy_loop():
    cpu_started = time.process_time()
    with CostMonitor(torch.device("cpu")).measure() as cost:
        deadline = time.perf_counter() + 0.5
        x = 0
        while time.perf_counter() < deadline:
            x += 1
    cpu_used = time.process_time() - cpu_started
    cores = usable_cores()
    # one busy thread is at most 100 / cores percent of the machine (50 % on 2 cores); how much of its core it got
    # depends on what else runs (a loaded suite gave it a fifth), so the bound is the share it did get
    got = 100 * cpu_used / (cost.time_s * cores)
    assert got > 0 and cost.utilisation_pct > 0.5 * got
    assert cost.utilisation_pct <= 100.0 * 1.05
    # consistent with the process's own CPU-time clock over the block
    assert cost.utilisation_pct == pytest.approx(100 * cpu_used / (cost.time_s * cores), rel=0.25, abs=2.0)


def test_memory_of_a_large_array_kept_alive():
    size_bytes = 300 * 1024**2
    with CostMonitor(torch.device("cpu")).measure() as cost:
        array = np.ones(size_bytes // 8)  # np.ones writes every page: all of it becomes resident
        time.sleep(0.15)  # at least one tick of the 10 Hz sampler
    assert array.sum() == size_bytes // 8
    del array
    gib = size_bytes / 1024**3  # 0.29 GiB
    assert cost.memory_gib > 0.2
    assert cost.memory_gib < gib + 0.2


def test_memory_of_a_short_lived_array_is_seen_by_the_sampler():
    size_bytes = 300 * 1024**2
    with CostMonitor(torch.device("cpu")).measure() as cost:
        array = np.ones(size_bytes // 8)
        time.sleep(0.35)  # three ticks of the 10 Hz sampler while it is alive
        del array
        time.sleep(0.05)
    assert cost.memory_gib > 0.2


HOLDER = """
import subprocess, sys
block = bytearray(b"x" * (100 * 2**20))  # written: resident
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "child", ""], stdout=sys.stdout)
print("resident", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.mark.processes
def test_the_tree_memory_counts_children_and_grandchildren_as_psutil_does(monkeypatch):
    """The memory of the process tree read through Linux's per-thread children files equals psutil's walk of every
    process's parent, a child and a grandchild (100 MiB each) included."""
    import subprocess
    import sys

    import psutil

    from unlearnbench.runtime import monitor

    if not monitor.CHILDREN_FILES:
        pytest.skip("no /proc/<pid>/task/<tid>/children here: tree_rss is psutil's walk")
    me = psutil.Process()
    alone = monitor.tree_rss(me)
    parent = subprocess.Popen([sys.executable, "-c", HOLDER, "parent", HOLDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert [parent.stdout.readline() for _ in range(2)] == ["resident\n"] * 2
        fast = monitor.tree_rss(me)
        monkeypatch.setattr(monitor, "CHILDREN_FILES", False)
        walked = monitor.tree_rss(me)
    finally:
        parent.communicate("")
    assert fast - alone > 2 * 100 * 2**20
    assert fast == pytest.approx(walked, abs=8 * 2**20)  # this process's own pages may move between the reads


@pytest.mark.processes
def test_a_process_started_between_the_clock_before_its_fork_and_the_clock_in_it():
    """A job's start-up is timed from `process_started()`: a child forked now started after the clock read before
    the fork (less one clock tick, the resolution of /proc's start time) and before the clock read in the child.
    psutil's `create_time()`, which adds whole-second boot times, was a second early on the machine that found it."""
    import json

    from unlearnbench.runtime.monitor import process_started

    read, write = os.pipe()
    before = time.time()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, json.dumps([process_started(), time.time()]).encode())
        finally:
            os._exit(0)  # never back into pytest
    os.waitpid(pid, 0)
    os.close(write)
    started, in_child = json.loads(os.read(read, 1000))
    os.close(read)
    assert before - 1 / os.sysconf("SC_CLK_TCK") - 0.002 <= started <= in_child


def test_memory_and_time_are_numbers_for_an_empty_block():
    with CostMonitor(torch.device("cpu")).measure() as cost:
        pass
    assert cost.time_s >= 0.0
    assert cost.memory_gib is not None and abs(cost.memory_gib) < 0.05
    # shorter than the CPU-time clock's resolution: not measurable, so null with a reason, never a made-up number
    assert cost.utilisation_pct is None and "too short" in cost.notes[0]


# ------------------------------------------------------------------------------------------ seeding


def draws(s: Streams) -> tuple[list[float], list[float], int]:
    return torch.rand(5, generator=s.torch).tolist(), s.numpy.random(5).tolist(), s.seed


def test_streams_same_arguments_same_draws():
    assert draws(streams("original", 3)) == draws(streams("original", 3))
    assert draws(streams("method", 0, "ssd", "rocket")) == draws(streams("method", 0, "ssd", "rocket"))
    a, b = streams("forget_set", 7), streams("forget_set", 7)
    assert torch.equal(torch.randperm(100, generator=a.torch), torch.randperm(100, generator=b.torch))


def test_streams_torch_generator_is_cpu():
    s = streams("original", 0)
    assert isinstance(s.torch, torch.Generator)
    assert s.torch.device == torch.device("cpu")
    assert isinstance(s.numpy, np.random.Generator)
    assert isinstance(s.seed, int) and 0 <= s.seed < 2**32


@pytest.mark.parametrize("other", [
    ("retrained", 3), ("original", 4), ("original", 3, 1), ("original", 3, "ssd"), ("mia", 3, "a"),
])
def test_streams_differ_by_stage_and_seeds(other):
    base_torch, base_numpy, base_seed = draws(streams("original", 3))
    torch_draws, numpy_draws, seed = draws(streams(*other))
    assert torch_draws != base_torch
    assert numpy_draws != base_numpy
    assert seed != base_seed


def test_streams_differ_across_many_seeds_and_targets():
    seen = {draws(streams("method", seed, "ssd", target))[2] for seed in range(20) for target in "abc"}
    assert len(seen) == 60


def test_streams_do_not_touch_global_state():
    torch.manual_seed(11)
    np.random.seed(11)
    expected = torch.rand(3).tolist(), np.random.random(3).tolist()
    torch.manual_seed(11)
    np.random.seed(11)
    draws(streams("original", 0))
    assert (torch.rand(3).tolist(), np.random.random(3).tolist()) == expected


def test_streams_trailing_zero_seeds_differ():
    assert draws(streams("original", 0)) != draws(streams("original", 0, 0))


def test_global_seed_restores_the_global_state():
    torch.manual_seed(123)
    torch.rand(2)
    expected = torch.rand(4).tolist()

    torch.manual_seed(123)
    torch.rand(2)
    with global_seed(7):
        inside = torch.rand(4).tolist()
    assert torch.rand(4).tolist() == expected
    assert inside != expected


def test_global_seed_makes_draws_inside_reproducible():
    with global_seed(5):
        first = torch.rand(4).tolist()
        layer = torch.nn.Linear(3, 2)
        weights = layer.weight.detach().clone()
    torch.rand(10)  # consume from the global RNG in between
    with global_seed(5):
        second = torch.rand(4).tolist()
        again = torch.nn.Linear(3, 2).weight.detach().clone()
    assert first == second
    assert torch.equal(weights, again)
    with global_seed(6):
        assert torch.rand(4).tolist() != first
