"""The one linear-attention kernel every feature-map attention shares, and the feature-map interface.

out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

(sums over j <= i in the causal form). Masking (padded keys contribute nothing), the normaliser
guard, the random-feature redraw schedule and speed live here, once.

Four renderings of the same formula:
- `linear_attention(phi_q, phi_k, v)`: from materialised features (B, H, N, M); differentiable, also
  causal. Used for the causal form with gradients.
- `factored_linear_attention(q_chunk, k_chunk, v)`: the same, non-causal, from features in factored form
  (see below) without materialising them: the training path in PyTorch.
- `fused_linear_attention(spec, q, k, v)`: non-causal, through the fused CPU kernels (`attnbench.baselines.native`)
  where the map gives a `native_spec`: without gradients, and with them where its projection takes none.
- `chunked_linear_attention(feature_map, q, k, v)`: without gradients (inference), non-causal; the fused
  kernels where they support the map, otherwise in PyTorch (`pytorch_chunked_attention`) as follows. Walks
  the sequence in blocks of rows whose (rows, M) feature block stays in cache: key features of a block
  -> accumulate phi_k^T v and sum phi_k; then query features of a block -> phi_q @ state. Never holds
  an (N, M) tensor, so memory is O(N D + M D) and every feature element is touched while in cache.
  Feature maps hand blocks over as `FeatureChunk`s: values with a constant scale and offset kept
  apart (applied to the small (M, D) state instead of every feature), per-row weights (folded into
  the block's values v, C x D, instead of the C x M features) and, for maps whose key features carry
  a stabiliser over the whole sequence (favor), a per-block log-scale that the kernel combines across
  blocks exactly (a running maximum, as in flash attention). Maps write a block's values into a
  per-thread workspace the kernel hands them (`out`), so the loop over blocks allocates nothing of
  the features' size: fresh memory costs page faults that would otherwise take a third of the time.

`choose_route` is the one place that picks among them for a call (and `LinearKernelAttention` counts what
it picked, `attnbench.baselines.routes`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import inspect
import math
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.baselines import native
from attnbench.baselines.masks import key_padding_mask as padding_mask
from attnbench.baselines.native import NativeSpec
from attnbench.baselines.routes import RecordsRoutes

CAUSAL_CHUNK = 64  # causal form: exact quadratic inside chunks of this many positions, prefix sums across
CHUNK_ELEMENTS = 2**21  # chunked kernel (CPU): floats of one block's features, inputs and values (8 MiB)
MIN_CHUNK_ROWS = 64


def no_grad_recorded(*tensors: Tensor) -> bool:
    """Whether autograd records nothing through these tensors (grad mode off, or none requires grad)."""
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


@dataclasses.dataclass
class FeatureChunk:
    """Features of a block of rows in factored form: phi = scale * (values * row_weights * exp(log_scale - L) + offset).

    values: (B, H, C, M), owned by the receiver (the kernel may overwrite it); scale, offset: floats,
    the same for every block of a sequence; row_weights: None (all 1) or (B, H, C, 1), >= 0;
    log_scale: None, or (B, H, 1, 1) for key blocks (may be -inf for a block without real keys), L
    being its maximum over all blocks of the sequence. With a single block covering the whole
    sequence, phi = scale * (values * row_weights + offset).
    """

    values: Tensor
    scale: float = 1.0
    offset: float = 0.0
    log_scale: Tensor | None = None
    row_weights: Tensor | None = None

    def materialise(self) -> Tensor:
        """phi for a block that is the whole sequence -> (B, H, C, M); differentiable."""
        phi = self.values if self.row_weights is None else self.values * self.row_weights
        phi = phi if self.scale == 1.0 else phi * self.scale
        return phi if self.offset == 0.0 else phi + self.scale * self.offset


class FeatureMap(nn.Module):
    """A map phi: (B, H, N, D) -> (B, H, N, M) applied to queries and keys (fast-transformers style).

    The contract is the features, and optionally a declarative spec of their fast form:
    - `forward(x)`: the features of x, queries and keys alike (as fast-transformers' and fla's maps);
      a map whose keys differ (a stabiliser over the sequence, padding) overrides `forward_keys(x, mask)`;
    - `native_spec(x)` (optional): a `NativeSpec` when the fused CPU kernels compute exactly these
      features; the dispatcher (`choose_route`) decides whether they run and records what ran.
    Everything else is optional: `num_features` (else measured on a row when needed), `new_feature_map`
    (random maps: redraw; evaluation stays deterministic), `cost(n, d) -> {"flops": per (batch, head) for n
    queries and n keys, "bytes": its parameters}`, and the factored form for speed in PyTorch
    (`query_chunk` / `key_chunk` -> `FeatureChunk`, with `out` a scratch buffer they may write values into
    when no gradient is recorded). A map may implement any one of `forward`, `forward_queries` or
    `query_chunk`; the others follow from it, without recursion.
    """

    num_features: int
    _derived: dict[str, Tensor] | None = None
    _kept: dict[str, tuple[tuple, Tensor, list[Tensor]]] | None = None

    def new_feature_map(self) -> None:
        """Redraw random parameters (no-op for deterministic maps)."""

    def derived(self, name: str, make: Callable[[], Tensor], *sources: Tensor, key: Hashable = None) -> Tensor:
        """make(), computed once per kernel call inside `holding_derived` (e.g. scaled omegas shared by every
        block), afresh otherwise.

        With `sources`, the tensors make() reads, and `key`, anything else it depends on (a dtype, a width): kept
        across calls as long as no gradient is recorded through the sources and they are unchanged: same storage
        (held here, so its address is not reused) and version counter (which every in-place write, optimizer step,
        `load_state_dict` and redraw moves). Writes through `.data` escape the counter; assigning `.data` does not.
        Spares each call the layout copy of the weights (about 0.1 ms, a twentieth of a short call)."""
        if sources and no_grad_recorded(*sources):
            stamp = (key, *((t.device, t.data_ptr(), t._version) for t in sources))
            held = (self._kept or {}).get(name)
            if held is not None and held[0] == stamp:
                return held[1]
            value = make()
            if self._kept is None:
                self._kept = {}
            self._kept[name] = (stamp, value, [t.detach() for t in sources])  # the aliases keep the storages alive
            return value
        cache = self._derived
        if cache is None:
            return make()
        if name not in cache:
            cache[name] = make()
        return cache[name]

    @contextlib.contextmanager
    def holding_derived(self) -> Iterator[None]:
        """Within: one no-gradient kernel call, parameters constant, so `derived` tensors are shared."""
        self._derived = {}
        try:
            yield
        finally:
            self._derived = None

    def native_spec(self, x: Tensor) -> NativeSpec | None:
        """What the fused CPU kernel (`attnbench.baselines.native`) needs to compute this map's features of x (B, H, N, D)
        without gradients; None (the default) keeps the PyTorch path."""
        return None

    def _overrides(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(FeatureMap, name)

    def forward(self, x: Tensor) -> Tensor:
        """Features of x (B, H, N, D) -> (B, H, N, M); maps implement this (or `forward_queries`, `query_chunk`)."""
        if self._overrides("query_chunk"):
            return self.query_chunk(x).materialise()
        if self._overrides("forward_queries"):
            return self.forward_queries(x)
        raise NotImplementedError(
            f"{type(self).__name__} computes no features: a FeatureMap implements forward(x) "
            f"-> (B, H, N, M) (or forward_queries / query_chunk)"
        )

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        """Query features of a block of rows x (B, H, C, D), in factored form."""
        return FeatureChunk(self.forward_queries(x))

    def key_chunk(self, x: Tensor, key_padding_mask: Tensor | None = None, out: Tensor | None = None) -> FeatureChunk:
        """Key features of a block of rows; `key_padding_mask` (B, C), True = real. Default: position by position."""
        return FeatureChunk(self.forward_keys(x, key_padding_mask))

    def forward_queries(self, x: Tensor) -> Tensor:
        """Query features of a whole sequence: (B, H, N, D) -> (B, H, N, M)."""
        if self._overrides("forward") or self._overrides("query_chunk"):
            return self(x)
        raise NotImplementedError(
            f"{type(self).__name__} computes no features: a FeatureMap implements forward(x) "
            f"-> (B, H, N, M) (or forward_queries / query_chunk)"
        )

    def forward_keys(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Key features; `key_padding_mask` (B, N), True = real, lets a map exclude padding from statistics."""
        if self._overrides("key_chunk"):
            return self.key_chunk(x, key_padding_mask).materialise()
        return self.forward_queries(x)

    causal_anchor: bool = False  # causal key features depend on the first real key (favor's stabiliser)

    def causal_key_chunk(
        self, x: Tensor, key_padding_mask: Tensor | None = None, anchor: Tensor | None = None
    ) -> tuple[FeatureChunk, Tensor | None]:
        """Key features of the causal form, where no later key may move an earlier key's features: x (B, H, C, D)
        -> (chunk, anchor). A map whose keys carry a stabiliser over the sequence (`causal_anchor`) fixes it by
        the first real key and returns it as `anchor` (B, H, 1, 1) (-inf before any real key), which a later
        block (one token when stepping) takes back; a map of position-by-position features returns None."""
        return FeatureChunk(self.forward_keys(x, key_padding_mask)), None


def feature_count(feature_map: FeatureMap, x: Tensor) -> int:
    """M of the map's features of x (B, H, N, D): its `num_features`, else measured on one row."""
    m = getattr(feature_map, "num_features", None)
    if m is None:
        with torch.no_grad():
            m = feature_map.query_chunk(x[:1, :, :1]).values.shape[-1]
    return int(m)


def _guard(denominator: Tensor, eps: float) -> Tensor:
    """Keep the normaliser's sign and at least eps away from zero (trig features can make it negative)."""
    return torch.where(denominator >= 0, denominator.clamp_min(eps), denominator.clamp_max(-eps))


def _padding_weights(v: Tensor, key_padding_mask: Tensor | None) -> Tensor | None:
    """(B, 1, N, 1) 1 for real keys, 0 for padding, in v's dtype; None without a mask."""
    return None if key_padding_mask is None else key_padding_mask[:, None, :, None].to(v.dtype)


def _values_and_ones(v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """[v, 1] (B, H, N, D + 1), whose last column accumulates the normaliser, with padded keys' rows zeroed."""
    weights = _padding_weights(v, key_padding_mask)
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    return values if weights is None else values * weights


def linear_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    causal: bool = False,
    chunk: int = CAUSAL_CHUNK,
) -> Tensor:
    """Normalised linear attention from features.

    phi_q, phi_k: (B, H, N, M); v: (B, H, N, D); key_padding_mask: (B, N) bool, True = real token.
    Returns (B, H, N, D). Padded keys are removed through their values and weight (one pass over v,
    not over phi_k); `causal` restricts query i to keys j <= i, exactly inside blocks of `chunk` positions
    and by prefix sums across them (chunk >= N: the quadratic parallel form).
    """
    if not causal:
        return factored_linear_attention(FeatureChunk(phi_q), FeatureChunk(phi_k), v, key_padding_mask, eps)
    out = _causal_products(phi_q, phi_k, _values_and_ones(v, key_padding_mask), chunk)
    return out[..., :-1] / _guard(out[..., -1:], eps)


def factored_linear_attention(
    q_chunk: FeatureChunk, k_chunk: FeatureChunk, v: Tensor, key_padding_mask: Tensor | None = None, eps: float = 1e-6
) -> Tensor:
    """Non-causal `linear_attention` from whole-sequence features in factored form; differentiable.

    Row weights, scales and offsets act on the small (M, D + 1) state and on (N, D + 1) products, never on
    the (N, M) feature values: phi_k^T [v, 1] = s_k (values_k^T (w [v, 1]) + o_k sum_j w_j [v_j, 1]), w the
    key row weights times the padding mask, and phi_q S = s_q (w_q (values_q S) + o_q 1^T S). Saves the
    passes (and the saved activations) that materialising phi = s (values w + o) would cost in training.
    """
    real = _values_and_ones(v, key_padding_mask)
    weighted = real if k_chunk.row_weights is None else real * k_chunk.row_weights
    # (B, H, M, D + 1), as the transpose of weighted^T values: the (N, M) values stay the untransposed operand,
    # so their gradient comes back contiguous (a transposed one made exp's backward several times slower);
    # the same in `_causal_products`
    state = (weighted.transpose(-2, -1) @ k_chunk.values).transpose(-2, -1)
    if k_chunk.offset != 0.0:
        state = state + k_chunk.offset * real.sum(dim=-2, keepdim=True)
    state = state * k_chunk.scale
    out = q_chunk.values @ state  # (B, H, N, D + 1), never N x N
    if q_chunk.row_weights is not None:
        out = out * q_chunk.row_weights
    if q_chunk.offset != 0.0:
        out = out + q_chunk.offset * state.sum(dim=-2, keepdim=True)
    out = out * q_chunk.scale
    return out[..., :-1] / _guard(out[..., -1:], eps)


def _causal_products(phi_q: Tensor, phi_k: Tensor, values: Tensor, chunk: int = CAUSAL_CHUNK) -> Tensor:
    """sum_{j <= i} (phi_q_i . phi_k_j) values_j for every i: (B, H, N, M), (B, H, N, E) -> (B, H, N, E).

    Chunked prefix sums: O(N (chunk + M) E) time, O(N M E / chunk) memory for the running states.
    """
    b, h, n, m = phi_q.shape
    pad = (-n) % chunk
    if pad:
        phi_q, phi_k, values = (nn.functional.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, values))
    c = (n + pad) // chunk
    q_c, k_c = phi_q.view(b, h, c, chunk, m), phi_k.view(b, h, c, chunk, m)
    v_c = values.view(b, h, c, chunk, values.shape[-1])
    states = (v_c.transpose(-2, -1) @ k_c).transpose(-2, -1)  # (B, H, C, M, E): each chunk's sum of phi_k v^T
    earlier = states.cumsum(dim=2) - states  # exclusive prefix: chunks before this one
    within = (q_c @ k_c.transpose(-2, -1)).tril() @ v_c  # exact inside the chunk
    out = q_c @ earlier + within
    return out.reshape(b, h, c * chunk, -1)[:, :, :n]


def chunk_rows(q: Tensor, num_features: int) -> int:
    """Rows per block of the chunked kernel: on CPU, a block's features, inputs and values ((B*H, rows, M + 2D)
    floats) within CHUNK_ELEMENTS (a few thousand rows, where MKL runs the block's skinny products fastest
    here; a few hundred, which would stay in L2, ran them 1.3-1.7x slower); all rows on GPU."""
    b, h, n, d = q.shape
    if q.device.type != "cpu":
        return n
    return max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS // max(1, b * h * (num_features + 2 * d)) // 16 * 16)


def split_rows(n: int, rows: int, device: torch.device) -> list[tuple[int, int]]:
    """Contiguous ranges of whole blocks, one per CPU thread (one range on GPU or with one thread)."""
    parts = torch.get_num_threads() if device.type == "cpu" else 1
    blocks = -(-n // rows)
    per_part = -(-blocks // max(1, min(parts, blocks)))
    return [(start, min(n, start + per_part * rows)) for start in range(0, n, per_part * rows)]


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def run_on_threads(fn: Callable[[int, int], Any], ranges: list[tuple[int, int]]) -> list[Any]:
    """fn(start, stop) for each range: in the calling thread for one range, else each on its own thread with
    torch single-threaded inside, so the threads never meet at a barrier until they are all done (per-operation
    parallel regions on small blocks cost more than the block's work, and stall whenever another process holds
    a core). torch's thread count is global, so it is restored afterwards."""
    if len(ranges) == 1:
        return [fn(*ranges[0])]
    global _POOL
    threads = torch.get_num_threads()
    if _POOL is None or _POOL._max_workers < len(ranges):
        _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="attnbench-kernel")

    def single_threaded(bounds: tuple[int, int]) -> Any:
        torch.set_num_threads(1)
        with torch.no_grad():
            return fn(*bounds)

    try:
        return list(_POOL.map(single_threaded, ranges))
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to `count` within, restored after. For the small operations around the
    fused kernels: too small to gain from threads, and torch's workers, spinning for a while after a parallel
    operation, would take the cores from the kernels' own helper threads in the next call (measured with a
    std::thread build of the kernels: 40-60% slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_SCRATCH = threading.local()


def scratch(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, slot: int = 0) -> Tensor:
    """A per-thread CPU scratch tensor of `shape`, reused across blocks and calls (its contents are garbage).

    One buffer per thread and slot (the kernel hands maps slot 0; maps take 1 for a second block-sized
    temporary, 2 and 3 for sin and cos; Nystromformer's convolution takes 2 outside the block loop), grown
    when a larger one is asked for, so the block loop never maps fresh memory; on other devices a new
    tensor (their caching allocators already reuse memory)."""
    if device.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    size = math.prod(shape)
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    held = buffers.get((dtype, slot))
    if held is None or held.numel() < size:
        held = buffers[dtype, slot] = torch.empty(size, dtype=dtype)
    return held[:size].view(shape)


def _takes_out(method: Callable[..., Any]) -> bool:
    """Whether a feature map's chunk method accepts the `out` scratch buffer (plugins written before it may not)."""
    try:
        return "out" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


class _KeyState:
    """Running sums over key blocks: A = sum phi~_j v_j^T (B*H, M, D) and a = sum phi~_j (B*H, M, 1), where
    phi~ = values * row_weights * exp(log_scale - running max); scale and offset are applied by `finish`."""

    def __init__(self) -> None:
        self.kv: Tensor | None = None
        self.ksum: Tensor | None = None
        self.log_max: Tensor | None = None
        self.scale, self.offset = 1.0, 0.0

    def add(self, chunk: FeatureChunk, v: Tensor, padded: Tensor | None) -> None:
        """Accumulate one block: chunk.values (B, H, C, M), v (B, H, C, D), padded (B, 1, C, 1) True = padding.

        Row weights and the block's log-scale are folded into v (C x D), never into the C x M values; the sums
        grow in place (baddbmm_), rescaled first when the block raises the running maximum."""
        values = chunk.values
        if padded is not None:
            values = values.masked_fill_(padded, 0.0)  # fill, not multiply: padded features may be inf
        self.scale, self.offset = chunk.scale, chunk.offset
        weights = chunk.row_weights  # (B, H, C, 1) or None
        if chunk.log_scale is not None:
            factor = self._raise_max(chunk.log_scale.flatten(0, 1))  # (B*H, 1, 1): exp(block max - running max)
            factor = factor.view(*chunk.log_scale.shape)
            weights = factor.expand(*values.shape[:-2], 1, 1) if weights is None else weights * factor
        vals3, v3 = values.flatten(0, 1), v.flatten(0, 1)
        if self.kv is None:
            heads, m, d = vals3.shape[0], vals3.shape[2], v3.shape[2]
            self.kv, self.ksum = v3.new_zeros(heads, m, d), v3.new_zeros(heads, m, 1)
        if weights is None:
            self.kv.baddbmm_(vals3.transpose(1, 2), v3)
            self.ksum.add_(vals3.sum(dim=1).unsqueeze(-1))  # a sum: much cheaper than a matrix-vector product
        else:
            self.kv.baddbmm_(vals3.transpose(1, 2), (v * weights).flatten(0, 1))
            self.ksum.baddbmm_(vals3.transpose(1, 2), weights.expand(*values.shape[:-1], 1).flatten(0, 1))

    def _raise_max(self, log_scale: Tensor) -> Tensor:
        """Take a block's log-scale (B*H, 1, 1) into the running maximum, rescaling the sums so far to it;
        returns the block's factor exp(log_scale - running max) (0 for a block without real keys)."""
        new = log_scale if self.log_max is None else torch.maximum(self.log_max, log_scale)
        safe = new.masked_fill(new == -math.inf, 0.0)  # no real key yet: every term is 0
        if self.kv is not None:
            old_factor = torch.exp(self.log_max - safe)
            self.kv.mul_(old_factor)
            self.ksum.mul_(old_factor)
        self.log_max = new
        return torch.exp(log_scale - safe)

    def merge(self, other: "_KeyState") -> None:
        """Add the sums of another range of blocks."""
        if other.kv is None:
            return
        self.scale, self.offset = other.scale, other.offset
        kv, ksum = other.kv, other.ksum
        if other.log_max is not None:
            factor = self._raise_max(other.log_max)
            kv, ksum = kv * factor, ksum * factor
        if self.kv is None:
            self.kv, self.ksum = kv, ksum
        else:
            self.kv.add_(kv)
            self.ksum.add_(ksum)

    def finish(self, v: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor]:
        """phi_k^T v (B*H, M, D) and sum_j phi_k_j (B*H, M, 1), scale and offset applied."""
        kv, ksum = self.kv, self.ksum
        if self.offset != 0.0:
            b, h = v.shape[:2]
            if weights is None:
                real_v, count = v, float(v.shape[-2])
            else:
                real_v = v * weights
                count = weights.sum(dim=-2, keepdim=True).expand(b, h, 1, 1).flatten(0, 1)  # (B*H, 1, 1)
            kv = kv + self.offset * real_v.sum(dim=-2, keepdim=True).flatten(0, 1)
            ksum = ksum + self.offset * count
        return kv * self.scale, ksum * self.scale


@torch.no_grad()
def chunked_linear_attention(
    feature_map: FeatureMap,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    rows: int | None = None,
) -> Tensor:
    """The non-causal kernel without gradients: q, k (B, H, N, Dk), v (B, H, N, D) -> (B, H, N, D), by the route
    `choose_route` picks: the fused kernels (`fused_linear_attention`) or `pytorch_chunked_attention`; given
    `rows`, always the latter with that many rows per block. Equals `linear_attention(feature_map.forward_queries(q),
    feature_map.forward_keys(k, mask), v, mask, eps)` up to rounding."""
    if rows is None:
        threads = torch.get_num_threads()
        with feature_map.holding_derived(), torch_threads(1):  # the map's derived weights too; see `torch_threads`
            route, spec = choose_route(feature_map, q, k, v)
        if route == "native":
            return fused_linear_attention(spec, q, k, v, key_padding_mask, eps, threads)
    return pytorch_chunked_attention(feature_map, q, k, v, key_padding_mask, eps, rows)


@torch.no_grad()
def pytorch_chunked_attention(
    feature_map: FeatureMap,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    rows: int | None = None,
) -> Tensor:
    """The non-causal kernel block by block in PyTorch, `rows` per block (default `chunk_rows`). On CPU the
    sequence is split into one range of blocks per thread (`run_on_threads`): key sums per range, merged, then
    each range's queries. A block's features go into the thread's `scratch` buffer when the map takes `out`."""
    b, h, n, d = v.shape
    m = feature_count(feature_map, q)
    rows = rows or chunk_rows(q, m)
    ranges = split_rows(n, rows, q.device)
    key_out, query_out = _takes_out(feature_map.key_chunk), _takes_out(feature_map.query_chunk)

    def block_buffer(size: int, takes_out: bool) -> dict[str, Tensor]:
        return {"out": scratch((b, h, size, m), q.dtype, q.device)} if takes_out else {}

    def key_sums(first: int, stop: int) -> _KeyState:
        state = _KeyState()
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            mask = None if key_padding_mask is None else key_padding_mask[:, block]
            chunk = feature_map.key_chunk(k[:, :, block], mask, **block_buffer(block.stop - start, key_out))
            state.add(chunk, v[:, :, block], None if mask is None else ~mask[:, None, :, None])
        return state

    out = torch.empty(b, h, n, d, dtype=v.dtype, device=v.device)
    out3 = out.view(b * h, n, d)

    def queries(first: int, stop: int) -> None:
        state_q = None
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            chunk = feature_map.query_chunk(q[:, :, block], **block_buffer(block.stop - start, query_out))
            if state_q is None:  # scale, offset are the same for every block: fold them into the state once
                state_q = _query_state(kv, ksum, chunk.scale, chunk.offset)
            values = chunk.values.flatten(0, 1)  # (B*H, C, M)
            s_kv, s_ksum, offsets = state_q
            if chunk.row_weights is not None and offsets is not None:  # without an offset they cancel in the ratio
                values = values * chunk.row_weights.flatten(0, 1)
            num = out3[:, block]  # the numerator is written in place of the output, then divided
            torch.bmm(values, s_kv, out=num)
            den = torch.bmm(values, s_ksum)
            if offsets is not None:
                num.add_(offsets[0])
                den.add_(offsets[1])
            num.div_(_guard(den, eps))

    with feature_map.holding_derived():
        states = run_on_threads(key_sums, ranges)
        for other in states[1:]:
            states[0].merge(other)
        kv, ksum = states[0].finish(v, _padding_weights(v, key_padding_mask))  # (B*H, M, D), (B*H, M, 1)
        run_on_threads(queries, ranges)
    return out


Route = str  # "native", "native-training", "pytorch-chunked", "pytorch-factored", "pytorch-causal" (attnbench.baselines.routes)


def choose_route(
    feature_map: FeatureMap, q: Tensor, k: Tensor, v: Tensor, causal: bool = False
) -> tuple[Route, NativeSpec | None]:
    """The one place that decides how a feature-map attention runs, from the map's fast form (its `native_spec`),
    the device and dtype and widths (`native.supports`), whether gradients are wanted, and whether the map's
    projection takes gradients (`native.supports_backward`) -> (route, spec for the native routes):
    - causal: "pytorch-causal" (the chunked prefix sums over materialised features);
    - gradients off: "native" where the kernels take the call, else "pytorch-chunked";
    - gradients on: "native-training" where the kernels and their backward take it (d == Dv, no input
      normalising; a projection taking gradients gets them too; without a tensor that records gradients the
      kernels run their forward alone), else "pytorch-factored" (autograd through the factored form).
    The kernels themselves choose their team of threads from the work size (`team` in the source)."""
    if causal:
        return "pytorch-causal", None
    spec = feature_map.native_spec(q) if hasattr(feature_map, "native_spec") else None
    if not torch.is_grad_enabled():
        return ("native", spec) if native.supports(spec, q, k, v) else ("pytorch-chunked", None)
    if native.supports_backward(spec, q, k, v):
        return "native-training", spec
    return "pytorch-factored", None


def fused_linear_attention(
    spec: NativeSpec,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    eps: float,
    threads: int | None = None,
) -> Tensor:
    """The non-causal kernel through the fused CPU kernels, with or without gradients, in one call each way
    (`native.attention`, `native.Attention`): the key and query passes run on `threads` threads (default: torch's
    count), which share out groups of rows and merge their sums in a fixed order. Equals
    `factored_linear_attention` up to rounding, in value and gradients."""
    threads = threads or torch.get_num_threads()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    real = native.real_rows(key_padding_mask)
    skip = real is not None and getattr(_UNREAD, "on", False)
    if no_grad_recorded(q, k, v, *(() if spec.weights is None else (spec.weights,))):
        return native.attention(spec, q, k, v, real, eps, threads, None, skip)
    return native.Attention.apply(q, k, v, spec.weights, spec, real, eps, threads, skip)


_UNREAD = threading.local()


@contextlib.contextmanager
def padded_queries_unread() -> Iterator[None]:
    """Within (this thread): the caller never reads the outputs at padded positions (key_padding_mask False) nor
    sends gradients into them (the model packs real tokens, attnbench.model), so the fused kernels may skip query rows
    past each sequence's last real token and write 0 there; outputs at real positions are unchanged, bit for bit.
    Other routes compute every row as usual."""
    before = getattr(_UNREAD, "on", False)
    _UNREAD.on = True
    try:
        yield
    finally:
        _UNREAD.on = before


def _query_state(kv: Tensor, ksum: Tensor, scale: float, offset: float) -> tuple:
    """What query values meet: scale kv, scale ksum and, for an offset, offset times their column sums."""
    s_kv, s_ksum = kv * scale, ksum * scale
    if offset == 0.0:
        return s_kv, s_ksum, None
    return s_kv, s_ksum, (offset * s_kv.sum(dim=1, keepdim=True), offset * s_ksum.sum(dim=1, keepdim=True))


class LinearKernelAttention(RecordsRoutes, nn.Module):
    """Attention = one feature map + the shared linear kernel.

    `short_conv` (optional) filters q, k, v before the map. redraw_every > 0 calls `feature_map.new_feature_map()` before every redraw_every-th training forward
    (training forwards are counted in the buffer `training_steps`); evaluation never redraws. Each call runs
    the route `choose_route` picks, counted in `kernel_routes`. With gradients off (torch.no_grad,
    inference_mode) the non-causal form runs block by block.
    """

    def __init__(
        self,
        feature_map: FeatureMap,
        eps: float = 1e-6,
        causal: bool = False,
        redraw_every: int = 0,
        short_conv: nn.Module | None = None,
    ):
        super().__init__()
        self.feature_map = feature_map
        self.short_conv = short_conv  # the `short_conv` option (attnbench.baselines.short_conv), on q, k, v first
        self.eps, self.causal, self.redraw_every = eps, causal, redraw_every
        self.register_buffer("training_steps", torch.zeros((), dtype=torch.long))

    @property
    def redraw_policy(self) -> str:
        """How random features are redrawn, recorded with results."""
        return "never" if self.redraw_every <= 0 else f"every {self.redraw_every} training steps"

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        if self.short_conv is not None:
            q, k, v = self.short_conv(q, k, v, key_padding_mask)
        if self.training:  # the count read once as an int: tensor comparisons took 8 us a step, the int 1
            steps = int(self.training_steps)
            if self.redraw_every > 0 and steps > 0 and steps % self.redraw_every == 0:
                self.feature_map.new_feature_map()
            self.training_steps.fill_(steps + 1)
        if not torch.is_grad_enabled():
            with self.feature_map.holding_derived(), torch_threads(1):  # as chunked_linear_attention's choice
                route, spec = choose_route(self.feature_map, q, k, v, self.causal)
        else:
            route, spec = choose_route(self.feature_map, q, k, v, self.causal)
        self._took(route)
        if route == "native" or route == "native-training":
            return fused_linear_attention(spec, q, k, v, key_padding_mask, self.eps)
        if route == "pytorch-chunked":
            return pytorch_chunked_attention(self.feature_map, q, k, v, key_padding_mask, self.eps)
        if route == "pytorch-factored":
            q_chunk, k_chunk = self.feature_map.query_chunk(q), self.feature_map.key_chunk(k, key_padding_mask)
            return factored_linear_attention(q_chunk, k_chunk, v, key_padding_mask, self.eps)
        phi_q = self.feature_map.forward_queries(q)
        phi_k = self.feature_map.causal_key_chunk(k, key_padding_mask)[0].materialise()
        return linear_attention(phi_q, phi_k, v, key_padding_mask, self.eps, self.causal)

    def init_state(self, batch_size: int) -> dict[str, Tensor]:
        """The recurrent state before any token: kv (B, H, M, D) = sum_j phi(k_j) v_j^T, ksum (B, H, M) =
        sum_j phi(k_j) (the normaliser) and, for maps with a causal anchor, anchor (B, H, 1, 1); zeros (anchor
        -inf) in the module's dtype and device. H and D are the built num_heads and head_dim (`self.cfg`); an
        attention without that config starts from zeros of size 1 in H, M and D, which the first step
        broadcasts to the full shape."""
        heads, dim = _built_heads(self) or (1, 1)
        m = 1 if dim == 1 else feature_count(self.feature_map, torch.zeros(1, heads, 1, dim))
        like = _module_tensor(self)
        state = {"kv": like.new_zeros(batch_size, heads, m, dim), "ksum": like.new_zeros(batch_size, heads, m)}
        if self.feature_map.causal_anchor:
            state["anchor"] = like.new_full((batch_size, heads, 1, 1), -math.inf)
        if self.short_conv is not None:
            state["conv"] = self.short_conv.init_state(batch_size, heads, dim, like.dtype, like.device)
        return state

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: dict[str, Tensor], key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One token of the causal form as a recurrence: q_t, k_t, v_t (B, H, D) -> out_t (B, H, D) and the new
        state (the given one is left unchanged); `key_padding_mask` (B,) False = a padded token, which reads
        the state but adds nothing to it. Equals `forward` with causal=True at that position."""
        self._require_causal("step")
        mask = None if key_padding_mask is None else key_padding_mask[:, None]
        conv = {}
        if self.short_conv is not None:  # a padded token enters the filter's window as 0, as in `forward`
            keep = 1.0 if mask is None else mask.to(q_t.dtype)[:, :, None]
            (q_t, k_t, v_t), conv["conv"] = self.short_conv.step(q_t * keep, k_t * keep, v_t * keep, state["conv"])
        phi_q = self.feature_map.forward_queries(q_t[:, :, None])  # (B, H, 1, M)
        chunk, anchor = self.feature_map.causal_key_chunk(k_t[:, :, None], mask, state.get("anchor"))
        phi_k = chunk.materialise()
        if mask is not None:
            phi_k = torch.where(mask[:, None, :, None], phi_k, 0.0)
        kv = state["kv"].to(phi_k) + phi_k.transpose(-2, -1) @ v_t[:, :, None]
        ksum = state["ksum"].to(phi_k) + phi_k[:, :, 0]
        num = (phi_q @ kv)[:, :, 0]
        den = (phi_q[:, :, 0] * ksum).sum(dim=-1, keepdim=True)
        new = {"kv": kv, "ksum": ksum} if anchor is None else {"kv": kv, "ksum": ksum, "anchor": anchor}
        return num / _guard(den, self.eps), {**new, **conv}

    def prefill_state(
        self, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, q: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The state after keys k (B, H, N, D) and values v in one pass, as `step` would leave it after N tokens;
        with `short_conv`, the queries q too (the filter's window holds the last inputs of all three)."""
        self._require_causal("prefill_state")
        if self.short_conv is not None:
            if q is None:
                raise ValueError("an attention with short_conv needs the queries q to prefill its filter window")
            window = self.short_conv.window(q, k, v, key_padding_mask)
            _, k, v = self.short_conv(q, k, v, key_padding_mask)
            return {**self._prefill_sums(k, v, key_padding_mask), "conv": window}
        return self._prefill_sums(k, v, key_padding_mask)

    def _prefill_sums(self, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> dict[str, Tensor]:
        """kv, ksum (and the anchor) after keys k (B, H, N, D) and values v, already filtered."""
        chunk, anchor = self.feature_map.causal_key_chunk(k, key_padding_mask)
        phi_k = chunk.materialise()
        if key_padding_mask is not None:
            phi_k = torch.where(key_padding_mask[:, None, :, None], phi_k, 0.0)
        state = {"kv": phi_k.transpose(-2, -1) @ v, "ksum": phi_k.sum(dim=-2)}
        return state if anchor is None else {**state, "anchor": anchor}

    def state_size(self, context_length: int, dtype: torch.dtype = torch.float32) -> int | None:
        """Bytes of one sequence's recurrent state (`init_state`), whatever the context length: per head
        M x D (kv) + M (the normaliser ksum), + 1 (favor's anchor) elements, plus the short_conv window; None for an attention that keeps no
        config `cfg` saying its heads and head_dim."""
        built = _built_heads(self)
        if built is None:
            return None
        heads, dim = built
        m = feature_count(self.feature_map, torch.zeros(1, heads, 1, dim))
        per_head = m * dim + m + (1 if self.feature_map.causal_anchor else 0)
        window = 0 if self.short_conv is None else self.short_conv.state_bytes(heads, dim, dtype)
        return heads * per_head * torch.empty((), dtype=dtype).element_size() + window

    def _require_causal(self, what: str) -> None:
        if not self.causal:
            raise ValueError(f"{what} is the recurrent form of causal attention; build the attention with causal=True")

    def cost(self, batch: int, heads: int, n: int, d: int) -> dict[str, float]:
        """FLOPs and minimum bytes (float32) of one forward (`linear_kernel_cost` with the map's own cost)."""
        feature = self.feature_map.cost(n, d) if hasattr(self.feature_map, "cost") else {"flops": 0.0, "bytes": 0.0}
        m = feature_count(self.feature_map, torch.zeros(1, heads, 1, d))
        return linear_kernel_cost(batch, heads, n, d, m, feature["flops"], feature["bytes"])


def _built_heads(attention: nn.Module) -> tuple[int, int] | None:
    """(num_heads, head_dim) an attention was built with, from its config `cfg` (an AttentionConfig); None for
    one that keeps no such config."""
    cfg = getattr(attention, "cfg", None)
    if cfg is None or not hasattr(cfg, "num_heads") or not hasattr(cfg, "head_dim"):
        return None
    return cfg.num_heads, cfg.head_dim


def _module_tensor(module: nn.Module) -> Tensor:
    """An empty tensor in the dtype and device of the module's first floating parameter or buffer (else the
    default dtype on the CPU): what a fresh recurrent state is made like."""
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point():
            return t.new_empty(0)
    return torch.empty(0)


def linear_kernel_cost(
    batch: int, heads: int, n: int, d: int, num_features: int, feature_flops: float, parameter_bytes: float
) -> dict[str, float]:
    """FLOPs and minimum bytes (float32) of a feature-map attention: features (`feature_flops` per (batch, head))
    plus the kernel: phi_k^T v and phi_q @ state (2 n M D each), sum phi_k and phi_q . sum (3 n M), the division
    (n D). Bytes: q, k, v read and the output written once, plus the map's parameters."""
    kernel = 2.0 * n * num_features * d * 2 + 3.0 * n * num_features + n * d
    rows = batch * heads
    return {"flops": rows * (kernel + feature_flops), "bytes": 4.0 * rows * n * d * 4 + parameter_bytes}
