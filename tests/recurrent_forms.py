"""Checks every state-space attention (retention, GLA, DeltaNet, BASED, Hedgehog) must pass, in float64: its
renderings against each other, causality, padding and gradients against autograd of the naive form."""

from __future__ import annotations

import torch

from attnbench.recurrence import state_bytes, step_through
from attnbench.registry import build_attention

B, H, N, D = 2, 3, 37, 8
TOL = {"rtol": 1e-10, "atol": 1e-10}


def build(name: str, causal: bool, **options) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention(name, head_dim=D, num_heads=H, causal=causal, **options).double()


def inputs(seed: int = 0, n: int = N, requires_grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64, requires_grad=requires_grad) for _ in range(3)]


def padding_mask(n: int = N, real: int = 30) -> torch.Tensor:
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[-1, real:] = False
    return mask


def check_naive_equals_parallel(name: str, causal: bool, **options) -> None:
    attn, (q, k, v), mask = build(name, causal, **options), inputs(), padding_mask()
    parallel, naive = attn(q, k, v, key_padding_mask=mask), attn.naive_forward(q, k, v, key_padding_mask=mask)
    torch.testing.assert_close(parallel.transpose(1, 2)[mask], naive.transpose(1, 2)[mask], **TOL)  # real rows


def check_step_equals_parallel(name: str, **options) -> None:
    attn, (q, k, v) = build(name, True, **options), inputs()
    state, outs = attn.init_state(B), []
    for t in range(N):
        out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outs.append(out)
    torch.testing.assert_close(torch.stack(outs, dim=2), attn(q, k, v), **TOL)


def check_prefill_equals_stepping(name: str, **options) -> None:
    """Where the attention prefills a prompt in one pass (`prefill_state`), the state equals stepping's, with one
    sequence padded at its end and one at its start."""
    attn, (q, k, v) = build(name, True, **options), inputs()
    if not hasattr(attn, "prefill_state"):
        return
    mask = padding_mask()
    mask[0, :4] = False
    with torch.no_grad():
        stepped = step_through(attn, q, k, v, mask)[1]
        prefilled = attn.prefill_state(k, v, mask, q=q)
    assert prefilled.keys() == stepped.keys()
    for key in stepped:
        torch.testing.assert_close(prefilled[key], stepped[key], **TOL, msg=key)


def check_causality(name: str, **options) -> None:
    attn, (q, k, v), t = build(name, True, **options), inputs(), 20
    later = [x.clone() for x in (q, k, v)]
    for x, y in zip(later, inputs(seed=1)):
        x[:, :, t + 1 :] = 5 * y[:, :, t + 1 :]
    for form in (attn.forward, attn.naive_forward):
        torch.testing.assert_close(form(*later)[:, :, : t + 1], form(q, k, v)[:, :, : t + 1], rtol=0, atol=1e-12)


def check_padding_invariance(name: str, causal: bool, **options) -> None:
    attn, (q, k, v), mask = build(name, causal, **options), inputs(), padding_mask()
    loud = [x.clone() for x in (q, k, v)]
    for x, y in zip(loud, inputs(seed=2)):
        x[-1, :, 30:] = 30 * y[-1, :, 30:]
    out = attn(*loud, key_padding_mask=mask)
    alone = attn(q[-1:, :, :30], k[-1:, :, :30], v[-1:, :, :30])
    torch.testing.assert_close(out[-1:, :, :30], alone, **TOL)
    torch.testing.assert_close(out[:-1], attn(q[:-1], k[:-1], v[:-1]), **TOL)


def check_gradients_match_naive(name: str, causal: bool, **options) -> None:
    attn, mask = build(name, causal, **options), padding_mask()
    weight = torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    weight = weight * mask[:, None, :, None]
    grads = []
    for form in (attn.forward, attn.naive_forward):
        q, k, v = inputs(requires_grad=True)
        attn.zero_grad(set_to_none=True)
        (form(q, k, v, key_padding_mask=mask) * weight).sum().backward()
        grads.append([q.grad, k.grad, v.grad] + [p.grad for p in attn.parameters()])
    for parallel, naive in zip(*grads):
        torch.testing.assert_close(parallel, naive, rtol=1e-9, atol=1e-10)


def prefilled_state_bytes(attn: torch.nn.Module, q, k, v, mask, lengths) -> dict[int, int]:
    """For each prompt length n: `prefill_state` over the first n tokens equals the state stepping through them
    leaves (with padding `mask` (B, N)); -> the bytes of that state per length (every row of the batch)."""
    sizes = {}
    with torch.no_grad():
        for n in lengths:
            _, stepped = step_through(attn, q[:, :, :n], k[:, :, :n], v[:, :, :n], mask[:, :n])
            prefilled = attn.prefill_state(k[:, :, :n], v[:, :, :n], mask[:, :n], q=q[:, :, :n])
            assert stepped.keys() == prefilled.keys()
            for name in stepped:
                torch.testing.assert_close(prefilled[name], stepped[name], msg=f"{name} after {n} tokens")
            sizes[n] = state_bytes(stepped)
    return sizes
