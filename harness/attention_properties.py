"""The properties every attention must have, checked on any registered name or "module:Class" string.

Used by `attnbench check` and by tests/test_attention_properties.py (the same functions, no copies):

    from attnbench.attention_properties import check_attention
    verdicts = check_attention("performer")          # every property, several (batch, heads), native on and off
    all(v.ok is not False for v in verdicts)

Each property builds the attention afresh (head_dim 16, seed 0, max_length 4096) for every (batch, heads)
shape in SHAPES and runs it with the native kernels on and off (`native.turned_off`; once where the attention never
asks for them), on inputs drawn from a fixed seed, and compares it with itself: what padding, later positions or a
second call must not change, and what a mask's form (bool, int, float 0/1) and the output's dtype must keep.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from attnbench.errors import UserError
from attnbench.kernels import native
from attnbench.recurrence import state_tensors, step_through
from attnbench.registry import ATTENTIONS, attention_capabilities, attention_entry, build_attention

HEAD_DIM, MAX_LENGTH = 16, 4096
SHAPES = ((1, 1), (2, 3), (3, 4))  # (batch, heads)
LENGTHS = (1, 4096)
# favor's causal form stabilises keys by the first real key, its non-causal form by the largest: the features' eps
# weighs differently against them, so the causal form's last output differs from the non-causal one by about 1e-3
CAUSAL_LEAK = {"performer": 1e-2, "random-features": 1e-2}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One property on one path: ok True (holds), False (fails, `detail` says where) or None (not claimed)."""

    prop: str
    native: bool | None  # None: the attention has no native path, so there is one pass only
    ok: bool | None
    detail: str = ""

    def line(self) -> str:
        """'holds   padding invariance (native on)' and the like, for `attnbench check`."""
        word = {True: "holds", False: "FAILS", None: "n/a"}[self.ok]
        path = {True: "native on", False: "native off", None: "PyTorch; no native path"}[self.native]
        return f"{word:<6} {self.prop} ({path})" + (f": {self.detail}" if self.detail else "")


class PropertyFailed(AssertionError):
    """A property does not hold; the message says for which input."""


def _build(name: str, heads: int, options: dict[str, Any], **extra: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention(
        name, head_dim=HEAD_DIM, num_heads=heads, max_length=MAX_LENGTH, seed=0, **{**options, **extra}
    )


def _qkv(batch: int, heads: int, n: int, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, HEAD_DIM, generator=g) for _ in range(3)]


def _close(
    actual: Tensor,
    expected: Tensor,
    what: str,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    conditioning: Tensor | float = 0.0,
) -> None:
    """`actual` within atol + rtol |expected| + `conditioning` (per element: see `rounding_sensitivity`)."""
    if actual.shape != expected.shape:
        raise PropertyFailed(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    error = (actual - expected).abs() - rtol * expected.abs() - conditioning
    if not torch.isfinite(actual).all() or error.max() > atol:
        raise PropertyFailed(f"{what}: differs by up to {float((actual - expected).abs().max()):.3g}")


SENSITIVITY_DRAWS = 4


def rounding_sensitivity(
    attn: torch.nn.Module, inputs: list[Tensor], mask: Tensor, dtype: torch.dtype, draws: int = SENSITIVITY_DRAWS
) -> Tensor:
    """How far the float64 output moves when q, k, v (B, H, N, D) are rounded to `dtype`: the largest change
    over `draws` relative perturbations of one unit in the last place, per output element (B, H, N, D).

    This is the output's conditioning at that precision: near 1 ulp of the output where it is well
    conditioned, and large where the output is a quotient of cancelling sums (signed features whose normaliser
    nears zero), where no computation at `dtype` can be closer."""
    ulp = torch.finfo(dtype).eps
    g = torch.Generator().manual_seed(0)
    wide = copy.deepcopy(attn).to(torch.float64)
    with torch.no_grad():
        exact = wide(*inputs, key_padding_mask=mask)
        change = torch.zeros_like(exact)
        for _ in range(draws):
            nudged = [t * (1 + ulp * (2 * torch.rand(t.shape, generator=g, dtype=t.dtype) - 1)) for t in inputs]
            change = torch.maximum(change, (wide(*nudged, key_padding_mask=mask) - exact).abs())
    return change


def padding_invariance(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Padded keys, however loud, change no real output, and a padded sequence equals itself unpadded."""
    attn = _build(name, heads, options).eval()
    n, real = 20, 12
    q, k, v = _qkv(batch, heads, n)
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[-1, real:] = False
    with torch.no_grad():
        out = attn(q, k, v, key_padding_mask=mask)
        loud = [t.clone() for t in (q, k, v)]
        for t in loud:
            t[-1, :, real:] = 30 * torch.randn(heads, n - real, HEAD_DIM, generator=torch.Generator().manual_seed(1))
        out_loud = attn(*loud, key_padding_mask=mask)
        alone = attn(q[-1:, :, :real], k[-1:, :, :real], v[-1:, :, :real])
    _close(out_loud[-1, :, :real], out[-1, :, :real], "real outputs after changing the padding")
    if batch > 1:
        _close(out_loud[:-1], out[:-1], "the other sequences' outputs", rtol=0, atol=0)
    _close(out[-1, :, :real], alone[0], "a padded sequence against the same sequence unpadded")
    only_padding = mask.clone()
    only_padding[-1] = False
    with torch.no_grad():
        if not torch.isfinite(attn(q, k, v, key_padding_mask=only_padding)).all():
            raise PropertyFailed("a sequence of padding only gives non-finite outputs")


def finite_at_lengths(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Finite outputs of the right shape at lengths 1 and 4096, with and without padding."""
    attn = _build(name, heads, options).eval()
    for n in LENGTHS:
        q, k, v = _qkv(batch, heads, n)
        mask = torch.ones(batch, n, dtype=torch.bool)
        mask[:, n - n // 3 :] = n == 1
        with torch.no_grad():
            for m in (None, mask):
                out = attn(q, k, v, key_padding_mask=m)
                if out.shape != (batch, heads, n, HEAD_DIM) or not torch.isfinite(out).all():
                    raise PropertyFailed(
                        f"length {n}{' padded' if m is not None else ''}: shape "
                        f"{tuple(out.shape)}, finite {bool(torch.isfinite(out).all())}"
                    )


def gradients(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Finite, nonzero gradients reach q, k, v and every trainable parameter (v alone for an attention that declares
    `reads_queries_keys = False`, such as `uniform`)."""
    attn = _build(name, heads, options).train()
    q, k, v = (t.requires_grad_() for t in _qkv(batch, heads, 24))
    mask = torch.ones(batch, 24, dtype=torch.bool)
    mask[0, 17:] = False
    out = attn(q, k, v, key_padding_mask=mask)
    (out * mask[:, None, :, None]).square().sum().backward()
    inputs = [("q", q), ("k", k), ("v", v)] if getattr(attn, "reads_queries_keys", True) else [("v", v)]
    named = inputs + [(n, p) for n, p in attn.named_parameters() if p.requires_grad]
    for what, t in named:
        if t.grad is None or not torch.isfinite(t.grad).all() or t.grad.abs().sum() == 0:
            raise PropertyFailed(f"the gradient of {what} is {'missing' if t.grad is None else 'zero or not finite'}")


def determinism(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """In evaluation, two calls and two builds with the same seed give bitwise the same outputs."""
    q, k, v = _qkv(batch, heads, 10)
    first, second = (_build(name, heads, options).eval() for _ in range(2))
    with torch.no_grad():
        out = first(q, k, v)
        _close(first(q, k, v), out, "a second call", rtol=0, atol=0)
        _close(second(q, k, v), out, "a second build with the same seed", rtol=0, atol=0)


def causality(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Built with causal=True: no output depends on later positions; the first sees itself, the last all."""
    attn = _build(name, heads, options, causal=True).eval()
    q, k, v = _qkv(batch, heads, 100)
    mask = torch.ones(batch, 100, dtype=torch.bool)
    mask[-1, 90:] = False
    changed = [t.clone() for t in (q, k, v)]
    for t in changed:
        t[:, :, 70:] = torch.randn(batch, heads, 30, HEAD_DIM, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = attn(q, k, v, key_padding_mask=mask)[:, :, :70]
        after = attn(*changed, key_padding_mask=mask)[:, :, :70]
        causal_out, plain_out = attn(q, k, v), _build(name, heads, options).eval()(q, k, v)
    rounding = 100**0.5 * rounding_sensitivity(attn, [t.double() for t in (q, k, v)], mask, q.dtype)[:, :, :70]
    _close(after, before, "outputs before position 70 after changing later positions", 0, 1e-5, rounding)
    with torch.no_grad():  # a normalised attention returns v_0 there; any causal one, what position 0 alone gives
        alone = (
            v[:, :, :1]
            if attention_capabilities(name, **options).normalised
            else attn(q[:, :, :1], k[:, :, :1], v[:, :, :1])
        )
    _close(causal_out[:, :, 0], alone[:, :, 0], "the first position, which sees only itself", atol=1e-4)
    _close(
        causal_out[:, :, -1],
        plain_out[:, :, -1],
        "the last position, which sees all",
        atol=max(1e-4, CAUSAL_LEAK.get(name, 0.0)),
    )


def mask_forms(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """A key padding mask means the same as bool, int64 and float 0/1 (a Hugging Face attention_mask); other values
    and a wrong shape are a ValueError or TypeError (attnbench.kernels.masks.key_padding_mask does all this)."""
    attn = _build(name, heads, options).eval()
    n = 12
    q, k, v = _qkv(batch, heads, n)
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[-1, 7:] = False
    with torch.no_grad():
        out = attn(q, k, v, key_padding_mask=mask)
        for dtype in (torch.float32, torch.int64):
            _close(attn(q, k, v, key_padding_mask=mask.to(dtype)), out, f"a {dtype} 0/1 mask against the bool mask")
        for what, bad in (
            ("a mask holding 0.5", torch.where(mask, 1.0, 0.5)),
            ("a mask of shape (batch, keys + 1)", torch.ones(batch, n + 1, dtype=torch.bool)),
        ):
            try:
                attn(q, k, v, key_padding_mask=bad)
            except (ValueError, TypeError):
                continue
            raise PropertyFailed(
                f"{what} is taken without a ValueError; normalise masks with attnbench.kernels.masks.key_padding_mask"
            )


def output_dtype_and_shape(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """The output has the values' shape and the inputs' dtype (float32 in, float32 out), in training and evaluation,
    as the layer after it expects."""
    attn = _build(name, heads, options)
    q, k, v = _qkv(batch, heads, 10)
    for mode in ("train", "eval"):
        getattr(attn, mode)()
        out = attn(q, k, v)
        if not isinstance(out, Tensor) or out.shape != v.shape or out.dtype != v.dtype:
            got = f"shape {tuple(out.shape)}, dtype {out.dtype}" if isinstance(out, Tensor) else type(out).__name__
            raise PropertyFailed(
                f"in {mode} mode the output has {got}; expected shape {tuple(v.shape)}, dtype "
                f"{v.dtype} (the model's next layer multiplies it by float32 weights)"
            )


def shared_heads(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Built with num_heads=1, a call on several heads gives each head what a call on that head alone gives."""
    attn = _build(name, 1, options).eval()
    q, k, v = _qkv(batch, heads, 20)
    with torch.no_grad():
        out = attn(q, k, v)
        alone = torch.cat([attn(q[:, h : h + 1], k[:, h : h + 1], v[:, h : h + 1]) for h in range(heads)], dim=1)
    _close(out, alone, f"{heads} heads against each head alone")


# --- the recurrent form of a causal attention (attnbench.recurrence) ---------------------------------------
RECURRENT_STEPS = 1030
RECURRENT_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}


def recurrent_matches_parallel(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Built with causal=True: stepping through 1,030 positions with `init_state` / `step` gives the parallel
    form's outputs at every real position, with one sequence padded at its end and, with two or more, one padded
    at its start: float64 within 1e-10, float32 within 1e-4 plus the output's own conditioning.

    The conditioning is `rounding_sensitivity` (how far float32 rounding of the inputs moves the float64 output)
    times sqrt(N): both forms sum N terms one rounding at a time, and N roundings grow as sqrt(N) times one
    (Higham's probabilistic bound). Well-conditioned outputs get nothing from it; a quotient of cancelling sums
    (trig features) gets what float32 can at best resolve there."""
    n = RECURRENT_STEPS
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[-1, n - 37 :] = False
    if batch > 1:
        mask[0, :5] = False
    real = mask[:, None, :, None].expand(batch, heads, n, HEAD_DIM)
    for dtype, tolerance in RECURRENT_TOLERANCE.items():
        attn = _build(name, heads, options, causal=True).to(dtype).eval()
        q, k, v = (t.to(dtype) for t in _qkv(batch, heads, n, seed=3))
        with torch.no_grad():
            parallel = attn(q, k, v, key_padding_mask=mask)[real]
            stepped = step_through(attn, q, k, v, mask)[0][real]
        allowance = tolerance * (1 + parallel.double().abs())
        if dtype != torch.float64:
            inputs = [t.double() for t in (q, k, v)]
            allowance += n**0.5 * rounding_sensitivity(attn, inputs, mask, dtype)[real]
        error = (stepped - parallel).double().abs() - allowance
        if not torch.isfinite(stepped).all() or error.max() > 0:
            worst = int(error.argmax())
            raise PropertyFailed(
                f"{dtype} recurrent outputs against the parallel form: differ by up to "
                f"{float((stepped - parallel).abs().max()):.3g} (at the worst, "
                f"{float(stepped[worst]):.6g} against {float(parallel[worst]):.6g}, "
                f"allowed {float(allowance[worst]):.3g})"
            )


def step_is_a_function(name: str, options: dict[str, Any], batch: int, heads: int) -> None:
    """Built with causal=True: `step` returns a new state and leaves the one it was given as it was, so one state
    can be stepped from twice with the same result (generation with branching, and the `decode` measurement,
    which times every step from one prefilled state, rely on it)."""
    attn = _build(name, heads, options, causal=True).eval()
    q, k, v = _qkv(batch, heads, 12, seed=4)
    with torch.no_grad():
        _, state = step_through(attn, q[:, :, :11], k[:, :, :11], v[:, :, :11])
        kept = [t.clone() for t in state_tensors(state)]
        first, _ = attn.step(q[:, :, 11], k[:, :, 11], v[:, :, 11], state)
        second, _ = attn.step(q[:, :, 11], k[:, :, 11], v[:, :, 11], state)
    for before, after in zip(kept, state_tensors(state), strict=True):
        if not torch.equal(after, before):  # bitwise, of any dtype (a KV cache keeps a bool mask of real keys)
            raise PropertyFailed("a step changed the state it was given in place; return a new state instead")
    _close(second, first, "a second step from the same state", rtol=0, atol=0)


Check = Callable[[str, dict[str, Any], int, int], None]
PROPERTIES: dict[str, Check] = {
    "padding invariance": padding_invariance,
    "finite at lengths 1 and 4096": finite_at_lengths,
    "gradients": gradients,
    "determinism in evaluation": determinism,
    "causality": causality,
    "one head's parameters shared by every head": shared_heads,
    "padding mask as bool, int or float 0/1": mask_forms,
    "output dtype and shape": output_dtype_and_shape,
    "recurrent form equals the parallel form": recurrent_matches_parallel,
    "step leaves its state unchanged": step_is_a_function,
}
CAUSAL_PROPERTIES = (
    "causality",
    "recurrent form equals the parallel form",
    "step leaves its state unchanged",
)  # n/a unless the attention claims causal


def check_property(
    name: str,
    prop: str,
    options: dict[str, Any] | None = None,
    shapes: Iterable[tuple[int, int]] = SHAPES,
    paths: Iterable[bool | None] | None = None,
) -> list[Verdict]:
    """One property of attention `name` (with `options`) over every (batch, heads) shape, on each path (native
    kernels on, off; by default both where the attention has a native path, else one pass, `None`): one Verdict per
    path; causality and the padding properties are n/a unless the attention claims them."""
    options = dict(options or {})
    paths = tuple(paths) if paths is not None else (True, False) if has_native_path(name, options) else (None,)
    caps = attention_entry(name).capabilities
    masked = prop in ("padding invariance", "padding mask as bool, int or float 0/1")
    if prop in CAUSAL_PROPERTIES and not caps.causal or masked and not caps.padding_mask:
        return [
            Verdict(prop, on, None, f"not claimed ({'causal' if prop in CAUSAL_PROPERTIES else 'padding_mask'}=no)")
            for on in paths
        ]
    verdicts = []
    for on in paths:
        with native.turned_off(on is False):
            verdicts.append(_verdict(name, prop, options, shapes, on))
    return verdicts


def has_native_path(name: str, options: dict[str, Any] | None = None) -> bool:
    """Whether the attention asks for the compiled kernels at all (a call with and without gradients, padded)."""
    asked = native.times_asked()
    try:
        attn = _build(name, 2, dict(options or {}))
        q, k, v = _qkv(1, 2, 8)
        mask = torch.ones(1, 8, dtype=torch.bool)
        with torch.no_grad():
            attn.eval()(q, k, v, key_padding_mask=mask)
        attn.train()(q, k, v, key_padding_mask=mask)
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - a crash shows in the properties; run both passes to be safe
        return True
    return native.times_asked() > asked


def _verdict(
    name: str, prop: str, options: dict[str, Any], shapes: Iterable[tuple[int, int]], on: bool | None
) -> Verdict:
    for batch, heads in shapes:
        try:
            PROPERTIES[prop](name, options, batch, heads)
        except UserError:
            raise
        except Exception as error:  # a crash is a failed property too, reported with where it happened
            return Verdict(prop, on, False, f"batch {batch}, heads {heads}: {type(error).__name__}: {error}")
    return Verdict(prop, on, True)


def pattern_attentions(name: str, options: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The distinct (attention, options) of a pattern of layers (a hybrid), without `causal`, which the checks set."""
    config = ATTENTIONS.make_config(name, head_dim=HEAD_DIM, max_length=MAX_LENGTH, **(options or {}))
    distinct = []
    for layer, layer_options in config.pattern():
        entry = (layer, {k: v for k, v in layer_options.items() if k != "causal"})
        if entry not in distinct:
            distinct.append(entry)
    return distinct


def check_attention(
    name: str, options: dict[str, Any] | None = None, shapes: Iterable[tuple[int, int]] = SHAPES
) -> list[Verdict]:
    """Every property of attention `name` (a registered name or "module:Class"), native kernels on and off where
    it has a native path, else once."""
    if attention_entry(name).capabilities.layer_pattern:  # a hybrid: each of its layers' attentions
        return [
            dataclasses.replace(verdict, prop=f"{layer}: {verdict.prop}")
            for layer, layer_options in pattern_attentions(name, options)
            for verdict in check_attention(layer, layer_options, shapes)
        ]
    paths = (True, False) if has_native_path(name, options) else (None,)
    return [v for prop in PROPERTIES for v in check_property(name, prop, options, tuple(shapes), paths)]
