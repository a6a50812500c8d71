"""Hybrid models: different attentions in different layers, one pattern repeated over the model's depth.

    {name: hybrid, label: gdn-swa-3to1,
     options: {layers: [gated-deltanet, gated-deltanet, gated-deltanet, sliding-window], window: 64}}

Layer i of the model takes entry i mod P of the pattern's P entries (as Zoology's mixers/hybrid.py picks a mixer
by layer index); num_layers must be a multiple of P. An entry is a registered attention's name or {name, options};
every other option of the hybrid (`window` above) goes to each layer whose attention has an option of that name,
and to none where none has it (an error). `ratio: r` with two entries [linear, full] is the pattern
[linear] * r + [full], r:1 linear to full (the ratio the hybrid study, arXiv 2507.06457, varies).

`hybrid` is registered with the attentions so that suites name it like one, and its capability flags are its layers'
(causal, recurrent state, padding: all of them), but it is no one layer's attention (`layer_pattern`): the model
builds it layer by layer (`attnbench.registry.layer_attentions`, which reads `HybridConfig.pattern`, in
attnbench.model.Backbone), each layer's attention from the seed of that layer as in any model;
`build_attention('hybrid')` is an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.errors import ConfigError, closest
from attnbench.options import option, rest_option
from attnbench.registry import (
    ATTENTIONS,
    AttentionConfig,
    Capabilities,
    attention_capabilities,
    attention_entry,
    register_attention,
)

HYBRID = "hybrid"
ENTRY_KEYS = ("name", "options")
MODEL_SET = ("head_dim", "num_heads", "max_length", "causal", "seed")  # every layer's, from the model and the hybrid


@dataclasses.dataclass
class HybridConfig(AttentionConfig):
    layers: list = option(
        ["gated-deltanet", "sliding-window"],
        "the pattern: attention names or {name, options}, repeated over the layers (layer i takes entry i mod its "
        "length); num_layers must be a multiple of its length",
    )
    ratio: int | None = option(
        None,
        "r: with two layers [linear, full], the pattern [linear] * r + [full] (r:1); None: layers as given",
        minimum=1,
    )
    shared: dict = rest_option(
        "every other option of the hybrid: passed to each layer whose attention takes an option of that name"
    )

    def __post_init__(self) -> None:
        for name, options in self.pattern():
            ATTENTIONS.make_config(
                name, head_dim=self.head_dim, num_heads=self.num_heads, max_length=self.max_length, **options
            )  # each layer's options, checked now

    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        """The pattern's entries as (name, own options), checked: registered attentions of one layer each."""
        entries = []
        for i, item in enumerate(self.layers):
            where = f"entry {i} of the hybrid's layers"
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, dict) or "name" not in item or set(item) - set(ENTRY_KEYS):
                raise ConfigError(f"{where} is {item!r}; give an attention's name or {{name: ..., options: {{...}}}}")
            name, options = item["name"], item.get("options") or {}
            entry = attention_entry(name)
            if entry.capabilities.layer_pattern:
                raise ConfigError(f"{where} is {name!r}, itself a pattern of layers; list its layers instead")
            if entry.capabilities.learning_phase is not None:
                raise ConfigError(
                    f"{where} is {name!r}, which has a learning phase ({entry.capabilities.learning_phase}) that "
                    f"runs on a model of that attention alone; a hybrid cannot run it"
                )
            if not isinstance(options, dict):
                raise ConfigError(f"options of {where} ({name!r}) is {options!r}; give a mapping")
            entries.append((name, dict(options)))
        if not entries:
            raise ConfigError("the hybrid's layers are empty; list at least one attention")
        return entries

    def pattern(self) -> list[tuple[str, dict[str, Any]]]:
        """One period of layers, each (name, options): its own, the shared ones its attention takes, and causal."""
        entries = self.entries()
        if self.ratio is not None:
            if len(entries) != 2:
                raise ConfigError(
                    f"ratio={self.ratio} repeats the first of two layers [linear, full]; the hybrid lists "
                    f"{len(entries)}: give two, or drop ratio and list the pattern"
                )
            entries = [entries[0]] * self.ratio + [entries[1]]
        fields = {name: {f.name for f in dataclasses.fields(attention_entry(name).config)} for name, _ in entries}
        for key in self.shared:
            if key in MODEL_SET or not any(key in taken for taken in fields.values()):
                known = sorted(set().union(*fields.values()) - set(MODEL_SET))
                hint = closest(str(key), known)
                raise ConfigError(
                    f"option {key!r} is taken by none of the hybrid's layers ({', '.join(fields)})"
                    + (f"; did you mean {hint!r}?" if hint else "")
                    + f" their options: {', '.join(known)}"
                )
        return [
            (name, {**{k: v for k, v in self.shared.items() if k in fields[name]}, **own, "causal": self.causal})
            for name, own in entries
        ]


def _layers_capabilities(cfg: HybridConfig) -> list[Capabilities]:
    return [attention_capabilities(name, **options) for name, options in cfg.pattern()]


@register_attention(
    HYBRID,
    config=HybridConfig,
    layer_pattern=True,
    causal=lambda cfg: all(c.causal for c in _layers_capabilities(cfg)),
    recurrent_state=lambda cfg: all(c.recurrent_state for c in _layers_capabilities(cfg)),
    padding_mask=lambda cfg: all(c.padding_mask for c in _layers_capabilities(cfg)),
    needs_max_length=lambda cfg: any(c.needs_max_length for c in _layers_capabilities(cfg)),
    normalised=False,
    positive_features=False,
)
def hybrid(cfg: HybridConfig) -> None:
    """A pattern of attentions over the layers (layers: [...], ratio, and options for the layers)."""
    raise ConfigError(
        "'hybrid' is a pattern of attentions over a model's layers, not one layer's attention; a model builds it "
        "layer by layer (attnbench.registry.layer_attentions); build its layers' attentions by name"
    )
