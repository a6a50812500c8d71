"""`decode`: what prefill and decoding cost a causal decoder, against context length, with the state it keeps.

For each context length L: prefill tokens/s (the parallel forward over L tokens that also builds each
layer's state, `TransformerDecoder.prefill`), then the median wall time of `steps` single-token decoding
steps continuing from that state (`TransformerDecoder.step`), and the state bytes per sequence and layer.
The model is untrained (cost does not depend on the weights); batch 1, float32, on the cell's device.
A linear attention's step costs the same at every L while softmax's grows with its cache: where the two
curves cross is measured here, not assumed.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch

from attnbench.baselines.linear_kernel.cpu_threads import torch_threads
from attnbench.cell_spec import CellSpec
from attnbench.decoder import TransformerDecoder
from attnbench.decoder_training import decoder_config
from attnbench.measurements import register_measurement
from attnbench.measurements.common import load_cell_task
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.recurrence import state_bytes
from attnbench.runtime import seed_everything

for _pattern, _direction, _text in (
    ("prefill_tokens_per_s@*", "max", "prompt tokens per second of the parallel prefill at that context length"),
    ("decode_ms_per_token@*", "min", "median milliseconds of one decoding step at that context length"),
):
    register_metric(_pattern, _direction, _text, timed=True)


@dataclasses.dataclass
class DecodeOptions:
    """Options of the decode measurement."""

    context_lengths: list[int] = option([256, 1024, 4096, 16384], "prompt lengths decoding continues from")
    steps: int = option(16, "decoding steps timed after each prefill (their median is reported)")
    warmup: int = option(2, "untimed decoding steps first")
    threads: int = option(1, "torch threads while decoding (one token's work is small)")

    def __post_init__(self) -> None:
        require(
            bool(self.context_lengths) and all(n >= 1 for n in self.context_lengths),
            f"context_lengths={self.context_lengths} must be a non-empty list of positive lengths",
        )
        require(self.steps >= 1 and self.warmup >= 0, f"steps={self.steps} must be >= 1 and warmup >= 0")
        require(self.threads >= 1, f"threads={self.threads} must be at least 1")


def decode_row(model: TransformerDecoder, length: int, options: DecodeOptions, device: str) -> dict[str, Any]:
    """Prefill of `length` tokens, then timed single-token steps; state bytes of the first layer after prefill."""
    ids = torch.randint(model.cfg.vocab_size, (1, length), device=device)
    start = time.perf_counter()
    logits, state = model.prefill(ids)
    prefill_s = time.perf_counter() - start
    bytes_per_layer = state_bytes(state["layers"][0])
    token = logits[:, -1].argmax(-1)
    times = []
    with torch.no_grad(), torch_threads(options.threads):
        for i in range(options.warmup + options.steps):
            start = time.perf_counter()
            logits_t, state = model.step(token, state)
            token = logits_t.argmax(-1)
            if i >= options.warmup:
                times.append(time.perf_counter() - start)
    return {
        "context_length": length,
        "prefill_seconds": prefill_s,
        "prefill_tokens_per_s": length / prefill_s,
        "decode_ms_per_token": 1e3 * statistics.median(times),
        "state_bytes": bytes_per_layer,
    }


@register_measurement("decode", config=DecodeOptions)
def measure_decode(
    cell: CellSpec, options: DecodeOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Prefill throughput and per-token decoding latency at each context length, with the state bytes."""
    task = load_cell_task(cell)
    seed_everything(cell.seed)
    longest = max(options.context_lengths) + options.warmup + options.steps + 1
    model = (
        TransformerDecoder(
            decoder_config(cell, task, max_length=longest),
            cell.attention.name,
            cell.attention.options,
            seed=cell.seed,
        )
        .to(device)
        .eval()
    )
    rows = []
    for i, length in enumerate(sorted(options.context_lengths)):
        rows.append(decode_row(model, length, options, device))
        if progress is not None:
            progress(f"context {length}", i + 1, len(options.context_lengths))
    metrics = {}
    for row in rows:
        n = row["context_length"]
        metrics |= {
            f"prefill_tokens_per_s@{n}": row["prefill_tokens_per_s"],
            f"decode_ms_per_token@{n}": row["decode_ms_per_token"],
            f"state_bytes@{n}": float(row["state_bytes"]),
        }
    return {
        "metrics": metrics,
        "details": {"rows": rows, "batch_size": 1, "dtype": "float32", "threads": options.threads},
    }
