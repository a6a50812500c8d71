"""The timing/memory probe: orders cheap vs expensive work, sees real allocations, records OOM and time-outs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from attnbench import timing
from attnbench.kernels.cpu_threads import torch_threads


def _allocate(numel: int):
    """Setup for peak_memory: the call allocates (and touches) numel float32 values."""
    return lambda: torch.ones(numel)


def _raise_oom():
    def call():
        raise torch.OutOfMemoryError("simulated: tried to allocate 1 TiB")

    return call


def _raise_memory_error_in_setup():
    raise MemoryError("simulated in setup")


def _allocate_in_turn(sizes: list[int]):
    """Setup: the k-th call (the warm-up is call 0) allocates sizes[k] float32 values."""
    calls = iter(sizes)
    return lambda: torch.ones(next(calls))


def _sleep(seconds: float):
    return lambda: time.sleep(seconds)


def test_time_repeated_orders_cheap_and_expensive_matmul(one_thread):
    small, large = torch.randn(64, 64), torch.randn(1024, 1024)
    cheap, costly = (lambda: small @ small), (lambda: large @ large)
    for fn in (cheap, costly):
        timing.call_seconds(fn, "cpu")
    t_cheap = timing.time_repeated(cheap, min_time_s=0.05)
    t_costly = timing.time_repeated(costly, min_time_s=0.05, min_repeats=3)
    assert t_costly.median_ms > 10 * t_cheap.median_ms
    assert t_costly.q25_ms <= t_costly.median_ms <= t_costly.q75_ms


def test_time_repeated_honours_repeat_limits():
    calls = []
    result = timing.time_repeated(lambda: calls.append(1), min_time_s=10.0, max_repeats=7)
    assert result.repeats == len(calls) == 7 == len(result.times_ms)
    calls.clear()
    result = timing.time_repeated(lambda: calls.append(1), min_time_s=0.0, min_repeats=4)
    assert result.repeats == len(calls) == 4


def test_time_alternating_swaps_the_order_pair_by_pair_and_compares_pairs():
    calls = []
    a, b = (lambda: calls.append("a")), (lambda: calls.append("b"))
    ta, tb = timing.time_alternating(a, b, min_time_s=0.0, min_repeats=4, max_repeats=4)
    assert "".join(calls) == "abbaabba" and ta.repeats == tb.repeats == 4
    fast, slow = _sleep(0.002), _sleep(0.006)
    ta, tb = timing.time_alternating(fast, slow, min_time_s=0.0, min_repeats=9, max_repeats=9)
    ratios = timing.pair_ratios(ta.times_ms, tb.times_ms)
    # 6 ms against 2 ms: the ratio's size depends on oversleep (a loaded machine adds to both), its side does not
    assert len(ratios) == 9 and float(np.median(ratios)) > 1.0


def test_peak_memory_sees_a_large_allocation_and_not_a_small_one():
    large = timing.peak_memory(_allocate, (50_000_000,))  # 200 MB
    small = timing.peak_memory(_allocate, (1_000,))
    assert large.status == small.status == "ok"
    assert large.method == "cpu-subprocess-vmhwm"
    assert 190e6 <= large.peak_bytes <= 260e6
    assert small.peak_bytes < 40e6


def test_peak_memory_is_the_median_of_the_measured_calls():
    """One measured call's peak alone is at the mercy of the allocator; the median of three is not."""
    if timing.MEMORY_CALLS != 3 or not timing._reset_peak_rss():
        pytest.skip("needs a resettable peak-RSS counter and three measured calls")
    reading = timing.peak_memory(_allocate_in_turn, ([1_000, 100_000_000, 10_000_000, 10_000_000],))  # 400, 40, 40 MB
    assert reading.status == "ok"
    assert 30e6 < reading.peak_bytes < 60e6


def test_peak_memory_records_out_of_memory_and_timeouts():
    oom = timing.peak_memory(_raise_oom)
    assert oom.status == "oom" and "simulated" in oom.reason and oom.peak_bytes is None
    setup_oom = timing.peak_memory(_raise_memory_error_in_setup)
    assert setup_oom.status == "oom" and "MemoryError" in setup_oom.reason
    slow = timing.peak_memory(_sleep, (30.0,), budget_s=0.5)
    assert slow.status == "timeout" and "0.5 s" in slow.reason


def test_measure_machine_reports_positive_rates_once():
    first = timing.measure_machine("cpu", threads=2, matmul_size=256, copy_mb=8, min_time_s=0.02)
    again = timing.measure_machine("cpu", threads=2, matmul_size=256, copy_mb=8, min_time_s=0.02)
    assert first == again
    assert first["matmul_gflops"] > 0.1 and first["copy_gb_per_s"] > 0.1
    assert first["threads"] == 2 and first["copy_bytes"] == 8 * 2**20


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_memory_uses_the_allocator():
    def setup():
        return lambda: torch.ones(50_000_000, device="cuda")

    reading = timing.peak_memory(setup, device="cuda")
    assert reading.method == "cuda-allocator-peak" and 190e6 <= reading.peak_bytes <= 260e6


def test_retained_allocator_reuses_freed_memory_for_large_tensors():
    """With glibc keeping freed memory, a freed 64 MiB tensor stays resident for the next one (by default glibc
    unmaps it at once: the resident size drops by its 64 MiB)."""
    policy = timing.retain_freed_memory()
    assert policy["policy"] == "retain" and policy["mmap_threshold"] >= 64 * 2**20
    tensor = torch.ones(16 * 2**20)  # 64 MiB, pages touched
    resident = timing._proc_status_bytes("VmRSS")
    del tensor
    assert resident - timing._proc_status_bytes("VmRSS") < 16 * 2**20


def test_others_cores_sees_another_process_spinning_and_busy_machine_flags_it(children):
    """Two child processes spinning for 0.6 s keep other cores busy between two snapshots (this process only
    sleeps); busy_machine flags such readings and a quiet one (no other use, a full core) not."""
    code = "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass"
    spinners = [children.start([sys.executable, "-c", code]) for _ in range(2)]
    time.sleep(0.05)
    before = timing.cpu_snapshot()
    time.sleep(0.4)
    after = timing.cpu_snapshot()
    for spinner in spinners:
        spinner.wait()
    others = timing.others_cores(before, after)
    assert others is not None and others >= 0.5
    assert timing.busy_machine(others, None) and timing.busy_machine(None, 0.5)
    assert not timing.busy_machine(0.0, 1.0) and not timing.busy_machine(None, None)


def test_cpu_availability_is_a_share_of_a_core():
    share = timing.cpu_availability(0.02)
    assert 0.0 < share <= 1.0
    load = timing.machine_load(0.01)
    assert load["cpus"] >= 1 and 0.0 < load["cpu_availability"] <= 1.0


def _counters(shares: list[float]):
    """A scheduler-counter reader whose k-th timed pass (two reads) shows share shares[k] of waiting."""
    reads = []
    for share in shares:
        reads += [timing.SchedSnapshot(0, 0), timing.SchedSnapshot(int(1e9 * (1 - share)), int(1e9 * share))]
    it = iter(reads)
    return lambda: next(it)


def test_time_unstarved_refuses_a_starved_pass_with_the_reason_after_its_tries():
    calls = []
    guarded = timing.time_unstarved(
        lambda: calls.append(1) or "timing", tolerance=0.1, tries=3, pause_s=0, snapshot=_counters([0.5, 0.4, 0.3])
    )
    assert not guarded.accepted and guarded.value is None and len(calls) == 3
    assert guarded.shares == pytest.approx([0.5, 0.4, 0.3])
    assert "not measured" in guarded.reason and "50%, 40%, 30%" in guarded.reason and "tolerance 10%" in guarded.reason


def test_time_unstarved_accepts_the_first_pass_that_got_its_cores():
    guarded = timing.time_unstarved(
        lambda: "timing", tolerance=0.1, tries=3, pause_s=0, snapshot=_counters([0.6, 0.05])
    )
    assert guarded.accepted and guarded.value == "timing" and guarded.shares == pytest.approx([0.6, 0.05])
    unreadable = timing.time_unstarved(lambda: "timing", snapshot=lambda: None)
    assert unreadable.accepted and unreadable.shares == [None]  # not checked, and says so


def _spin(seconds_of_cpu: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds_of_cpu:
        pass


@pytest.mark.skipif(
    timing.sched_snapshot() is None or not hasattr(os, "sched_setaffinity"),
    reason="needs Linux scheduler counters and CPU affinity",
)
def test_work_pinned_beside_a_busy_process_is_refused():
    """The timed thread and a spinning process share one CPU: the kernel keeps each runnable thread off the core
    about half the time, whatever else the machine does, so the pass is refused (no wall-clock threshold)."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    code = (
        "import os, sys\nos.sched_setaffinity(0, {%d})\nsys.stdout.write('spinning\\n'); sys.stdout.flush()\n"
        "while True: pass" % cpu
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline() == b"spinning\n"
        os.sched_setaffinity(0, {cpu})
        guarded = timing.time_unstarved(lambda: _spin(0.1), tolerance=0.1, tries=2, pause_s=0)
    finally:
        os.sched_setaffinity(0, before)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert not guarded.accepted and all(s > 0.25 for s in guarded.shares), guarded.shares
    assert "waited for a core" in guarded.reason


@pytest.mark.skipif(
    timing.sched_snapshot() is None or not hasattr(os, "sched_setaffinity"),
    reason="needs Linux scheduler counters and CPU affinity",
)
def test_work_pinned_beside_a_busy_process_is_timed_exactly_on_its_threads_cpu_clock():
    """The same pinned setting: the wall clock reads the calls about twice as slow as the thread's CPU clock, which
    the pass accepts (the calls ran on the timing thread alone), whatever the machine's load."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    code = (
        "import os, sys\nos.sched_setaffinity(0, {%d})\nsys.stdout.write('spinning\\n'); sys.stdout.flush()\n"
        "while True: pass" % cpu
    )
    a, b = torch.randn(96, 96), torch.randn(96, 96)
    work = lambda: [torch.mm(a, b) for _ in range(200)]  # noqa: E731
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline() == b"spinning\n"
        os.sched_setaffinity(0, {cpu})
        with torch_threads(1):
            guarded = timing.time_on_cpu(lambda clock: timing.time_repeated(work, clock=clock, min_time_s=0.3))
            wall = timing.time_repeated(work, min_time_s=0.3)
    finally:
        os.sched_setaffinity(0, before)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert guarded is not None and guarded.accepted and guarded.shares[0] > 0.25
    assert guarded.value.median_ms < 0.75 * wall.median_ms
