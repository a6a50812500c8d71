"""Efficiency: time, tokens/s, peak memory and roofline fraction of the attention module alone.

For each (sequence length, batch, heads, mode) point, random q, k, v (B, H, N, D) go through the
attention built with `build_attention` (max_length = N). Order of work: every point's peak memory
is measured first (CPU: a fresh subprocess per point, which also guards the run against a point
that does not fit), then every surviving point is warmed up, then all are timed, in `rounds` interleaved
passes over the points whose calls are pooled (a slow spell of a shared machine then falls on every point
alike rather than on one length; time: the median call, also its quartiles and fastest). Points above a
length cap, or whose roofline bound alone exceeds the per-point budget, are skipped with a reason;
out-of-memory and time-outs are rows with their status. Peak memory is what one call needs above
its inputs and the built module (training: the forward activations, backward and input gradients).
FLOPs and bytes for the roofline come from `attnbench.measurements.cost`; the machine's rates from a
probe at the start of the run (provenance) and, by default, again between timed passes; each point's
bound uses, per pass, the better reading of the probes before and after it, and the median of that over
passes (`probe_each_point`). How busy the machine was is recorded per point, from each timed pass: the cores
other processes kept busy meanwhile, a spinning thread's share of a core right after it and the load average; a
point measured on a busy machine (`attnbench.timing.busy_machine`) is flagged, in its row and in the report's table
and plot. A timed pass whose threads were starved (they waited for a core more than `starved_tolerance` of their
runnable time, read from the kernel's scheduler counters: `attnbench.timing.time_unstarved`; by default a third,
so that an accepted time reads at most about 1.5x its quiet value) is retried, at most `starved_tries` times; a
point still starved is recorded as not measured (status "not_measured") with the reason, so that it has no time,
ratio or rank. A point on one thread is timed on that thread's CPU clock instead (`clock` auto,
`attnbench.timing.time_on_cpu`): what its calls cost on a core, exact beside any other work, so a busy machine
refuses only multi-threaded points (its row's `clock` says which). Small calls (below `single_thread_flops`) run on one thread, as the fused kernels
run their small operations: a call too small to gain from threads otherwise meets torch's thread pool at a barrier,
and stalls whenever another process holds one of its cores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from attnbench.cell_spec import CellSpec
from attnbench.kernels.cpu_threads import torch_threads
from attnbench.measurements import register_measurement
from attnbench.measurements.common import check_paired_attention, paired_spec, require_one_attention
from attnbench.measurements.cost import point_cost
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.predictions import encode_outcomes
from attnbench.progress import Progress
from attnbench.registry import build_attention
from attnbench.timing import (
    OOM_ERRORS,
    STARVED_SHARE,
    Clock,
    busy_machine,
    call_seconds,
    cpu_snapshot,
    machine_load,
    measure_machine,
    others_cores,
    pair_ratios,
    peak_memory,
    quartiles,
    retain_freed_memory,
    time_alternating,
    time_on_cpu,
    time_repeated,
    time_unstarved,
)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
Mode = Literal["forward", "train"]


@dataclasses.dataclass
class EfficiencyOptions:
    """Options of the efficiency measurement."""

    uses_task: ClassVar[bool] = False  # suites expand it once per attention (attnbench.suite)
    uses_seed: ClassVar[bool] = False
    measures_time: ClassVar[bool] = True  # timed calls: run alone with all cores (attnbench.workers)

    seq_lens: list[int] = option([256, 1024, 4096], "sequence lengths N")
    batch_sizes: list[int] = option([1], "batch sizes B")
    heads: list[int] = option([4], "numbers of heads H")
    head_dim: int = option(64, "head dimension D")
    modes: list[Mode] = option(["forward", "train"], "forward: inference under no_grad; train: forward + backward")
    dtype: Literal["float32", "float16", "bfloat16"] = option("float32", "dtype of inputs and module")
    threads: int = option(2, "CPU threads (torch.set_num_threads), fixed for the whole measurement")
    warmup: int = option(2, "warm-up calls per point, all points warmed up before any is timed")
    min_time_s: float = option(0.3, "time each point for at least this long")
    min_repeats: int = option(3, "and at least this many calls")
    max_repeats: int = option(50, "but at most this many calls")
    rounds: int = option(
        1,
        "time the points in this many interleaved passes (each a share of min_time_s and the "
        "repeats; calls pooled), so that a shared machine's slow spells fall on every length "
        "and mode alike instead of on whichever point they overlap",
    )
    point_budget_s: float = option(60.0, "per-point budget: one call longer than this is a time-out")
    memory: bool = option(
        True,
        "measure peak memory (CPU: one subprocess per point, which also keeps a point "
        "that does not fit from killing the run; False runs every point in-process)",
    )
    length_caps: dict = option({}, "largest N per attention name or label, e.g. {softmax: 8192}; longer: skipped")
    matmul_size: int | None = option(None, "matrix size of the machine's matmul-rate probe (None: 2048 CPU, 8192 CUDA)")
    copy_mb: int = option(256, "tensor size (MiB) of the machine's copy-bandwidth probe")
    allocator: Literal["retain", "system"] = option(
        "retain",
        "retain: glibc malloc keeps freed memory for reuse in the timing process (as jemalloc / tcmalloc "
        "do; see attnbench.timing.retain_freed_memory), so calls do not fault in fresh pages for every large "
        "tensor; system: the allocator as it is. Applies to every attention alike; peak memory is "
        "measured in fresh subprocesses either way",
    )
    paired: dict = option(
        {},
        "per attention label or name, another attention (a name, or {name, options, label}) "
        "timed call by call in alternation with it at every point (A B, then B A): rows get "
        "its median time and the median over pairs of its time / this time, a comparison "
        "that a shared machine's slow spells cannot tilt (cells timed minutes apart can be); "
        "the row's own times then come from the alternated calls too",
    )
    probe_each_point: bool = option(
        True,
        "probe the matmul rate and copy bandwidth again right before and after "
        "each timed pass, its roofline bound from the better of the two (median "
        "over passes; a shared machine's speed drifts during a run); False: the "
        "run's one probe",
    )
    clock: Literal["auto", "wall"] = option(
        "auto",
        "auto: a point on one CPU thread is timed on that thread's CPU clock (exact beside other work: what the "
        "call costs on a core), other points on the wall clock; wall: every point on the wall clock",
    )
    starved_tolerance: float = option(
        STARVED_SHARE,
        "refuse a wall-clock pass whose threads waited for a core more than this share of their runnable "
        "time (the kernel's scheduler counters; a busy machine); a third: the time reads at most ~1.5x quiet",
    )
    starved_tries: int = option(3, "tries of a starved pass (1 s apart) before the point is recorded as not measured")
    single_thread_flops: float = option(
        2e7,
        "calls below this many counted FLOPs (without a count: whose warm-up call "
        "took under 1 ms) run on one thread; 0: never",
    )
    load_probe_s: float = option(
        0.02,
        "seconds a thread spins after each timed pass to probe its share of a core "
        "(with the other processes' CPU use during the pass and the load average: "
        "how busy the machine was; 0: no spinning probe)",
    )

    def __post_init__(self) -> None:
        for name in ("seq_lens", "batch_sizes", "heads", "modes"):
            require(len(getattr(self, name)) > 0, f"{name} is empty; give at least one value")
        require(self.threads >= 1, f"threads={self.threads} must be at least 1")
        require(
            self.min_repeats >= 1 and self.max_repeats >= self.min_repeats,
            f"need 1 <= min_repeats ({self.min_repeats}) <= max_repeats ({self.max_repeats})",
        )
        require(self.rounds >= 1, f"rounds={self.rounds} must be at least 1")
        require(self.load_probe_s >= 0, f"load_probe_s={self.load_probe_s} must be 0 or more")
        require(0 < self.starved_tolerance < 1, f"starved_tolerance={self.starved_tolerance} must lie in (0, 1)")
        require(self.starved_tries >= 1, f"starved_tries={self.starved_tries} must be at least 1")
        for label, other in self.paired.items():
            check_paired_attention(paired_spec(other), {"name", "options", "label"}, f"paired[{label!r}]", other)


def attention_call(
    name: str,
    options: dict[str, Any],
    batch: int,
    heads: int,
    n: int,
    d: int,
    mode: str,
    dtype: str,
    device: str,
    seed: int,
) -> Callable[[], Any]:
    """Build the attention and its random inputs; return the call to time (module-level: picklable)."""
    module = build_attention(name, head_dim=d, num_heads=heads, max_length=n, seed=seed, **options)
    module = module.to(device=device, dtype=DTYPES[dtype])
    generator = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (
        torch.randn(batch, heads, n, d, generator=generator, device=device, dtype=DTYPES[dtype]) for _ in range(3)
    )
    if mode == "forward":
        module.eval()

        def forward() -> Any:
            with torch.no_grad():
                return module(q, k, v)

        forward.module = module  # what ran is read off it (`kernel_routes`)
        return forward
    module.train()
    phase_a = getattr(module, "learning_phase_parameters", None)
    for p in phase_a() if callable(phase_a) else []:  # as in phase B: a kernel learned in phase A stays frozen
        p.requires_grad_(False)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    grad_out = torch.randn(batch, heads, n, d, generator=generator, device=device, dtype=DTYPES[dtype])

    def train_step() -> None:
        module.zero_grad(set_to_none=True)
        for t in (q, k, v):
            t.grad = None
        module(q, k, v).backward(grad_out)

    train_step.module = module
    return train_step


@dataclasses.dataclass
class Point:
    """One (N, B, H, mode) point and its result row."""

    row: dict[str, Any]
    args: tuple
    fn: Callable[[], Any] | None = None
    call_s: float = 0.0  # the last warm-up call's seconds
    twin: "Point | None" = None  # the attention timed in alternation with this one (option paired)
    threads: int = 1  # torch threads for its calls (one below single_thread_flops, else the option threads)

    @property
    def open(self) -> bool:
        return self.row["status"] == "ok"


def _new_point(
    cell: CellSpec,
    options: EfficiencyOptions,
    n: int,
    b: int,
    h: int,
    mode: str,
    device: str,
    machine: dict[str, Any],
) -> Point:
    """One point of the grid (length n, batch b, heads h, mode): its row, with the roofline cost, a length cap's or the
    budget's skip, and its paired twin. Long: the row's fields are written out once, as the stored details show
    them."""
    name, label = cell.attention.name, cell.attention.label
    attn_options = cell.attention.options
    d = options.head_dim
    row: dict[str, Any] = {
        "seq_len": n,
        "batch": b,
        "heads": h,
        "head_dim": d,
        "mode": mode,
        "dtype": options.dtype,
        "status": "ok",
        "reason": None,
        "median_ms": None,
        "q25_ms": None,
        "q75_ms": None,
        "min_ms": None,
        "repeats": 0,
        "tokens_per_s": None,
        "peak_mem_bytes": None,
        "mem_method": None,
        "flops": None,
        "bytes": None,
        "gflops_per_s": None,
        "roofline_ms": None,
        "roofline_fraction": None,
    }
    args = (name, attn_options, b, h, n, d, mode, options.dtype, device, cell.seed)
    cost = point_cost(
        build_attention(name, head_dim=d, num_heads=h, max_length=n, seed=cell.seed, **attn_options),
        name,
        b,
        h,
        n,
        d,
        mode,
        DTYPES[options.dtype],
    )
    if cost is not None:
        row |= {"flops": cost["flops"], "bytes": cost["bytes"]}
        row["roofline_ms"] = _bound_s(row, machine) * 1e3
    cap = options.length_caps.get(label, options.length_caps.get(name))
    if cap is not None and n > cap:
        row |= {"status": "skipped", "reason": f"N={n} is above the length cap {cap} for {label} (option length_caps)"}
    elif row["roofline_ms"] is not None and row["roofline_ms"] / 1e3 > options.point_budget_s:
        row |= {
            "status": "skipped",
            "reason": f"its roofline bound {row['roofline_ms'] / 1e3:.3g} s alone exceeds "
            f"the per-point budget {options.point_budget_s:g} s (point_budget_s)",
        }
    point = Point(row, args)
    other = options.paired.get(label, options.paired.get(name))
    if other is not None:
        spec = paired_spec(other)
        other_label = spec.get("label") or spec["name"]
        row |= {
            "paired_label": other_label,
            "paired_median_ms": None,
            "paired_ratio": None,
            "paired_ratio_q25": None,
            "paired_ratio_q75": None,
        }
        point.twin = Point({"status": "ok", "reason": None}, (spec["name"], spec.get("options") or {}, *args[2:]))
    return point


def _fail(point: Point, status: str, reason: str) -> None:
    point.row |= {"status": status, "reason": reason}
    point.fn = None


def _measure_memory(point: Point, options: EfficiencyOptions, device: str) -> None:
    reading = peak_memory(
        attention_call, point.args, device=device, budget_s=options.point_budget_s, threads=options.threads
    )
    point.row["mem_method"] = reading.method
    if reading.status != "ok":
        _fail(point, reading.status, reading.reason or reading.status)
    else:
        point.row["peak_mem_bytes"] = reading.peak_bytes


SMALL_CALL_S = 1e-3  # without a FLOP count: a warm-up call shorter than this is a small call


def _small(point: Point, options: EfficiencyOptions, device: str) -> bool:
    """Whether the point's calls are too small to gain from threads (see `single_thread_flops`)."""
    if options.single_thread_flops <= 0 or torch.device(device).type != "cpu":
        return False
    if point.row["flops"] is not None:
        return point.row["flops"] < options.single_thread_flops
    return call_seconds(point.fn, device) < SMALL_CALL_S


def _warm_up(point: Point, options: EfficiencyOptions, device: str) -> None:
    try:
        point.fn = attention_call(*point.args)
        point.threads = 1 if _small(point, options, device) else options.threads
        point.row["threads"] = point.threads
        if point.twin is not None:
            point.twin.row["flops"] = point.row["flops"]
            _warm_up(point.twin, options, device)
            point.twin.threads = point.threads
            if not point.twin.open:
                point.row["paired_reason"] = f"{point.row['paired_label']}: {point.twin.row['reason']}"
        with torch_threads(point.threads):
            for _ in range(options.warmup):
                seconds = point.call_s = call_seconds(point.fn, device)
                if seconds > options.point_budget_s:
                    _fail(
                        point,
                        "timeout",
                        f"one call took {seconds:.3g} s, over the per-point budget "
                        f"{options.point_budget_s:g} s (point_budget_s)",
                    )
                    return
    except OOM_ERRORS as err:
        _fail(point, "oom", f"{type(err).__name__}: {err}"[:300])
        _release(device)


def _probe(options: EfficiencyOptions, device: str) -> dict[str, Any]:
    """The machine's rates measured now (short: a few repeats of each probe)."""
    return measure_machine(
        device,
        threads=options.threads,
        matmul_size=_matmul_size(options, device),
        copy_mb=options.copy_mb,
        min_time_s=0.15,
        fresh=True,
    )


def _matmul_size(options: EfficiencyOptions, device: str) -> int:
    return options.matmul_size or (8192 if torch.device(device).type == "cuda" else 2048)


def _time(points: list[Point], options: EfficiencyOptions, device: str, progress: Progress | None) -> None:
    """Time every open point in `rounds` interleaved passes, calls pooled per point. With probe_each_point the
    machine is probed before the first pass and after every pass; a point's bound takes, per pass, the better of
    the probes before and after it (as with one round), then the median over its passes, so that more passes do
    not mean more chances at a lucky reading. With several rounds a pass of a short call begins with one untimed
    call (the probe before it has flushed the caches).
    Long: the interleaved passes, the probes around them and the per-point bounds share one loop's state."""
    rounds = options.rounds
    rewarm_below_s = 0.25 * options.min_time_s / rounds
    share = {
        "min_time_s": options.min_time_s / rounds,
        "min_repeats": -(-options.min_repeats // rounds),
        "max_repeats": max(1, options.max_repeats // rounds),
    }
    times: dict[int, list[float]] = {i: [] for i in range(len(points))}
    twin_times: dict[int, list[float]] = {i: [] for i in range(len(points))}
    rates: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(points))}
    loads: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(points))}
    shares: dict[int, list[float | None]] = {i: [] for i in range(len(points))}  # every try's starved share
    accepted: dict[int, list[float | None]] = {i: [] for i in range(len(points))}  # the accepted tries' shares
    clocks: dict[int, list[str]] = {i: [] for i in range(len(points))}  # each pass's clock
    last = _probe(options, device) if options.probe_each_point else None
    for r in range(rounds):
        for i, point in enumerate(points):
            if point.open:
                try:
                    twin = point.twin if point.twin is not None and point.twin.open else None
                    cpu_before = cpu_snapshot()
                    with torch_threads(point.threads):
                        for each in [point] + ([twin] if twin is not None else []):
                            if rounds > 1 and each.call_s < rewarm_below_s:  # caches, threads warm after a probe
                                call_seconds(each.fn, device)
                        on_cpu = options.clock == "auto" and point.threads == 1 and torch.device(device).type == "cpu"
                        clocks[i].append("thread-cpu" if on_cpu else "wall")
                        if on_cpu:
                            guarded = time_on_cpu(
                                lambda clock, p=point, t=twin: _timed_pass(p, t, options, device, share, clock)
                            )
                        else:
                            guarded = time_unstarved(
                                lambda p=point, t=twin: _timed_pass(p, t, options, device, share),
                                tolerance=options.starved_tolerance,
                                tries=options.starved_tries,
                            )
                    loads[i].append(_load_reading(cpu_before, options))
                    after = _probe(options, device) if options.probe_each_point else None
                except OOM_ERRORS as err:
                    _fail(point, "oom", f"{type(err).__name__}: {err}"[:300])
                    _release(device)
                    continue
                shares[i] += guarded.shares
                probes, last = ([last, after] if last is not None else []), after
                if not guarded.accepted:
                    _fail(point, "not_measured", guarded.reason)
                    point.row |= _starvation_summary(shares[i], guarded.shares, options) | {"clock": "wall"}
                else:
                    accepted[i].append(guarded.shares[-1])
                    timing, other = guarded.value
                    if other is not None:
                        twin_times[i] += other.times_ms
                    times[i] += timing.times_ms
                    rates[i] += probes
            if progress is not None:
                progress("time", r * len(points) + i + 1, rounds * len(points))
    for i, point in enumerate(points):
        if point.open:
            _finish(point, times[i], rates[i], rounds)
            point.row |= _load_summary(loads[i]) | _starvation_summary(shares[i], accepted[i], options)
            point.row["clock"] = clocks[i][0]  # one per point: its threads decide it
            if twin_times[i]:
                ratios = pair_ratios(times[i], twin_times[i])
                q25, median, q75 = quartiles(ratios)
                point.row |= {
                    "paired_median_ms": float(np.median(twin_times[i])),
                    "paired_ratio": median,
                    "paired_ratio_q25": q25,
                    "paired_ratio_q75": q75,
                    "paired_pairs": int(len(ratios)),
                    "paired_faster": int(np.sum(ratios > 1.0)),
                    "paired_slower": int(np.sum(ratios < 1.0)),
                    "paired_ratios": encode_outcomes(ratios),  # each pair's ratio: the report's timing verdict
                }
            if point.twin is not None:
                point.twin.fn = None


def _timed_pass(
    point: Point,
    twin: Point | None,
    options: EfficiencyOptions,
    device: str,
    share: dict[str, Any],
    clock: Clock = "wall",
) -> tuple[Any, Any]:
    """One timed pass of a point (alternated with its twin, if any) on `clock`: (its Timing, the twin's or None)."""
    budget = options.point_budget_s
    if twin is None:
        return time_repeated(point.fn, device=device, budget_s=budget, clock=clock, **share), None
    return time_alternating(point.fn, twin.fn, device=device, budget_s=budget, clock=clock, **share)


def _starvation_summary(
    tries: list[float | None], kept: list[float | None], options: EfficiencyOptions
) -> dict[str, Any]:
    """A point's starvation readings: the largest share among the kept tries (accepted point) or the refused
    pass's tries (refused point), how many tries it took, and whether the counters could be read."""
    read = [s for s in kept if s is not None]
    return {
        "starved_share": max(read) if read else None,
        "timing_tries": len(tries),
        "starvation_checked": any(s is not None for s in tries),
        "starved_tolerance": options.starved_tolerance,
    }


def _finish(point: Point, times: list[float], probes: list[dict[str, Any]], rounds: int) -> None:
    """The point's row from its pooled call times (ms) and the probes next to its passes."""
    row = point.row
    q25, median, q75 = quartiles(times)
    row |= {
        "median_ms": median,
        "q25_ms": q25,
        "q75_ms": q75,
        "min_ms": min(times),
        "repeats": len(times),
        "rounds": rounds,
        "tokens_per_s": row["batch"] * row["seq_len"] / (median / 1e3),
    }
    if probes:  # per pass the better of the probes before and after it, then the median over passes
        passes = list(zip(probes[::2], probes[1::2]))
        rates = {
            key: float(np.median([max(before[key], after[key]) for before, after in passes]))
            for key in ("matmul_gflops", "copy_gb_per_s")
        }
        row |= {"probe_matmul_gflops": rates["matmul_gflops"], "probe_copy_gb_per_s": rates["copy_gb_per_s"]}
        if row["flops"] is not None:
            row["roofline_ms"] = _bound_s(row, rates) * 1e3
    if row["flops"] is not None:
        row["gflops_per_s"] = row["flops"] / (median / 1e3) / 1e9
        row["roofline_fraction"] = row["roofline_ms"] / median
    module = getattr(point.fn, "module", None)  # the calls' routes (attnbench.kernels.routes); None where not counted
    row["kernel_routes"] = getattr(module, "kernel_routes", None)
    point.fn = None


def _load_reading(cpu_before: Any, options: EfficiencyOptions) -> dict[str, Any]:
    """How busy the machine was during a timed pass that began at `cpu_before` (a `cpu_snapshot`), read now."""
    others = others_cores(cpu_before, cpu_snapshot())
    load = (
        machine_load(options.load_probe_s) if options.load_probe_s > 0 else {"load_1m": None, "cpu_availability": None}
    )
    return {"others_cores": others, "load_1m": load["load_1m"], "cpu_availability": load["cpu_availability"]}


def _load_summary(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """A point's machine load over its passes: the median of each reading, and whether that was a busy machine."""
    summary = {}
    for key in ("others_cores", "load_1m", "cpu_availability"):
        values = [r[key] for r in readings if r[key] is not None]
        summary[key] = float(np.median(values)) if values else None
    return summary | {"busy": busy_machine(summary["others_cores"], summary["cpu_availability"])}


def _bound_s(row: dict[str, Any], machine: dict[str, Any]) -> float:
    """The roofline bound: the larger of FLOPs / matmul rate and bytes / copy bandwidth."""
    return max(row["flops"] / (machine["matmul_gflops"] * 1e9), row["bytes"] / (machine["copy_gb_per_s"] * 1e9))


def _release(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Flat metrics per ok row: '<mode>_ms@N' (with '/bB hH' when several batch/head settings)."""
    several = len({(r["batch"], r["heads"]) for r in rows}) > 1
    metrics = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        at = f"{r['seq_len']}" + (f"/b{r['batch']}h{r['heads']}" if several else "")
        metrics[f"{r['mode']}_ms@{at}"] = r["median_ms"]
        metrics[f"{r['mode']}_tokens_per_s@{at}"] = r["tokens_per_s"]
        if r["peak_mem_bytes"] is not None:
            metrics[f"{r['mode']}_peak_mem_bytes@{at}"] = float(r["peak_mem_bytes"])
        if r["roofline_fraction"] is not None:
            metrics[f"{r['mode']}_roofline_fraction@{at}"] = r["roofline_fraction"]
        if r.get("paired_ratio") is not None:
            metrics[f"{r['mode']}_paired_ratio@{at}"] = r["paired_ratio"]
    return metrics


TENTH = {"bounds": (0.0, None), "margin": 0.1, "margin_relative": True, "format": ".3g"}  # within 10%: the same
for _pattern, _direction, _text, _timed, _record in (
    ("*_ms@*", "min", "median time of one call in milliseconds", True, TENTH),
    ("*_tokens_per_s@*", "max", "tokens processed per second", True, TENTH | {"format": ",.0f"}),
    ("*_peak_mem_bytes@*", "min", "peak memory of one call in bytes", False, TENTH | {"format": ",.0f"}),
    ("*_roofline_fraction@*", "max", "roofline bound / measured time", True, TENTH),
    (
        "*_paired_ratio@*",
        "max",
        "median over alternated pairs of the paired attention's time / this one's",
        True,
        {"bounds": (0.0, None), "margin": 0.1},  # a time ratio: 10% (0.1 in ratio units) is the margin
    ),
):
    register_metric(_pattern, _direction, _text, timed=_timed, **_record)


@register_measurement("efficiency", config=EfficiencyOptions)
def measure_efficiency(
    cell: CellSpec, options: EfficiencyOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Time and peak memory of the attention alone per (N, B, H, mode), against the machine's roofline."""
    require_one_attention(cell.attention.name, "efficiency")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(options.threads)
    try:
        allocator = (
            retain_freed_memory()
            if options.allocator == "retain" and torch.device(device).type == "cpu"
            else {"policy": "system"}
        )
        machine = measure_machine(
            device, threads=options.threads, matmul_size=_matmul_size(options, device), copy_mb=options.copy_mb
        ) | {"allocator": allocator}
        points = [
            _new_point(cell, options, n, b, h, mode, device, machine)
            for n in options.seq_lens
            for b in options.batch_sizes
            for h in options.heads
            for mode in options.modes
        ]
        for stage in ([_measure_memory] if options.memory else []) + [_warm_up]:
            for i, point in enumerate(points):
                if point.open:
                    stage(point, options, device)
                if progress is not None:
                    progress(stage.__name__.strip("_").replace("_", " "), i + 1, len(points))
        _time(points, options, device, progress)
    finally:
        torch.set_num_threads(threads_before)
    rows = [p.row for p in points]
    return {
        "metrics": _summary(rows),
        "details": {
            "rows": rows,
            "machine": machine,
            "notes": _notes(rows),
            "attention_options": cell.attention.options,
        },
    }


def _notes(rows: list[dict[str, Any]]) -> list[str]:
    """Warnings a reader needs: points timed on a busy machine, a roofline fraction above 1 (the machine probe
    under-measured)."""
    notes = []
    refused = [f"{r['mode']}@{r['seq_len']}" for r in rows if r["status"] == "not_measured"]
    if refused:
        notes.append(f"not measured (the timed threads were kept off the cores in every try): {', '.join(refused)}")
    busy = [f"{r['mode']}@{r['seq_len']}" for r in rows if r.get("busy") and r.get("clock") != "thread-cpu"]
    if busy:
        notes.append(
            f"measured on a busy machine (other processes on the cores while timed): {', '.join(busy)}; "
            f"their times may read up to ~1/(1 - starved share) slower than the code is"
        )
    above = [f"{r['mode']}@{r['seq_len']}" for r in rows if (r["roofline_fraction"] or 0) > 1]
    if not above:
        return notes
    return notes + [
        f"roofline fraction above 1 at {', '.join(above)}: the machine probe under-measured the matmul rate or "
        f"copy bandwidth (a busy machine while probing, or a small probe: raise matmul_size / copy_mb)"
    ]
