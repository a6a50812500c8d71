"""Each causal attention's training step (forward + backward of the attention alone) against ELU linear's, by on-CPU
time, so that a busy machine slows the wall clock but not the figure.

One thread; every attention built with `seed=0` at B 1, H 4, head dim 64 and `--length` tokens; the same q, k, v for
all; `--rounds` rounds, each timing every attention once in turn (interleaved, so a slower phase of the machine
touches them all); the median round's thread CPU time and its ratio to ELU linear's. Issue 46 asks each new
attention's step to be within 3x of ELU linear's at 4,096 tokens, or the reason it cannot be.

    python benchmarks/attention_step.py --length 4096
    python benchmarks/attention_step.py --length 1024 --attention elu-linear softmax fox
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnbench.registry import build_attention

DEFAULT = [
    "elu-linear",
    "softmax",
    "retention",
    "gla",
    "deltanet",
    "gated-deltanet",
    "mamba2",
    "rwkv7",
    "log-linear",
    "fox",
    "sliding-window",
    "kernelized-rpe",
]


def step(attention: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """Thread CPU seconds of one forward + backward through `attention` on fresh leaf copies of q, k, v."""
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    start = time.thread_time()
    attention(q, k, v).square().mean().backward()
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--attention", nargs="+", default=DEFAULT, help="registered causal attentions (first: ELU)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = ["elu-linear", *(n for n in args.attention if n != "elu-linear")]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, args.length, 64, generator=g) for _ in range(3))
    attentions = {n: build_attention(n, head_dim=64, num_heads=4, causal=True, seed=0) for n in names}
    for attention in attentions.values():
        step(attention, q, k, v)  # warm-up
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name, attention in attentions.items():
            times[name].append(step(attention, q, k, v))
    elu = statistics.median(times["elu-linear"])
    print(f"N {args.length}, B 1, H 4, D 64, 1 thread, torch {torch.__version__}: median of {args.rounds} rounds")
    print(f"{'attention':16s} {'on-CPU s':>9s} {'x ELU':>7s}  rounds")
    for name in names:
        median = statistics.median(times[name])
        print(f"{name:16s} {median:9.3f} {median / elu:7.2f}  {min(times[name]):.3f}-{max(times[name]):.3f}")


if __name__ == "__main__":
    main()
