"""The recurrent attentions against fla-core's own reference code (`fla/ops/<op>/naive.py`, fla-core pinned in the dev
extra, loaded by file path, run in float64): retention, GLA, DeltaNet, BASED's linear part, Gated DeltaNet, Mamba-2's
core, RWKV-7 and log-linear attention (over Mamba-2), each on random inputs with padding and, where the attention
has one, a gate from gentle to strong; DeltaNet and Gated DeltaNet also with `allow_neg_eigval` (beta doubled, as
fla's layers do before their kernels).

fla's naive functions take no padding mask; fla's layers drop padded tokens before their kernels (unpad_input), so a
padded sequence's real outputs are compared with the reference on the sequence without its padding (padding inside
a sequence too, where a padded position is a removed token: all but RWKV-7, whose token shift reads the zeroed
position, so it is padded at the start and end). Each case names the function it compares with; `max_difference`
gives the float64 figure the closing notes quote.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from fla_naive import in_float64, load_naive, oracle_name
from torch import nn

from attnbench.baselines.based.chunk import taylor_part
from attnbench.registry import build_attention

B, H, N, D = 2, 3, 29, 8
TOLERANCE = 1e-12
Tensor = torch.Tensor


def _bthd(x: Tensor) -> Tensor:
    """(B, H, N, ...) -> fla's (B, T, H, ...)."""
    return x.transpose(1, 2)


def retention(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """naive_retention(q, k, v): (B, H, T, D), gamma_h = 1 - 2^(-5-h), q scaled by D^-1/2."""
    return in_float64(load_naive("retention").naive_retention, q, k, v)


def gla(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """naive_recurrent_gla(q, k, v, gk): (B, T, H, K), gk our log gate from the raw keys, q scaled by K^-1/2."""
    naive = load_naive("gla").naive_recurrent_gla
    return _bthd(in_float64(naive, *(_bthd(x) for x in (q, k, v, attn.log_gate(k))))[0])


def _beta(attn: nn.Module, k: Tensor) -> Tensor:
    """DeltaNet's write strength from the raw keys, written out: sigmoid(k . w_beta + b_beta), (B, H, N), times 2
    with `allow_neg_eigval` (fla's layers: `beta = beta * 2.`)."""
    return torch.sigmoid(k @ attn.beta_weight + attn.beta_bias)[..., 0] * (2 if attn.cfg.allow_neg_eigval else 1)


def deltanet(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """delta_rule_recurrence(q, k, v, beta): (B, H, T, K), q and k L2-normalised, q scaled by K^-1/2."""
    qn, kn = (nn.functional.normalize(x, dim=-1) for x in (q, k))
    return in_float64(load_naive("delta_rule").delta_rule_recurrence, qn, kn, v, _beta(attn, k))[0]


def gated_deltanet(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """naive_recurrent_gated_delta_rule(q, k, v, beta, g): (B, T, H, K), g = -exp(A_log) softplus(k . w_a + dt_bias)
    written out from the gate's parameters, q scaled by K^-1/2."""
    decay = attn.decay
    g = -decay.a_log.exp() * nn.functional.softplus(k @ decay.weight + decay.dt_bias)
    qn, kn = (nn.functional.normalize(x, dim=-1) for x in (q, k))
    naive = load_naive("gated_delta_rule").naive_recurrent_gated_delta_rule
    return _bthd(in_float64(naive, *(_bthd(x) for x in (qn, kn, v, _beta(attn, k), g[..., 0])))[0])


def mamba2(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """naive_recurrent_simple_gla(C, B, dt x, dt A, scale=1): (B, T, H, K), g (B, T, H); then y + D x and the
    gate silu(x W_z), written out from the parameters."""
    decay = attn.decay
    dt = nn.functional.softplus(v @ decay.weight + decay.dt_bias)
    g = -decay.a_log.exp() * dt
    naive = load_naive("simple_gla").naive_recurrent_simple_gla
    core = _bthd(in_float64(naive, *(_bthd(x) for x in (q, k, dt * v, g[..., 0])), scale=1.0)[0])
    return (core + attn.skip * v) * nn.functional.silu(v @ attn.gate)


def log_linear(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """naive_log_linear_attn(C, B, dt x, dt A, lambda, scale=1): (B, T, H, D), g (B, T, H), level_scales (B, T, H, L)
    with lambda = softplus(L x . w_l) written out; then y + D x and the gate silu(x W_z), as Mamba-2's."""
    decay = attn.decay
    dt = nn.functional.softplus(v @ decay.weight + decay.dt_bias)
    g = -decay.a_log.exp() * dt
    scales = nn.functional.softplus(attn.level_scale * (v @ attn.level_weight))
    naive = load_naive("log_linear_attn").naive_log_linear_attn
    core = _bthd(in_float64(naive, *(_bthd(x) for x in (q, k, dt * v, g[..., 0], scales)), scale=1.0))
    return (core + attn.skip * v) * nn.functional.silu(v @ attn.gate)


def rwkv7(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """dplr_recurrence(r, k, v, a = -kk, b = kk a, gk): (B, H, T, K), its q scaled by K^-1/2 (RWKV-7 reads with
    scale 1: r is given times K^1/2). The inputs are the attention's own (token shift, decay, rate: tests/
    test_rwkv7.py); the recurrence is fla's."""
    r, key, value, alpha, beta, g = attn.gated_inputs(q, k, v, None)
    return in_float64(
        load_naive("generalized_delta_rule/dplr").dplr_recurrence, r * D**0.5, key, value, alpha, beta, g
    )[0]


@dataclasses.dataclass(frozen=True)
class Case:
    """An attention, the fla op and function it is held to, how to set its gate's strength, the padding it takes."""

    name: str
    op: str
    function: str
    reference: Callable[[nn.Module, Tensor, Tensor, Tensor], Tensor]
    strengths: dict[str, Callable[[nn.Module], None]]
    options: dict = dataclasses.field(default_factory=dict)
    inner_padding: bool = True


def _fill(*settings: tuple[str, float]) -> Callable[[nn.Module], None]:
    def apply(attn: nn.Module) -> None:
        with torch.no_grad():
            for path, value in settings:
                module, _, name = path.rpartition(".")
                getattr(attn.get_submodule(module) if module else attn, name).fill_(value)

    return apply


AS_BUILT = {"as built": _fill()}
CASES = [
    Case("retention", "retention", "naive_retention", retention, AS_BUILT),
    Case(
        "gla",
        "gla",
        "naive_recurrent_gla",
        gla,
        # tau = 1: alpha = sigmoid(bias + k W1 W2) from 0.9975 to the floor exp(-5)
        {
            "gentle": _fill(("gate_bias", 6.0)),
            "medium": _fill(("gate_bias", 0.0)),
            "strong": _fill(("gate_bias", -8.0)),
        },
        {"gate_temperature": 1.0},
    ),
    Case(
        "deltanet",
        "delta_rule",
        "delta_rule_recurrence",
        deltanet,
        {"weak writes": _fill(("beta_bias", -3.0)), "strong writes": _fill(("beta_bias", 3.0))},
    ),
    Case(
        "deltanet",
        "delta_rule",
        "delta_rule_recurrence",
        deltanet,
        # beta = 2 sigmoid(bias + k . w): near 2, the transition's eigenvalue 1 - beta near -1
        {"negative eigenvalues, weak": _fill(("beta_bias", -3.0)), "negative eigenvalues": _fill(("beta_bias", 3.0))},
        {"allow_neg_eigval": True},
    ),
    Case(
        "gated-deltanet",
        "gated_delta_rule",
        "naive_recurrent_gated_delta_rule",
        gated_deltanet,
        # A = exp(a_log), dt ~ softplus(dt_bias = 0) = 0.69: alpha from exp(-0.013) to exp(-14)
        {
            "gentle": _fill(("decay.a_log", -4.0), ("decay.dt_bias", 0.0)),
            "medium": _fill(("decay.a_log", 0.0), ("decay.dt_bias", 0.0)),
            "strong": _fill(("decay.a_log", 3.0), ("decay.dt_bias", 0.0)),
        },
    ),
    Case(
        "gated-deltanet",
        "gated_delta_rule",
        "naive_recurrent_gated_delta_rule",
        gated_deltanet,
        {
            "negative eigenvalues, gentle": _fill(("decay.a_log", -4.0), ("decay.dt_bias", 0.0), ("beta_bias", 3.0)),
            "negative eigenvalues, medium": _fill(("decay.a_log", 0.0), ("decay.dt_bias", 0.0)),
        },
        {"allow_neg_eigval": True},
    ),
    Case(
        "mamba2",
        "simple_gla",
        "naive_recurrent_simple_gla",
        mamba2,
        {
            "gentle": _fill(("decay.a_log", -4.0), ("decay.dt_bias", 0.0)),
            "as built": _fill(),
            "strong": _fill(("decay.a_log", 3.0), ("decay.dt_bias", 0.0)),
        },
    ),
    Case(
        "log-linear",
        "log_linear_attn",
        "naive_log_linear_attn",
        log_linear,
        {
            "gentle": _fill(("decay.a_log", -4.0), ("decay.dt_bias", 0.0)),
            "as built": _fill(),
            "strong": _fill(("decay.a_log", 3.0), ("decay.dt_bias", 0.0)),
        },
        {"chunk_size": 4},
    ),
    Case(
        "rwkv7",
        "generalized_delta_rule/dplr",
        "dplr_recurrence",
        rwkv7,
        # the decay's bias: w from 0.9998 to RWKV-7's strongest, exp(-e^(-1/2)) = 0.545
        {"gentle": _fill(("decay_bias", -8.0)), "as built": _fill(), "strong": _fill(("decay_bias", 8.0))},
        inner_padding=False,
    ),
]
PARAMS = [pytest.param(case, strength, id=f"{case.name}-{strength}") for case in CASES for strength in case.strengths]


def _padding(inner: bool) -> Tensor:
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, [3, 4, 11, 20] if inner else [0, 1, 2]] = False  # inside the sequence, or at its start
    mask[1, 22:] = False  # at its end
    return mask


def max_difference(case: Case, strength: str) -> float:
    """The largest float64 difference between the attention (output norm off) on padded inputs and fla's reference
    on each sequence without its padding."""
    attn = build_attention(case.name, head_dim=D, num_heads=H, causal=True, output_norm=False, seed=1, **case.options)
    attn = attn.double()
    case.strengths[strength](attn)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3))
    mask = _padding(case.inner_padding)
    with torch.no_grad():
        out = attn(q, k, v, key_padding_mask=mask)
        worst = 0.0
        for row in range(B):
            part = [x[row : row + 1, :, mask[row]] for x in (q, k, v)]
            expected = case.reference(attn, *part)
            worst = max(worst, float((out[row : row + 1, :, mask[row]] - expected).abs().max()))
    return worst


@pytest.mark.parametrize("case, strength", PARAMS)
def test_the_attention_equals_fla_cores_reference_in_float64(case: Case, strength: str):
    error = max_difference(case, strength)
    assert error < TOLERANCE, f"{oracle_name(case.op)} {case.function}: max float64 difference {error:.3g}"


def test_bases_linear_part_equals_fla_cores_taylor_attention_in_float64():
    """BASED's keys beyond its window weigh 1 + s + s^2/2 through the Taylor features and the shared causal kernel
    (`taylor_part` with no window); fla's naive_parallel_based computes the same sums from the quadratic form:
    numerator (use_norm=False) and normaliser (v = 1)."""
    attn = build_attention("based", head_dim=D, num_heads=H, feature_dim=4, causal=True, seed=1).double()
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        qp, kp = q @ attn.project_q, k @ attn.project_k
        values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        ours = taylor_part(attn.feature_map(qp), attn.feature_map(kp), values, 0, True, None)
    naive = load_naive("based").naive_parallel_based
    numerator = in_float64(naive, qp, kp, v, use_norm=False)
    normaliser = in_float64(naive, qp, kp, torch.ones_like(v[..., :1]), use_norm=False)
    error = float(max((ours[..., :-1] - numerator).abs().max(), (ours[..., -1:] - normaliser).abs().max()))
    assert error < 1e-11, f"{oracle_name('based')} naive_parallel_based: max float64 difference {error:.3g}"
