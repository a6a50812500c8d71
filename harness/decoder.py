"""The causal decoder: the shared backbone (attnbench.model) with causal attention and a per-token head.

Selected by `model: {kind: decoder}`. The backbone's token and position embeddings, `num_layers` pre-LayerNorm
blocks whose attention is built with causal=True and final norm, then a head over the vocabulary (tied to the
token embedding by default). Three ways to run it, which give the same logits:
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
from attnbench.model import Backbone, ModelConfig
from attnbench.recurrence import step_through
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
    """The backbone with causal attention and a per-token head: (B, N) ids -> (B, N, V) logits."""

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
        # GPT-2's scale for token and position embeddings (a tied head starts near uniform); positions at torch's
        # default N(0, 1) would drown the tokens 50:1 in the residual stream, and the model learns next to nothing
        # for hundreds of steps
        self.backbone = Backbone(cfg, attention, self.attention_options, seed, embedding_std=0.02)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=not cfg.tie_embeddings)
        if cfg.tie_embeddings:
            self.head.weight = self.backbone.token_embedding.weight

    def attention_modules(self) -> list[nn.Module]:
        """The pluggable attention module of each layer, in order."""
        return self.backbone.attention_modules()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """input_ids (B, N) long; attention_mask (B, N) bool, True = real token -> logits (B, N, V)."""
        x, tokens = self.backbone(input_ids, attention_mask)
        logits = self.head(x)
        return logits if tokens is None else tokens.unpack(logits)

    def init_state(self, batch_size: int) -> dict[str, Any]:
        """The decoder's state before any token: the next position and each layer's attention state."""
        return {"position": 0, "layers": self.backbone.init_state(batch_size)}

    def step(self, token: Tensor, state: dict[str, Any], real: Tensor | None = None) -> tuple[Tensor, dict[str, Any]]:
        """One token per sequence: token (B,) long -> logits (B, V) and the next state; `real` (B,) bool, False =
        a padded token (read by nothing later). Equals `forward`'s logits at that position."""
        x, layers = self.backbone.step(token, state["position"], state["layers"], real)
        return self.head(x), {"position": state["position"] + 1, "layers": layers}

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


def token_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy (nats) over labelled positions: logits (B, N, V), labels (B, N), -100 = no label."""
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
