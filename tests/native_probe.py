"""Run every fused kernel once and save what it computed: `python tests/native_probe.py OUT.pt [--march ARCH]`.

The attentions that take the fused path (Performer, the random-feature maps in their scaled and paper forms, ELU
linear attention, Nystromformer, a Coulomb map whose particles take gradients as in phase A), each evaluated and
trained with padding, plus the kernels' dropout and exp; saved as {name: tensor} for a test to compare two builds
(tests/test_native.py builds one with `--march x86-64-v3`, the AVX2 machines' instruction set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnbench.kernels import native  # noqa: E402

CASES = [
    ("performer", {}),
    ("elu-linear", {}),
    ("nystromformer", {"num_landmarks": 16}),
    ("random-features", {"feature_map": "elu", "form": "scaled"}),
    ("random-features", {"feature_map": "trig"}),
    *(
        ("random-features", {"feature_map": kind})
        for kind in ("favor", "elu", "softplus", "sigmoid2", "cos2", "softmaxfeat", "porf-softplus")
    ),
    ("coulomb", {"feature_map": "cos2"}),
    ("coulomb", {"feature_map": "softplus"}),
]


def probe() -> dict[str, torch.Tensor]:
    from attnbench.registry import build_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 200, 32, generator=g) for _ in range(3))
    mask = torch.ones(2, 200, dtype=torch.bool)
    mask[1, 70:] = False
    grad_out = torch.randn(q.shape, generator=g)
    saved = {}
    for name, options in CASES:
        label = "/".join([name, *map(str, options.values())])
        attn = build_attention(name, num_heads=3, head_dim=32, seed=1, **options)
        with torch.no_grad():
            saved[f"{label}/eval"] = attn.eval()(q, k, v, mask)
        attn.train()
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = attn(qq, kk, vv, mask)
        out.backward(grad_out)
        saved.update(
            {f"{label}/out": out.detach(), f"{label}/dq": qq.grad, f"{label}/dk": kk.grad, f"{label}/dv": vv.grad}
        )
        saved.update({f"{label}/d{p}": t.grad for p, t in attn.named_parameters() if t.grad is not None})
        routes = getattr(attn, "kernel_routes", {})
        if not routes or any(route.startswith("pytorch") for route in routes):
            raise SystemExit(f"{label} did not run on the fused kernels alone: {routes}")
    x = torch.randn(4099, generator=g)
    saved["dropout"] = native.dropout(x, threshold=2**31, scale=2.0, seed=12345)
    saved["exp"] = native.exp(torch.linspace(-100.0, 88.0, 4096))
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--march", help="build the kernels for this -march instead of -march=native")
    args = parser.parse_args()
    if args.march:
        native.FLAGS = tuple(f"-march={args.march}" if f == "-march=native" else f for f in native.FLAGS)
    if native.library() is None:
        raise SystemExit(f"native kernels {native.status()}")
    torch.save(probe(), args.out)


if __name__ == "__main__":
    main()
