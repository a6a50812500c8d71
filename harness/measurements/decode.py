"""`decode`: what prefill and decoding cost a causal decoder, against context length, with the state it keeps.

For each context length L: prefill tokens/s (the parallel forward over L tokens that also builds each
layer's state, `TransformerDecoder.prefill`), then the wall time of `steps` single-token decoding steps
from that state (`TransformerDecoder.step`, each from the same prefilled state: the step is a function of
its state, so every timed step decodes at exactly L), and the state bytes per sequence and layer.
The model is untrained (cost does not depend on the weights); batch 1, float32, on the cell's device.

The timing check: with `paired` (default softmax) the same decoder with the paired attention is prefilled
too, and the two steps are timed in alternation, pair after pair (A B, then B A; `time_alternating`), so a
slow spell of a shared machine slows both. Per context: the median over pairs of paired time / this time,
the pairs where this step was the faster and the slower, and each pair's ratio; the report judges them with the
inference engine's sign tests (`attnbench.decisions.signs`: ahead / behind / equivalent within the ratio's margin
/ undecided, corrected over the table). A linear attention's step costs the same at every L while softmax's
grows with its cache: where the two cross is read from these verdicts (report: `decode_crossover_table`),
not assumed. The other processes' load while timing is recorded per context.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from attnbench.cell_spec import CellSpec
from attnbench.decoder import TransformerDecoder
from attnbench.decoder_training import decoder_config
from attnbench.kernels.cpu_threads import torch_threads
from attnbench.measurements import register_measurement
from attnbench.measurements.common import check_paired_attention, load_cell_task, paired_spec
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.recurrence import state_bytes
from attnbench.runtime import record_what_ran, seed_everything
from attnbench.timing import cpu_snapshot, others_cores, pair_ratios, quartiles, time_alternating, time_repeated

RELATIVE = {"margin": 0.1, "margin_relative": True}  # within 10%: the same
for _pattern, _direction, _text, _record in (
    (
        "prefill_tokens_per_s@*",
        "max",
        "prompt tokens per second of the parallel prefill at that context length",
        RELATIVE,
    ),
    ("decode_ms_per_token@*", "min", "median milliseconds of one decoding step at that context length", RELATIVE),
    (
        "decode_paired_ratio@*",
        "max",
        "median over alternated pairs of the paired attention's step time / this one's",
        {"margin": 0.1},  # a time ratio: 0.1 in ratio units
    ),
):
    register_metric(_pattern, _direction, _text, timed=True, bounds=(0.0, None), format=".3g", **_record)


@dataclasses.dataclass
class DecodeOptions:
    """Options of the decode measurement."""

    context_lengths: list[int] = option([256, 1024, 4096, 16384], "prompt lengths decoding continues from")
    steps: int = option(16, "decoding steps timed at each context (pairs of steps with `paired`)")
    warmup: int = option(2, "untimed decoding steps first")
    threads: int = option(1, "torch threads while decoding (one token's work is small)")
    paired: Any = option(
        "softmax",
        "the attention (a name, or {name, options}) whose step is timed in alternation with this one's, same "
        "model; the crossover is read from these pairs; null: no pairing (no verdict either)",
    )

    def __post_init__(self) -> None:
        require(
            bool(self.context_lengths) and all(n >= 1 for n in self.context_lengths),
            f"context_lengths={self.context_lengths} must be a non-empty list of positive lengths",
        )
        require(self.steps >= 1 and self.warmup >= 0, f"steps={self.steps} must be >= 1 and warmup >= 0")
        require(self.threads >= 1, f"threads={self.threads} must be at least 1")
        if self.paired is None:
            return
        check_paired_attention(paired_spec(self.paired), {"name", "options"}, "paired", self.paired)


def sign_counts(ratios: np.ndarray) -> dict[str, Any]:
    """Per-pair ratios (paired time / this time) -> the pairs, those where this step was the faster and the slower,
    and each pair's ratio: what the report's timing verdict reads (`attnbench.decisions.signs`)."""
    return {
        "pairs": int(len(ratios)),
        "pairs_faster": int(np.sum(ratios > 1.0)),
        "pairs_slower": int(np.sum(ratios < 1.0)),
        "pair_ratios": [float(f"{r:.6g}") for r in ratios],
    }


def _prefilled(model: TransformerDecoder, ids: torch.Tensor) -> tuple[float, Any, torch.Tensor]:
    """(prefill seconds, state, next token) of a prompt."""
    start = time.perf_counter()
    logits, state = model.prefill(ids)
    return time.perf_counter() - start, state, logits[:, -1].argmax(-1)


def decode_row(
    model: TransformerDecoder,
    length: int,
    options: DecodeOptions,
    device: str,
    twin: TransformerDecoder | None = None,
) -> dict[str, Any]:
    """Prefill of `length` tokens, then timed single-token steps from that state (in alternation with `twin`'s,
    if given); state bytes after prefill, per layer (a hybrid's mean over its layers) and over every layer."""
    ids = torch.randint(model.cfg.vocab_size, (1, length), device=device)
    prefill_s, state, token = _prefilled(model, ids)
    row: dict[str, Any] = {
        "context_length": length,
        "prefill_seconds": prefill_s,
        "prefill_tokens_per_s": length / prefill_s,
        "state_bytes": sum(map(state_bytes, state["layers"])) / len(state["layers"]),
        "state_bytes_total": sum(map(state_bytes, state["layers"])),
    }
    mine = lambda: model.step(token, state)  # noqa: E731 - a step from the same state each call
    with torch.no_grad(), torch_threads(options.threads):
        if twin is not None:
            _, twin_state, twin_token = _prefilled(twin, ids)
            theirs = lambda: twin.step(twin_token, twin_state)  # noqa: E731
        for _ in range(options.warmup):
            mine()
            if twin is not None:
                theirs()
        before = cpu_snapshot()
        if twin is None:
            timing = time_repeated(
                mine, device=device, min_time_s=0.0, min_repeats=options.steps, max_repeats=options.steps
            )
        else:
            timing, paired = time_alternating(
                mine, theirs, device=device, min_time_s=0.0, min_repeats=options.steps, max_repeats=options.steps
            )
        others = others_cores(before, cpu_snapshot())
    row |= {"decode_ms_per_token": timing.median_ms, "others_cores": others}
    if twin is not None:
        ratios = pair_ratios(timing.times_ms, paired.times_ms)
        q25, median, q75 = quartiles(ratios)
        row |= {
            "paired_ms_per_token": paired.median_ms,
            "paired_ratio": median,
            "paired_ratio_q25": q25,
            "paired_ratio_q75": q75,
            **sign_counts(ratios),
        }
    return row


def _is_paired(cell: CellSpec, spec: dict[str, Any]) -> bool:
    """Whether the cell's attention is the paired one itself (then it is the reference, not paired)."""
    return cell.attention.name == spec["name"] and dict(cell.attention.options or {}) == dict(spec["options"])


@register_measurement("decode", config=DecodeOptions)
def measure_decode(
    cell: CellSpec, options: DecodeOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Prefill throughput and per-token decoding latency at each context length, with the state bytes."""
    task = load_cell_task(cell)
    seed_everything(cell.seed)
    longest = max(options.context_lengths) + options.warmup + options.steps + 1
    config = decoder_config(cell, task, max_length=longest)
    record_what_ran("model", dataclasses.asdict(config))
    model = (
        TransformerDecoder(
            config,
            cell.attention.name,
            cell.attention.options,
            seed=cell.seed,
        )
        .to(device)
        .eval()
    )
    twin = None
    if options.paired is not None and not _is_paired(cell, spec := paired_spec(options.paired)):
        twin = TransformerDecoder(model.cfg, spec["name"], spec["options"], seed=cell.seed).to(device).eval()
    rows = []
    for i, length in enumerate(sorted(options.context_lengths)):
        rows.append(decode_row(model, length, options, device, twin))
        if progress is not None:
            progress(f"context {length}", i + 1, len(options.context_lengths))
    metrics = {}
    for row in rows:
        n = row["context_length"]
        metrics |= {
            f"prefill_tokens_per_s@{n}": row["prefill_tokens_per_s"],
            f"decode_ms_per_token@{n}": row["decode_ms_per_token"],
            f"state_bytes@{n}": float(row["state_bytes"]),
            f"state_bytes_total@{n}": float(row["state_bytes_total"]),
        }
        if "paired_ratio" in row:
            metrics[f"decode_paired_ratio@{n}"] = row["paired_ratio"]
    return {
        "metrics": metrics,
        "details": {
            "rows": rows,
            "batch_size": 1,
            "dtype": "float32",
            "threads": options.threads,
            "paired": paired_spec(options.paired) if twin is not None else None,
        },
    }
