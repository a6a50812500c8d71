"""`LinearKernelAttention`: one feature map over the shared kernel, as an attention module (its routes, its
recurrent form and its cost)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.kernels.cpu_threads import torch_threads
from attnbench.kernels.linear.chunked import pytorch_chunked_attention
from attnbench.kernels.linear.contract import FeatureMap, feature_count
from attnbench.kernels.linear.fused import fused_linear_attention
from attnbench.kernels.linear.parallel import factored_linear_attention, guard_denominator, linear_attention
from attnbench.kernels.linear.route import choose_route
from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.kernels.recurrent_attention import check_step
from attnbench.kernels.routes import RecordsRoutes


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
        self.short_conv = short_conv  # the `short_conv` option (attnbench.kernels.short_conv), on q, k, v first
        self.eps, self.causal, self.redraw_every = eps, causal, redraw_every
        self.register_buffer("training_steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # dtype and device of new states

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
        -inf) in the module's dtype and device (its buffer `anchor`, which `.to` converts). H and D are the built
        num_heads and head_dim (`self.cfg`); an attention without that config starts from zeros of size 1 in H, M
        and D, which the first step broadcasts to the full shape."""
        heads, dim = _built_heads(self) or (1, 1)
        m = 1 if dim == 1 else feature_count(self.feature_map, torch.zeros(1, heads, 1, dim))
        like = self.anchor
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
        check_step(self, q_t, k_t, v_t, state)
        mask = None if key_padding_mask is None else key_padding_mask[:, None]
        conv = {}
        if self.short_conv is not None:
            (q_t, k_t, v_t), conv["conv"] = self.short_conv.step(q_t, k_t, v_t, state["conv"], key_padding_mask)
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
        return num / guard_denominator(den, self.eps), {**new, **conv}

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


def linear_kernel_cost(
    batch: int, heads: int, n: int, d: int, num_features: int, feature_flops: float, parameter_bytes: float
) -> dict[str, float]:
    """FLOPs and minimum bytes (float32) of a feature-map attention: features (`feature_flops` per (batch, head))
    plus the kernel: phi_k^T v and phi_q @ state (2 n M D each), sum phi_k and phi_q . sum (3 n M), the division
    (n D). Bytes: q, k, v read and the output written once, plus the map's parameters."""
    kernel = 2.0 * n * num_features * d * 2 + 3.0 * n * num_features + n * d
    rows = batch * heads
    return {"flops": rows * (kernel + feature_flops), "bytes": 4.0 * rows * n * d * 4 + parameter_bytes}
