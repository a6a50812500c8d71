"""The optional flash-linear-attention route (fla-org/flash-linear-attention: Triton kernels, CUDA only) for the
recurrences it implements: GLA's per-channel gated recurrence (`fla.ops.gla.chunk_gla`), the head-wise decay of
retention and Mamba-2's SSD (`fla.ops.simple_gla.chunk_simple_gla`, the kernel fla's own retention uses), the delta
rule of DeltaNet and Gated DeltaNet (`fla.ops.delta_rule.chunk_delta_rule`, `fla.ops.gated_delta_rule.
chunk_gated_delta_rule`) and RWKV-7's diagonal-plus-low-rank rule (`fla.ops.generalized_delta_rule.
chunk_dplr_delta_rule`, which fla's chunk_rwkv7 calls). BASED (fla's `parallel_based` has no exact window) and Hedgehog (a
feature map over our shared linear kernel) have no route here.

An attention's `backend` option: "pytorch" (default: our chunked forms, on any device), "fla" (these kernels;
a clear error where CUDA or the package is missing) or "auto" (fla where the inputs are on CUDA and fla imports,
else pytorch). The route each call took is counted (`attnbench.kernels.routes`: "fla" or "pytorch-chunked") and
recorded with every result. Ours are (B, H, N, D) with q already scaled; fla's are (B, T, H, K) with a `scale`
argument: each call transposes in and out and passes scale 1, and returns the outputs and the final state in the
inputs' dtype (fla keeps the state in float32). The encoder forms reuse these causal kernels as
our chunked forms do (GLA and retention: a forward and a reversed pass; DeltaNet: the final state).
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

from torch import Tensor

from attnbench.errors import ConfigError

Backend = Literal["pytorch", "fla", "auto"]
PACKAGE = "flash-linear-attention"


def unavailable(x: Tensor) -> str | None:
    """Why the fla route cannot take inputs like `x` here (None: it can)."""
    return unavailable_on(x.device.type)


def unavailable_on(device: str) -> str | None:
    """Why the fla route cannot run on `device` ('cpu', 'cuda', 'cuda:1') here (None: it can)."""
    if not device.startswith("cuda"):
        return f"its Triton kernels run on CUDA, and this runs on {device}"
    try:
        importlib.import_module("fla.ops")
    except ImportError as err:
        return f"the package does not import ({err}); pip install {PACKAGE}"
    return None


def use_fla(backend: Backend, x: Tensor) -> bool:
    """Whether this call takes the fla route: 'fla' insists (a ConfigError says why it cannot), 'auto' takes it
    where it can, 'pytorch' never."""
    if backend == "pytorch":
        return False
    reason = unavailable(x)
    if backend == "fla" and reason is not None:
        raise ConfigError(f"backend 'fla' cannot run: {reason}; use backend 'auto' or 'pytorch' instead")
    return reason is None


def asks_for_fla(options: Any) -> bool:
    """Whether attention options insist on the fla route (`backend: fla`, also in a hybrid's layers)."""
    if isinstance(options, dict):
        return options.get("backend") == "fla" or any(asks_for_fla(v) for v in options.values())
    return isinstance(options, list) and any(asks_for_fla(v) for v in options)


def _fla(x: Tensor) -> Tensor:
    """(B, H, N, ...) -> fla's (B, T, H, ...), contiguous."""
    return x.transpose(1, 2).contiguous()


def _ours(out: Tensor, state: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
    """fla's outputs (B, T, H, Dv) and final state -> ours, (B, H, N, Dv) and (B, H, Dk, Dv), in the dtype of the
    caller's inputs `like` (fla keeps the final state in float32 whatever the inputs' dtype)."""
    return out.transpose(1, 2).to(like.dtype), state.to(like.dtype)


def gated_recurrence(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> tuple[Tensor, Tensor]:
    """`attnbench.baselines.gla.chunk.chunk_gated_recurrence` by fla's chunk_gla: q, k, log_gate (B, H, N, Dk),
    v (B, H, N, Dv) -> outputs (B, H, N, Dv) and the last state (B, H, Dk, Dv)."""
    from fla.ops.gla import chunk_gla

    gate = log_gate.expand(*q.shape)
    out, state = chunk_gla(_fla(q), _fla(k), _fla(v), _fla(gate), scale=1.0, output_final_state=True)
    return _ours(out, state, q)


def headwise_recurrence(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> tuple[Tensor, Tensor]:
    """The same recurrence with one gate per head and position, by fla's chunk_simple_gla: log_gate (B, H, N, 1),
    or expanded over Dk with equal columns (the first is read)."""
    from fla.ops.simple_gla import chunk_simple_gla

    gate = log_gate[..., 0].transpose(1, 2).contiguous()  # (B, T, H)
    out, state = chunk_simple_gla(_fla(q), _fla(k), _fla(v), g=gate, scale=1.0, output_final_state=True)
    return _ours(out, state, q)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`attnbench.baselines.deltanet.chunk.chunk_delta_rule` by fla's chunk_delta_rule, or with a gate by
    chunk_gated_delta_rule: q, k (B, H, N, Dk), k L2-normalised, v (B, H, N, Dv), beta and log_gate (B, H, N) ->
    outputs (B, H, N, Dv) and the last state (B, H, Dk, Dv)."""
    beta = beta.transpose(1, 2).contiguous()  # (B, T, H)
    if log_gate is None:
        from fla.ops.delta_rule import chunk_delta_rule

        out, state = chunk_delta_rule(_fla(q), _fla(k), _fla(v), beta, scale=1.0, output_final_state=True)
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        gate = log_gate.transpose(1, 2).contiguous()
        out, state = chunk_gated_delta_rule(_fla(q), _fla(k), _fla(v), gate, beta, scale=1.0, output_final_state=True)
    return _ours(out, state, q)


def dplr(q: Tensor, k: Tensor, v: Tensor, alpha: Tensor, beta: Tensor, log_gate: Tensor) -> tuple[Tensor, Tensor]:
    """`attnbench.baselines.rwkv7.chunk.chunk_dplr` by fla's chunk_dplr_delta_rule (the kernel of its chunk_rwkv7):
    q, k, alpha, beta, log_gate (B, H, N, Dk), v (B, H, N, Dv) -> outputs (B, H, N, Dv), last state (B, H, Dk, Dv)."""
    from fla.ops.generalized_delta_rule import chunk_dplr_delta_rule

    out, state = chunk_dplr_delta_rule(
        _fla(q), _fla(k), _fla(v), _fla(alpha), _fla(beta), _fla(log_gate), scale=1.0, output_final_state=True
    )
    return _ours(out, state, q)


def route_name(fla: bool) -> str:
    """The route counted for a call (`attnbench.kernels.routes`)."""
    return "fla" if fla else "pytorch-chunked"
