"""The causal decoder: the encoder's blocks (attnbench.model) with causal attention and a per-token head.

Selected by `model: {kind: decoder}`. Token and position embeddings, `num_layers` pre-LayerNorm blocks whose
attention is built with causal=True, a final norm and a head over the vocabulary (tied to the token embedding
by default). Three ways to run it, which give the same logits:
- `forward(input_ids, attention_mask)`: every position in parallel (training, evaluation);
- `init_state` / `step`: one token at a time through each attention's recurrent form (attnbench.recurrence);
- `prefill` (the parallel form that also returns the state), then `step` or `generate`.
Loss over the positions a task labels: `token_loss(logits, labels)`, label -100 ignored (as torch's).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnbench.errors import ConfigError
from attnbench.model import EncoderLayer, ModelConfig, Tokens, make_dropout
from attnbench.recurrence import has_recurrent_form, step_through
from attnbench.registry import attention_entry
from attnbench.tasks.sequence import IGNORE  # label of a position that carries no loss


def require_causal_form(attention: str) -> None:
    """A ConfigError naming why a decoder cannot use `attention`: it declares no causal form."""
    if not attention_entry(attention).capabilities.causal:
        raise ConfigError(
            f"attention {attention!r} has no causal form (its capability causal is False), so a decoder "
            f"(model kind: decoder) cannot use it; pick a causal one, e.g. softmax, elu-linear, performer"
        )


class TransformerDecoder(nn.Module):
    """Token + position embeddings, causal blocks, final norm, per-token head: (B, N) ids -> (B, N, V) logits."""

    def __init__(
        self,
        cfg: ModelConfig,
        attention: str = "softmax",
        attention_options: dict[str, Any] | None = None,
        seed: int = 0,
    ):
        super().__init__()
        require_causal_form(attention)
        if (attention_options or {}).get("causal") is False:
            raise ConfigError(
                f"attention {attention!r} is given causal=False, but a decoder's attention is causal; drop the option"
            )
        self.cfg, self.attention_name = cfg, attention
        self.attention_options = {**(attention_options or {}), "causal": True}
        self.capabilities = attention_entry(attention).capabilities
        torch.manual_seed(seed)
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embedding = nn.Embedding(cfg.max_length, cfg.d_model)
        # GPT-2's scale for both (a tied head starts near uniform); positions at torch's default N(0, 1) would
        # drown the tokens 50:1 in the residual stream, and the model learns next to nothing for hundreds of steps
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.02)
        self.embedding_dropout = make_dropout(cfg)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg, attention, self.attention_options, seed=seed * 1000 + i) for i in range(cfg.num_layers)
        )
        self.final_norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=not cfg.tie_embeddings)
        if cfg.tie_embeddings:
            self.head.weight = self.token_embedding.weight

    def attention_modules(self) -> list[nn.Module]:
        """The pluggable attention module of each layer, in order."""
        return [layer.attn.attention for layer in self.layers]

    def _embed(self, ids: Tensor, positions: Tensor, last: int) -> Tensor:
        """Token plus position embeddings; `last` the largest position, which max_length must exceed."""
        if last >= self.cfg.max_length:
            raise ValueError(
                f"position {last} is past the model's max_length={self.cfg.max_length}; build the model "
                f"with a larger max_length"
            )
        return self.embedding_dropout(self.token_embedding(ids) + self.position_embedding(positions))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """input_ids (B, N) long; attention_mask (B, N) bool, True = real token -> logits (B, N, V)."""
        tokens = None if attention_mask is None or bool(attention_mask.all()) else Tokens(attention_mask)
        n = input_ids.shape[1]
        positions = torch.arange(n, device=input_ids.device)
        x = (
            self._embed(input_ids, positions, n - 1)
            if tokens is None
            else self._embed(tokens.pack(input_ids), tokens.positions(), n - 1)
        )
        for layer in self.layers:
            x = layer(x, attention_mask, tokens)
        logits = self.head(self.final_norm(x))
        return logits if tokens is None else tokens.unpack(logits)

    def init_state(self, batch_size: int) -> dict[str, Any]:
        """The decoder's state before any token: the next position and each layer's attention state."""
        return {"position": 0, "layers": [attn.init_state(batch_size) for attn in self.attention_modules()]}

    def step(self, token: Tensor, state: dict[str, Any], real: Tensor | None = None) -> tuple[Tensor, dict[str, Any]]:
        """One token per sequence: token (B,) long -> logits (B, V) and the next state; `real` (B,) bool, False =
        a padded token (read by nothing later). Equals `forward`'s logits at that position."""
        position = state["position"]
        x = self._embed(token, torch.full_like(token, position), position)
        layers = []
        for layer, layer_state in zip(self.layers, state["layers"]):
            x, layer_state = _layer_step(layer, x, layer_state, real)
            layers.append(layer_state)
        return self.head(self.final_norm(x)), {"position": position + 1, "layers": layers}

    @torch.no_grad()
    def prefill(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, dict[str, Any]]:
        """The parallel forward over a prompt, and the state `step` would have after it: (logits (B, N, V), state).
        Each layer's state comes from its attention's `prefill_state(k, v, mask, q=q)` where it has one, else by
        stepping through the keys the forward saw."""
        seen: list[tuple] = []
        hooks = [
            attn.register_forward_hook(
                lambda module, args, kwargs, out: seen.append((module, args, kwargs)), with_kwargs=True
            )
            for attn in self.attention_modules()
        ]
        try:
            logits = self(input_ids, attention_mask)
        finally:
            for hook in hooks:
                hook.remove()
        layers = []
        for attn, (q, k, v), kwargs in seen:
            mask = kwargs.get("key_padding_mask")
            if hasattr(attn, "prefill_state"):
                layers.append(attn.prefill_state(k, v, mask, q=q))
            else:
                layers.append(step_through(attn, q, k, v, mask)[1])
        return logits, {"position": input_ids.shape[1], "layers": layers}

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int) -> Tensor:
        """Greedy continuation of prompts (B, N) by `max_new_tokens` tokens -> (B, N + max_new_tokens)."""
        logits, state = self.prefill(input_ids)
        out = [input_ids]
        token = logits[:, -1].argmax(dim=-1)
        for _ in range(max_new_tokens):
            out.append(token[:, None])
            logits_t, state = self.step(token, state)
            token = logits_t.argmax(dim=-1)
        return torch.cat(out, dim=1)


def _layer_step(layer: EncoderLayer, x: Tensor, state: Any, real: Tensor | None) -> tuple[Tensor, Any]:
    """One block on one position: x (B, d_model) -> (B, d_model), the attention through its `step`."""
    attn = layer.attn
    b = x.shape[0]
    h = layer.norm1(x)
    q = attn.q_proj(h).view(b, attn.num_heads, attn.head_dim)
    k = q if attn.k_proj is None else attn.k_proj(h).view(b, attn.num_heads, attn.head_dim)
    v = attn.v_proj(h).view(b, attn.num_heads, attn.head_dim)
    if not has_recurrent_form(attn.attention):
        raise TypeError(f"{type(attn.attention).__name__} claims a causal form but has no init_state / step")
    extra = {} if real is None else {"key_padding_mask": real}
    out, state = attn.attention.step(q, k, v, state, **extra)
    x = x + layer.dropout(attn.out_proj(out.reshape(b, -1)))
    return x + layer.dropout(layer.ffn(layer.norm2(x))), state


def token_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy (nats) over labelled positions: logits (B, N, V), labels (B, N), -100 = no label."""
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
