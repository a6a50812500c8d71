"""The timing, memory and machine-limit probe behind the efficiency measurement.

- `time_repeated(fn)`: repeat a warmed-up call until a minimum time; median and quartiles in ms.
  CUDA: timed with events around each call, synchronised. `time_alternating(fn_a, fn_b)`: two calls
  in alternation, for a comparison that a shared machine's slow spells cannot tilt.
- `peak_memory(setup, args)`: peak memory of one call, measured, not computed. CUDA: after one
  warm-up call, the allocator's peak after `reset_peak_memory_stats` above what was allocated just
  before the measured call.
  CPU: in a fresh subprocess (forkserver; the parent's OpenMP pool makes a plain fork hang),
  `setup(*args)` builds the call, one warm-up call runs, freed heap goes back to the OS (glibc
  malloc_trim, large blocks through mmap), then the peak resident size of each of MEMORY_CALLS
  measured calls (VmHWM, reset through /proc/self/clear_refs) above the resident size just before
  it, the median reported (one call where the counter cannot be reset).
  Out-of-memory (torch.OutOfMemoryError, MemoryError, or the subprocess killed) and calls longer
  than the budget come back as readings with a status, not as exceptions.
- `time_on_cpu(measure)`: a timed pass on the calling thread's CPU clock, accepted where its calls ran on that
  thread alone (one torch thread): exact whatever else runs on the machine.
- `time_unstarved(measure)`: a timing accepted only when this process's runnable threads got a core:
  the kernel's per-thread run-queue wait (/proc/self/task/*/schedstat) over the timed pass is at most
  `tolerance` of their runnable time; else retried, at most `tries` times, then refused with the reason.
  Wait time is what a busy machine adds to wall time, so it is read directly, not inferred from wall time.
- `measure_machine()`: the machine's fp32 matrix-multiply rate and copy bandwidth (the roofline).
- `machine_load()`, `cpu_snapshot()` / `others_cores()`: how busy the machine is (load average, the share of a
  core a spinning thread gets, and the cores other processes kept busy between two snapshots).
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import multiprocessing
import os
import resource
import time
import traceback
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch

OOM_ERRORS = (torch.OutOfMemoryError, MemoryError)
CLEAR_REFS = "/proc/self/clear_refs"
CHILD_START_TIMEOUT_S = 300.0  # the first subprocess also starts the forkserver and imports torch
M_MMAP_THRESHOLD = -3  # glibc mallopt parameters
M_TRIM_THRESHOLD = -1
RETAINED_BYTES = 1 << 30  # allocations below this come from (and go back to) the heap, which keeps up to this
# measured calls per CPU memory reading, the median taken: one call's resident peak varied by a tensor's size
# between runs (Linformer's training step at 16384 tokens: 145 or 160 MiB) with the order autograd freed in
MEMORY_CALLS = 3


@dataclasses.dataclass
class Timing:
    """Wall times of repeated calls (ms)."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    repeats: int
    times_ms: list[float]


@dataclasses.dataclass
class MemoryReading:
    """Peak memory of one call above the memory in use just before it."""

    status: str  # "ok" | "oom" | "timeout"
    peak_bytes: int | None
    method: str
    seconds: float | None = None  # duration of the measured call
    reason: str | None = None


def synchronize(device: str) -> None:
    """Wait for queued work on `device` (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def call_seconds(fn: Callable[[], Any], device: str) -> float:
    """Wall seconds of one synchronised call (used for warm-up)."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


Clock = Literal["wall", "thread"]  # wall time, or the calling thread's CPU time (exact for a call it runs alone)


def _one_call_ms(fn: Callable[[], Any], device: str, clock: Clock = "wall") -> float:
    if clock == "thread" and torch.device(device).type == "cpu":
        start = time.thread_time_ns()
        fn()
        return (time.thread_time_ns() - start) / 1e6
    if torch.device(device).type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    return call_seconds(fn, device) * 1000.0


def time_repeated(
    fn: Callable[[], Any],
    *,
    device: str = "cpu",
    min_time_s: float = 0.3,
    min_repeats: int = 3,
    max_repeats: int = 100,
    budget_s: float = float("inf"),
    clock: Clock = "wall",
) -> Timing:
    """Call `fn` (already warmed up) until `min_time_s` and `min_repeats` are reached (wall time), or
    `max_repeats` or the budget; median and quartiles of the per-call times on `clock`."""
    synchronize(device)
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < max_repeats:
        times.append(_one_call_ms(fn, device, clock))
        elapsed = time.perf_counter() - started
        if (elapsed >= min_time_s and len(times) >= min_repeats) or elapsed >= budget_s:
            break
    return _timing(times)


def time_alternating(
    fn_a: Callable[[], Any],
    fn_b: Callable[[], Any],
    *,
    device: str = "cpu",
    min_time_s: float = 0.3,
    min_repeats: int = 3,
    max_repeats: int = 100,
    budget_s: float = float("inf"),
    clock: Clock = "wall",
) -> tuple[Timing, Timing]:
    """Time two warmed-up calls in alternation, A B then B A, pair after pair, until `min_time_s` and
    `min_repeats` pairs are reached, or `max_repeats` pairs or the budget: each pair's two calls lie next to each
    other in time, so a shared machine's slow spell slows both (compare them pair by pair, `pair_ratios`), and
    neither always runs first."""
    synchronize(device)
    times_a: list[float] = []
    times_b: list[float] = []
    started = time.perf_counter()
    while len(times_a) < max_repeats:
        if len(times_a) % 2 == 0:
            times_a.append(_one_call_ms(fn_a, device, clock))
            times_b.append(_one_call_ms(fn_b, device, clock))
        else:
            times_b.append(_one_call_ms(fn_b, device, clock))
            times_a.append(_one_call_ms(fn_a, device, clock))
        elapsed = time.perf_counter() - started
        if (elapsed >= min_time_s and len(times_a) >= min_repeats) or elapsed >= budget_s:
            break
    return _timing(times_a), _timing(times_b)


def pair_ratios(times_a: list[float], times_b: list[float]) -> np.ndarray:
    """b / a of each pair of alternated calls (`time_alternating`): > 1 where A was the faster."""
    return np.asarray(times_b, dtype=float) / np.asarray(times_a, dtype=float)


def quartiles(values: Any) -> tuple[float, float, float]:
    """(q25, median, q75) of some numbers."""
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return float(q25), float(median), float(q75)


def _timing(times: list[float]) -> Timing:
    q25, median, q75 = quartiles(times)
    return Timing(median, q25, q75, len(times), times)


# --- starvation ------------------------------------------------------------------------------

# a timed pass whose runnable threads waited for a core longer than this share of their runnable time is refused: one
# that waited at most a third of it reads at most about 1.5x its time on a quiet machine (runnable = run + wait)
STARVED_SHARE = 1 / 3
STARVED_TRIES = 3
STARVED_PAUSE_S = 1.0  # pause between tries, so that a passing spell of other work can end


@dataclasses.dataclass(frozen=True)
class SchedSnapshot:
    """Nanoseconds this process's threads (all of them, summed) have run on a core and waited runnable for one."""

    run_ns: int
    wait_ns: int


def sched_snapshot() -> SchedSnapshot | None:
    """The process's scheduler counters now (Linux /proc/self/task/*/schedstat); None where unreadable."""
    run = wait = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                fields = f.read().split()
        except OSError:  # the thread ended meanwhile
            continue
        if len(fields) < 2:
            return None
        run, wait = run + int(fields[0]), wait + int(fields[1])
    return SchedSnapshot(run, wait)


def starved_share(before: SchedSnapshot | None, after: SchedSnapshot | None) -> float | None:
    """The share of their runnable time that the process's threads spent waiting for a core between two
    snapshots (0: never kept off a core; 0.5: as two busy threads on one core); None without counters."""
    if before is None or after is None:
        return None
    run, wait = after.run_ns - before.run_ns, after.wait_ns - before.wait_ns
    return wait / (run + wait) if run + wait > 0 else None


@dataclasses.dataclass
class Guarded:
    """A measurement accepted (value set) or refused (reason set), with each try's starved share."""

    value: Any
    shares: list[float | None]
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.reason is None


def time_unstarved(
    measure: Callable[[], Any],
    *,
    tolerance: float = STARVED_SHARE,
    tries: int = STARVED_TRIES,
    pause_s: float = STARVED_PAUSE_S,
    snapshot: Callable[[], SchedSnapshot | None] | None = None,
) -> Guarded:
    """Run `measure` (a timed pass) until its threads were not starved (see `starved_share`), at most `tries`
    times; refused with the reason when every try was. Where the counters are unreadable, the first try is
    accepted with share None (not checked). `snapshot`: the counters' reader (default `sched_snapshot`)."""
    snapshot = snapshot or sched_snapshot
    shares: list[float | None] = []
    for attempt in range(tries):
        if attempt and pause_s > 0:
            time.sleep(pause_s)
        before = snapshot()
        value = measure()
        share = starved_share(before, snapshot())
        shares.append(share)
        if share is None or share <= tolerance:
            return Guarded(value, shares)
    waited = ", ".join(f"{s:.0%}" for s in shares if s is not None)
    return Guarded(
        None,
        shares,
        f"not measured: the timed threads waited for a core {waited} of their runnable time "
        f"in {tries} tries (tolerance {tolerance:.0%}); the machine was busy",
    )


def time_on_cpu(
    measure: Callable[[Clock], Any], *, snapshot: Callable[[], SchedSnapshot | None] | None = None
) -> Guarded:
    """Run `measure` (a timed pass, given the clock) on the calling thread's CPU clock: what its calls cost on a
    core, whatever else waits for the cores. Exact for calls that run on this thread alone, as a call on one torch
    thread does (no intra-op parallelism; CPU autograd runs its backward on the caller); always accepted, with the
    pass's starved share (`starved_share`) recorded."""
    snapshot = snapshot or sched_snapshot
    before = snapshot()
    value = measure("thread")
    return Guarded(value, [starved_share(before, snapshot())])


# --- peak memory ------------------------------------------------------------------------------


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter; False where /proc/self/clear_refs cannot be written."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _release_free_heap() -> None:
    """Return freed heap to the OS and send large allocations to mmap, so new allocations show in RSS (glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    libc.malloc_trim(0)


def _memory_child(conn: Any, setup: Callable[..., Callable[[], Any]], args: tuple, threads: int) -> None:
    """Subprocess body: setup, one warm-up call, then MEMORY_CALLS measured calls (one where the peak counter
    cannot be reset); sends the median reading (or the error)."""
    torch.set_num_threads(threads)
    try:
        fn = setup(*args)
        conn.send(("ready", None))
        fn()  # warm-up: one-time allocations (thread pools, library workspaces) are not the call's peak
        peaks, seconds, method = [], [], "cpu-subprocess-vmhwm"
        while len(peaks) < (MEMORY_CALLS if method == "cpu-subprocess-vmhwm" else 1):
            gc.collect()
            _release_free_heap()
            if _reset_peak_rss():
                base = _proc_status_bytes("VmRSS")
            else:
                method = "cpu-subprocess-ru_maxrss"
                base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            conn.send(("warm", None))  # the parent gives each measured call the budget
            start = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - start)
            peak = (
                _proc_status_bytes("VmHWM")
                if method == "cpu-subprocess-vmhwm"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            )
            peaks.append(max(0, peak - base))
        middle = sorted(range(len(peaks)), key=peaks.__getitem__)[len(peaks) // 2]
        conn.send(("reading", MemoryReading("ok", peaks[middle], method, seconds[middle])))
    except OOM_ERRORS as err:
        conn.send(("reading", MemoryReading("oom", None, "cpu-subprocess", reason=_short(err))))
    except Exception:  # noqa: BLE001 - handed to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
    conn.close()


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:300]


def _await(receive: Any, process: Any, timeout: float) -> tuple[str, Any]:
    """The child's next message; ("timeout", None) after killing it, ("died", exit code) if it ended silently."""
    if not receive.poll(timeout):
        process.kill()
        process.join()
        return ("timeout", None)
    try:
        return receive.recv()
    except EOFError:
        process.join()
        return ("died", process.exitcode)


_FORKSERVER_PRELOADED = False


def _context(setup: Callable[..., Any]) -> Any:
    """The forkserver context, preloading torch and the setup's module once per process."""
    global _FORKSERVER_PRELOADED
    ctx = multiprocessing.get_context("forkserver")
    if not _FORKSERVER_PRELOADED:
        module = getattr(setup, "__module__", None)
        ctx.set_forkserver_preload(["torch"] + ([module] if module and module != "__main__" else []))
        _FORKSERVER_PRELOADED = True
    return ctx


def _cpu_peak_memory(
    setup: Callable[..., Callable[[], Any]], args: tuple, budget_s: float, threads: int
) -> MemoryReading:
    ctx = _context(setup)
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_memory_child, args=(send, setup, args, threads), daemon=True)
    process.start()
    send.close()
    tag, value = _await(receive, process, CHILD_START_TIMEOUT_S)
    while tag in ("ready", "warm"):
        tag, value = _await(receive, process, budget_s)
        if tag == "timeout":
            return MemoryReading(
                "timeout", None, "cpu-subprocess", reason=f"one call took longer than {budget_s:g} s (per-point budget)"
            )
    process.join()
    if tag == "reading":
        return value
    if tag == "died" and value is not None and value < 0:
        return MemoryReading(
            "oom",
            None,
            "cpu-subprocess",
            reason=f"measuring subprocess killed by signal {-value} (likely out of memory)",
        )
    if tag == "timeout":
        raise RuntimeError(f"memory-measuring subprocess did not finish its setup in {CHILD_START_TIMEOUT_S:g} s")
    if tag == "died":
        raise RuntimeError(
            f"memory-measuring subprocess exited with code {value} before reporting; from a script, "
            f"call under `if __name__ == '__main__':` (subprocesses re-import the main module)"
        )
    raise RuntimeError(f"memory-measuring subprocess failed: {value}")


def _cuda_peak_memory(setup: Callable[..., Callable[[], Any]], args: tuple, device: str) -> MemoryReading:
    method = "cuda-allocator-peak"
    try:
        fn = setup(*args)
        fn()  # warm-up, as on CPU
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        seconds = call_seconds(fn, device)
        return MemoryReading("ok", torch.cuda.max_memory_allocated(device) - base, method, seconds)
    except OOM_ERRORS as err:
        return MemoryReading("oom", None, method, reason=_short(err))
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def peak_memory(
    setup: Callable[..., Callable[[], Any]],
    args: tuple = (),
    *,
    device: str = "cpu",
    budget_s: float = 600.0,
    threads: int | None = None,
) -> MemoryReading:
    """Peak memory of one call of `setup(*args)()` above the memory in use before it (see module doc).

    On CPU, `setup` and `args` must be picklable (a module-level function and plain values).
    """
    if torch.device(device).type == "cuda":
        return _cuda_peak_memory(setup, args, device)
    return _cpu_peak_memory(setup, args, budget_s, threads or torch.get_num_threads())


# --- allocator ----------------------------------------------------------------------------------


def retain_freed_memory() -> dict[str, Any]:
    """Make glibc malloc keep freed memory for reuse, process-wide from now on; returns what was set.

    By default glibc maps every allocation above its (at most 32 MiB) threshold afresh and unmaps it when
    freed, so each call of a long-sequence attention faults in and zeroes the pages of its large tensors
    again: at N = 16384 that took a third of Performer's training step here. jemalloc and tcmalloc keep
    freed memory by default, and PyTorch's CPU launcher (torch.backends.xeon.run_cpu) preloads one of them;
    this does the same for glibc (mmap and trim thresholds raised to RETAINED_BYTES). Elsewhere: unchanged.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, RETAINED_BYTES) == 1 and libc.mallopt(M_TRIM_THRESHOLD, RETAINED_BYTES) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return {"policy": "system", "reason": "not glibc (or mallopt refused): allocator left as it is"}
    return {
        "policy": "retain",
        "allocator": "glibc",
        "mmap_threshold": RETAINED_BYTES,
        "trim_threshold": RETAINED_BYTES,
    }


# --- machine limits ---------------------------------------------------------------------------

_MACHINE: dict[tuple, dict[str, Any]] = {}


def measure_machine(
    device: str = "cpu",
    *,
    threads: int | None = None,
    matmul_size: int = 2048,
    copy_mb: int = 256,
    min_time_s: float = 0.5,
    fresh: bool = False,
) -> dict[str, Any]:
    """fp32 matrix-multiply rate (GFLOP/s, best of repeats) and copy bandwidth (GB/s, read + write),
    measured once per process and settings (`fresh`: measured again now, e.g. next to one timed point)."""
    threads = threads or torch.get_num_threads()
    key = (device, threads, matmul_size, copy_mb)
    if fresh or key not in _MACHINE:
        a = torch.randn(matmul_size, matmul_size, device=device)
        b = torch.randn(matmul_size, matmul_size, device=device)
        out = torch.empty_like(a)
        src = torch.ones(copy_mb * 2**20 // 4, device=device)
        dst = torch.empty_like(src)
        for fn in (lambda: torch.mm(a, b, out=out), lambda: dst.copy_(src)):
            call_seconds(fn, device)
        mm = time_repeated(lambda: torch.mm(a, b, out=out), device=device, min_time_s=min_time_s)
        cp = time_repeated(lambda: dst.copy_(src), device=device, min_time_s=min_time_s)
        _MACHINE[key] = {
            "matmul_gflops": 2.0 * matmul_size**3 / (min(mm.times_ms) / 1e3) / 1e9,
            "copy_gb_per_s": 2.0 * src.nbytes / (min(cp.times_ms) / 1e3) / 1e9,
            "threads": threads,
            "device": device,
            "matmul_size": matmul_size,
            "copy_bytes": src.nbytes,
            "method": "best of repeated fp32 torch.mm (n x n) and tensor copy (read + write bytes)",
        }
    return dict(_MACHINE[key])


# --- machine load -------------------------------------------------------------------------------

# a point is flagged as measured on a busy machine where, while it was timed, other processes used at least
# BUSY_OTHER_CORES cores on average, or a spinning thread probed next to it got less than BUSY_AVAILABILITY of a
# core: other work then took the cores for part of the time, and its times read slower than the code is
BUSY_OTHER_CORES = 0.25
BUSY_AVAILABILITY = 0.8
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_availability(seconds: float = 0.02) -> float:
    """The share of `seconds` of wall time that a thread spinning on the CPU actually ran (its CPU time over the
    wall time): about 1 with a core to spare, 0.5 where it shares a core with one other busy thread."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall0 < seconds:
        pass
    return min(1.0, (time.thread_time() - cpu0) / (time.perf_counter() - wall0))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_load(seconds: float = 0.02) -> dict[str, Any]:
    """How busy the machine is now: the 1-minute load average, the usable CPUs and `cpu_availability`."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"load_1m": load, "cpus": usable_cpus(), "cpu_availability": cpu_availability(seconds)}


@dataclasses.dataclass
class CpuSnapshot:
    """Wall clock, the machine's busy CPU seconds (all processes, /proc/stat) and this process's CPU seconds."""

    wall_s: float
    machine_busy_s: float
    own_s: float


def cpu_snapshot() -> CpuSnapshot | None:
    """The CPU counters now; None where the machine's are unreadable (no /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user .. steal; guest time is already counted in user
    own = os.times()
    return CpuSnapshot(time.perf_counter(), busy / CLOCK_TICKS, own.user + own.system)


def others_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """Cores that other processes kept busy on average between two snapshots (machine busy time less this
    process's, over the wall time); None without snapshots. Resolution: a clock tick (10 ms) of CPU time."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / (after.wall_s - before.wall_s))


def busy_machine(others: float | None, availability: float | None) -> bool:
    """Whether a measurement with these readings was taken on a busy machine (see BUSY_OTHER_CORES)."""
    return (others is not None and others >= BUSY_OTHER_CORES) or (
        availability is not None and availability < BUSY_AVAILABILITY
    )
