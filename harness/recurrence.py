"""Running a causal attention as a recurrence, and what its state weighs.

The contract every attention built with causal=True keeps (`Capabilities.causal`):

    state = attention.init_state(batch_size)
    out_t, state = attention.step(q_t, k_t, v_t, state)   # q_t, k_t, v_t, out_t: (B, H, D), one position

`step` leaves the state it is given unchanged (so a state can be stepped from twice) and may take
`key_padding_mask=` (B,) bool, False = a padded token that adds nothing to the state. A state is a dict
of tensors, each with the batch on its first axis; `state_bytes` counts what it carries. A token that does not fit
(another batch, heads or head_dim than the state and the attention, another dtype) is refused with a ValueError
(`attnbench.kernels.recurrent_attention.check_step`, which every built-in step calls).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnbench.kernels.cpu_threads import torch_threads


def has_recurrent_form(attention: nn.Module) -> bool:
    """Whether the module offers `init_state` and `step`."""
    return callable(getattr(attention, "init_state", None)) and callable(getattr(attention, "step", None))


def step_through(
    attention: nn.Module, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None
) -> tuple[Tensor, Any]:
    """Every position of q, k, v (B, H, N, D) through `step`, one at a time -> (outputs (B, H, N, D), last state)."""
    if not has_recurrent_form(attention):
        raise TypeError(
            f"{type(attention).__name__} has no recurrent form (init_state and step); "
            f"a causal attention must offer both"
        )
    state = attention.init_state(q.shape[0])
    outs = []
    with torch_threads(1):  # one token's operations are too small to share out; see `torch_threads`
        for t in range(q.shape[2]):
            extra = {} if key_padding_mask is None else {"key_padding_mask": key_padding_mask[:, t]}
            out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state, **extra)
            outs.append(out_t)
    return torch.stack(outs, dim=2), state


def state_tensors(state: Any) -> list[Tensor]:
    """The tensors a state carries (a tensor, or a dict / list / tuple of them, nested)."""
    if isinstance(state, Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for value in state.values() for t in state_tensors(value)]
    if isinstance(state, (list, tuple)):
        return [t for value in state for t in state_tensors(value)]
    return []


def state_bytes(state: Any) -> int:
    """Bytes of every tensor the state carries."""
    return sum(t.numel() * t.element_size() for t in state_tensors(state))
