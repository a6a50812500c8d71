"""The model every attention variant plugs into: its settings, one backbone, and the classifier head.

One backbone (`Backbone`, as Zoology's LMBackbone): token and position (+ segment) embeddings, `num_layers`
pre-LayerNorm blocks (`Block`) around the pluggable attention, a final norm. Position enters by `positions`:
a learned table of absolute positions added to the tokens (the default), rotary positions applied to each block's
queries and keys (`rope`, attnbench.rotary), or not at all (`none`); without a table the model runs at any length. Two heads on it: the classifier
here (pooling, a linear layer: `TransformerClassifier`) and the causal decoder's per-token head
(attnbench.decoder). Same depth, width, FFN and embeddings for every variant; only the attention module differs,
so parameter counts differ only by the attention's own parameters (reported by `parameter_counts`).

With a padding mask, the per-token layers (embeddings, projections, norms, feed-forward, dropout) run on the real
tokens alone, packed as (T, d) (`Tokens`); only the attention sees the padded (B, H, N, d) layout, with zeros at
padded positions, which no attention reads (tests/test_attention_properties.py). Rotten Tomatoes' batches of 64,
trimmed to their longest row, are half padding."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnbench.dropout import HashDropout
from attnbench.kernels.linear.fused import padded_queries_unread
from attnbench.options import option, require
from attnbench.recurrence import has_recurrent_form
from attnbench.registry import attention_entry, build_attention, layer_attentions
from attnbench.rotary import rotary_angles, rotate


@dataclasses.dataclass
class ModelConfig:
    """Encoder classifier settings (defaults: the paper's sentence setup)."""

    vocab_size: int = option(30522, "token vocabulary size (set from the task)", minimum=1, maximum=10_000_000)
    num_classes: int = option(2, "number of output classes (set from the task)", minimum=1, maximum=1_000_000)
    max_length: int = option(
        128,
        "maximum sequence length (learned positions' table; attentions that need one)",
        minimum=1,
        maximum=1_048_576,
    )
    d_model: int = option(128, "model width", minimum=1, maximum=65536)
    num_layers: int = option(2, "encoder layers", minimum=1, maximum=1024)
    num_heads: int = option(2, "attention heads", minimum=1, maximum=1024)
    ffn_dim: int = option(256, "feed-forward width", minimum=1, maximum=1_048_576)
    dropout: float = option(0.1, "dropout rate")
    dropout_rng: Literal["hash", "torch"] = option(
        "hash",
        "dropout's random source: hash (attnbench.dropout: one seed per call from torch's generator, each "
        "element's draw a hash of it; a tenth of nn.Dropout's time) or torch (nn.Dropout, bernoulli_)",
    )
    pooling: Literal["mean", "first"] = option("mean", "sequence pooling: mean over real tokens or first token")
    qk_projection: Literal["none", "shared", "separate"] | None = option(
        None,
        "queries and keys: none (Q = K = the head's slice of the normed hidden state, no W_q, W_k: the paper's "
        "lower block), shared (Q = K = W x, one learned projection), separate (W_q x, W_k x: the upper "
        "block); None: from tie_qk (shared unless tie_qk is false)",
    )
    tie_qk: bool | None = option(
        None, "older spelling: true = qk_projection shared, false = separate; resolved to whether Q = K"
    )
    num_segments: int = option(1, "segment embeddings: 2 for sentence-pair tasks")
    pad_id: int = option(0, "padding token id")
    kind: Literal["encoder", "decoder"] = option(
        "encoder",
        "encoder: the pooled classifier here; decoder: causal self-attention with a per-token head "
        "(attnbench.decoder), for tasks that label positions",
    )
    tie_embeddings: bool = option(True, "decoder: the output head shares the token embedding's weights")
    positions: Literal["learned", "rope", "none"] = option(
        "learned",
        "where position enters: learned (a table of max_length absolute position embeddings added to the tokens, "
        "the default), rope (queries and keys rotated by position in every block, attnbench.rotary: no table, "
        "any length), none (no position signal: the causal mask alone orders a decoder's tokens)",
    )
    rope_base: float = option(10000.0, "rope: base of the rotation frequencies, theta_j = base^(-2j / head_dim)")
    match: dict | None = option(
        None,
        "size the model to a target before it is built (attnbench.sizing): {parameters: N} or {state_bytes: N}, "
        "by: d_model | num_heads | an integer attention option, tolerance (default 0.05); None: as configured",
    )

    def __post_init__(self) -> None:
        require(
            self.d_model % self.num_heads == 0,
            f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; pick a multiple",
        )
        require(0.0 <= self.dropout < 1.0, f"dropout={self.dropout} must lie in [0, 1)")
        require(self.num_segments in (1, 2), f"num_segments={self.num_segments} must be 1 or 2")
        require(
            self.positions != "rope" or self.head_dim % 2 == 0,
            f"positions rope pairs each head's features, and head_dim={self.head_dim} (d_model / num_heads) is odd; "
            f"pick an even head_dim",
        )
        require(self.rope_base > 1.0, f"rope_base={self.rope_base} must exceed 1")
        self.qk_projection, self.tie_qk = resolve_qk_projection(self.qk_projection, self.tie_qk)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


def resolve_qk_projection(qk_projection: str | None, tie_qk: bool | None) -> tuple[str, bool]:
    """(qk_projection, tie_qk) made concrete and consistent: the projection from tie_qk where it is not given
    (shared by default), tie_qk true exactly when Q = K (none or shared); ConfigError when the two disagree."""
    if qk_projection is None:
        qk_projection = "separate" if tie_qk is False else "shared"
    tied = qk_projection != "separate"
    require(
        tie_qk is None or tie_qk == tied,
        f"tie_qk={tie_qk} contradicts qk_projection={qk_projection!r} (Q = K is {tied}); drop tie_qk",
    )
    return qk_projection, tied


class Tokens:
    """Where the real tokens of a padded batch sit: `pack` (B, N, ...) -> (T, ...) keeps them in row order,
    `unpack` puts them back with zeros at padded positions."""

    def __init__(self, mask: Tensor):
        self.shape = mask.shape
        self.index = mask.reshape(-1).nonzero().squeeze(1)  # flat positions b * N + i of the real tokens

    def pack(self, x: Tensor) -> Tensor:
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, t: Tensor) -> Tensor:
        out = t.new_zeros(self.shape[0] * self.shape[1], *t.shape[1:])
        return out.index_copy(0, self.index, t).view(*self.shape, *t.shape[1:])

    def positions(self) -> Tensor:
        """Each real token's position in its row (T,)."""
        return self.index % self.shape[1]


def make_dropout(cfg: ModelConfig) -> nn.Module:
    """A dropout layer at the configured rate, from the configured random source."""
    return HashDropout(cfg.dropout) if cfg.dropout_rng == "hash" else nn.Dropout(cfg.dropout)


class MultiHeadAttention(nn.Module):
    """Projections, head split and merge around a pluggable attention module."""

    def __init__(self, cfg: ModelConfig, attention: str, attention_options: dict[str, Any], seed: int):
        super().__init__()
        self.num_heads, self.head_dim, self.qk_projection = cfg.num_heads, cfg.head_dim, cfg.qk_projection
        self.rope_base = cfg.rope_base if cfg.positions == "rope" else None
        self.q_proj = None if cfg.qk_projection == "none" else nn.Linear(cfg.d_model, cfg.d_model)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model) if cfg.qk_projection == "separate" else None
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        with torch.random.fork_rng(devices=[]):  # the attention's own initialisation leaves the shared
            torch.manual_seed(seed)  # weights' random stream alone: same init for every variant
            self.attention = build_attention(
                attention,
                head_dim=cfg.head_dim,
                num_heads=cfg.num_heads,
                max_length=cfg.max_length,
                seed=seed,
                **attention_options,
            )

    def _heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def positioned(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q and k (..., N, head_dim) rotated by their positions (N,) with rope (attnbench.rotary), else as given."""
        if self.rope_base is None:
            return q, k
        cos, sin = rotary_angles(positions, self.head_dim, self.rope_base)
        turned = rotate(q, cos, sin)
        return turned, turned if k is q else rotate(k, cos, sin)

    def queries_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and keys of x (..., d_model), by qk_projection, before the heads split: the one rule of the
        parallel forward and the step. none: x itself (each head its slice); shared: one projection, k is q."""
        q = x if self.q_proj is None else self.q_proj(x)
        return q, q if self.k_proj is None else self.k_proj(x)

    def forward(self, x: Tensor, mask: Tensor | None, tokens: Tokens | None = None) -> Tensor:
        """x (B, N, d_model), or the real tokens (T, d_model) of `tokens` -> the same layout."""
        spread = (lambda t: t) if tokens is None else tokens.unpack
        q_flat, k_flat = self.queries_keys(x)
        q = self._heads(spread(q_flat))
        k = q if k_flat is q_flat else self._heads(spread(k_flat))
        q, k = self.positioned(q, k, torch.arange(q.shape[2], device=q.device))  # a row's tokens come first
        with contextlib.nullcontext() if tokens is None else padded_queries_unread():  # pack reads real rows only
            out = self.attention(q, k, self._heads(spread(self.v_proj(x))), key_padding_mask=mask)
        b, h, n, d = out.shape
        out = out.transpose(1, 2).reshape(b, n, h * d)
        return self.out_proj(out if tokens is None else tokens.pack(out))


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: attention then feed-forward, each added to the residual stream."""

    def __init__(self, cfg: ModelConfig, attention: str, attention_options: dict[str, Any], seed: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg, attention, attention_options, seed)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ffn_dim), nn.GELU(), make_dropout(cfg), nn.Linear(cfg.ffn_dim, cfg.d_model)
        )
        self.dropout = make_dropout(cfg)

    def forward(self, x: Tensor, mask: Tensor | None, tokens: Tokens | None = None) -> Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), mask, tokens))
        return x + self.dropout(self.ffn(self.norm2(x)))

    def step(self, x: Tensor, state: Any, real: Tensor | None, position: int) -> tuple[Tensor, Any]:
        """One position: x (B, d_model) -> (B, d_model) and the attention's next state, through its `step`;
        `real` (B,) bool, False = a padded token; `position` its place in the row (rope rotates by it)."""
        attn = self.attn
        b = x.shape[0]
        h = self.norm1(x)
        q_flat, k_flat = attn.queries_keys(h)
        q = q_flat.view(b, attn.num_heads, attn.head_dim)
        k = q if k_flat is q_flat else k_flat.view(b, attn.num_heads, attn.head_dim)
        q, k = attn.positioned(q, k, torch.tensor([position], device=x.device))
        v = attn.v_proj(h).view(b, attn.num_heads, attn.head_dim)
        if not has_recurrent_form(attn.attention):
            raise TypeError(f"{type(attn.attention).__name__} claims a causal form but has no init_state / step")
        extra = {} if real is None else {"key_padding_mask": real}
        out, state = attn.attention.step(q, k, v, state, **extra)
        x = x + self.dropout(attn.out_proj(out.reshape(b, -1)))
        return x + self.dropout(self.ffn(self.norm2(x))), state


class Backbone(nn.Module):
    """What every head shares (Zoology's LMBackbone): token + position (+ segment) embeddings, `num_layers`
    blocks, the final norm. (B, N) ids -> normed hidden states, (B, N, d_model) or the real tokens' (T, d_model).
    Every block has the attention named, or, for a pattern of layers (a hybrid, attnbench.hybrid), its layer's
    attention of the pattern (`attnbench.registry.layer_attentions`).

    Seeds torch's generator with `seed` and draws its weights in that order (embeddings, blocks, final norm); the
    head built right after it draws from the same stream. Each block's attention draws from its own seed,
    seed * 1000 + layer, so every variant starts from the same shared weights. The heads differ in the
    embeddings only: `padding_idx` (the classifier's pad row, zero and frozen), `embedding_std` (the decoder's
    GPT-2 scale, else torch's N(0, 1)), `num_segments` (sentence pairs).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        attention: str,
        attention_options: dict[str, Any],
        seed: int,
        *,
        padding_idx: int | None = None,
        embedding_std: float | None = None,
        num_segments: int = 1,
    ):
        super().__init__()
        self.cfg = cfg
        torch.manual_seed(seed)
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=padding_idx)
        learned = cfg.positions == "learned"  # rope rotates q and k in each block; none has no position signal
        self.position_embedding = nn.Embedding(cfg.max_length, cfg.d_model) if learned else None
        if embedding_std is not None:
            nn.init.normal_(self.token_embedding.weight, std=embedding_std)
            if learned:
                nn.init.normal_(self.position_embedding.weight, std=embedding_std)
        self.segment_embedding = nn.Embedding(num_segments, cfg.d_model) if num_segments > 1 else None
        self.embedding_dropout = make_dropout(cfg)
        self.layers = nn.ModuleList(
            Block(cfg, name, options, seed=seed * 1000 + i)
            for i, (name, options) in enumerate(layer_attentions(attention, attention_options, cfg.num_layers))
        )
        self.final_norm = nn.LayerNorm(cfg.d_model)

    def attention_modules(self) -> list[nn.Module]:
        """The pluggable attention module of each layer, in order."""
        return [layer.attn.attention for layer in self.layers]

    def embed(self, input_ids: Tensor, segment_ids: Tensor | None = None, tokens: Tokens | None = None) -> Tensor:
        """(B, N) ids -> (B, N, d_model) embeddings, or those of the real tokens (T, d_model) of `tokens`."""
        n = input_ids.shape[1]
        positions = torch.arange(n, device=input_ids.device)
        if tokens is not None:
            input_ids, positions = tokens.pack(input_ids), tokens.positions()
            segment_ids = None if segment_ids is None else tokens.pack(segment_ids)
        return self._embed(input_ids, positions, n - 1, segment_ids)

    def _embed(self, ids: Tensor, positions: Tensor, last: int, segment_ids: Tensor | None = None) -> Tensor:
        """Token (+ learned position) (+ segment) embeddings, dropped out; `last` the largest position, below
        max_length where positions are learned."""
        x = self.token_embedding(ids)
        if self.position_embedding is not None:
            if last >= self.cfg.max_length:
                raise ValueError(
                    f"sequence length {last + 1} exceeds the model's max_length={self.cfg.max_length} (learned "
                    f"positions); build the model with a larger max_length, or with positions rope or none"
                )
            x = x + self.position_embedding(positions)
        if self.segment_embedding is not None and segment_ids is not None:
            x = x + self.segment_embedding(segment_ids)
        return self.embedding_dropout(x)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, segment_ids: Tensor | None = None
    ) -> tuple[Tensor, Tokens | None]:
        """input_ids (B, N) long; attention_mask (B, N) bool, True = real token -> (normed hidden states, tokens):
        (B, N, d_model) and None without padding, else the real tokens' (T, d_model) and where they sit."""
        tokens = None if attention_mask is None or bool(attention_mask.all()) else Tokens(attention_mask)
        x = self.embed(input_ids, segment_ids, tokens)
        for layer in self.layers:
            x = layer(x, attention_mask, tokens)
        return self.final_norm(x), tokens

    def init_state(self, batch_size: int) -> list[Any]:
        """Each layer's attention state before any token."""
        return [attn.init_state(batch_size) for attn in self.attention_modules()]

    def step(
        self, token: Tensor, position: int, states: list[Any], real: Tensor | None = None
    ) -> tuple[Tensor, list[Any]]:
        """One token per sequence at `position`: token (B,) long -> normed hidden state (B, d_model) and each
        layer's next state; `real` (B,) bool, False = a padded token (read by nothing later)."""
        x = self._embed(token, torch.full_like(token, position), position)
        layers = []
        for layer, layer_state in zip(self.layers, states):
            x, layer_state = layer.step(x, layer_state, real, position)
            layers.append(layer_state)
        return self.final_norm(x), layers


class TransformerClassifier(nn.Module):
    """The backbone, pooling and a linear classifier: (B, N) ids -> (B, C) logits."""

    def __init__(
        self,
        cfg: ModelConfig,
        attention: str = "softmax",
        attention_options: dict[str, Any] | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.cfg, self.attention_name = cfg, attention
        self.attention_options = dict(attention_options or {})
        self.capabilities = attention_entry(attention).capabilities
        self.backbone = Backbone(
            cfg, attention, self.attention_options, seed, padding_idx=cfg.pad_id, num_segments=cfg.num_segments
        )
        self.classifier = nn.Linear(cfg.d_model, cfg.num_classes)

    def attention_modules(self) -> list[nn.Module]:
        """The pluggable attention module of each layer, in order."""
        return self.backbone.attention_modules()

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, segment_ids: Tensor | None = None
    ) -> Tensor:
        """input_ids (B, N) long; attention_mask (B, N) bool, True = real token -> logits (B, C)."""
        x, tokens = self.backbone(input_ids, attention_mask, segment_ids)
        if tokens is not None:
            x = tokens.unpack(x)
        if self.cfg.pooling == "first":
            return self.classifier(x[:, 0])
        if attention_mask is None:
            return self.classifier(x.mean(dim=1))
        weights = attention_mask.to(x.dtype).unsqueeze(-1)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
        return self.classifier(pooled)


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Total and attention-own trainable parameter counts of a model with `attention_modules()` (the rest is
    identical across variants)."""
    total = sum(p.numel() for p in model.parameters())
    own = sum(p.numel() for m in model.attention_modules() for p in m.parameters())
    return {"total": total, "attention": own, "shared": total - own}
