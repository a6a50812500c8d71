"""The feature-map contract: `FeatureMap` (what a map computes, and optionally its fused form) and `FeatureChunk`
(a block of features in factored form, as the renderings take them)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator

import torch
from torch import Tensor, nn

from attnbench.kernels.native import NativeSpec


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
        """What the fused CPU kernel (`attnbench.kernels.native`) needs to compute this map's features of x (B, H, N, D)
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
