"""Fair sizing: each label's model sized to a target parameter count or decoding-state size by one knob.

Zoology and MAD compare mixers at equal state and at equal parameters, so that a plot of recall against state,
or a table at one budget, compares equals. A suite asks for it among the model settings (suite-wide, per task or
per attention label):

    model:
      match: {parameters: 200000, by: d_model, tolerance: 0.05}     # the whole model's parameters
      match: {state_bytes: 16384, by: num_features}                 # the decoding state per sequence and layer

The rule, the same for every label:
- the knob `by`: `d_model` (the width: multiples of num_heads, so the head count stays; ffn_dim keeps its ratio
  to d_model), `num_heads` (the divisors of d_model), or an integer option of the attention (`num_features`,
  `feature_dim`, `window`, ...: from the option's declared minimum to its maximum, else 65,536);
- the quantity of a candidate value is counted from what it measures: the parameters of the model built with it
  (every tensor `parameters()` yields: `attnbench.parameter_budget.parameter_total`); the state bytes of one
  sequence of one layer's attention after the task's row length (the tensors its `prefill_state` or `step`
  carries: `attnbench.measurements.state.carried_state`);
- the value chosen is the one whose quantity is closest to the target (relative miss |q / target - 1|): every
  candidate where there are at most 32, else a doubling search from the configured value brackets the target
  and a bisection finds it, the quantity taken to grow with the knob (it does for width, features and window);
- a label whose closest value misses by more than `tolerance` (default 5%) is not run: its cells are skipped
  naming the closest value and its quantity, so a budget table or a LRA row never holds a model outside it.
Each sized cell records target, knob, value, quantity, ratio and tolerance in its details (`sizing`), and the
model configuration that ran (provenance.config.model) has the width chosen. The training measurements size
their models (accuracy, robustness, fidelity, recall, lm); efficiency, state and decode measure the label as given.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnbench.errors import ConfigError
from attnbench.measurements import SkipCell
from attnbench.measurements.state import carried_state
from attnbench.model import ModelConfig
from attnbench.names import MODEL_SET_ATTENTION_OPTIONS
from attnbench.options import make_options, option, require
from attnbench.parameter_budget import parameter_total
from attnbench.recurrence import state_bytes
from attnbench.registry import attention_entry, build_attention

MODEL_KNOBS = ("d_model", "num_heads")
EXHAUSTIVE = 32  # at most this many candidates: every one is counted
OPTION_MAXIMUM = 65536  # an attention option's largest candidate where its config declares no maximum


@dataclasses.dataclass
class MatchConfig:
    """The target one model setting `match` sizes every label to."""

    parameters: int | None = option(None, "target parameter count of the whole model", minimum=1)
    state_bytes: int | None = option(
        None, "target decoding-state bytes of one sequence and layer at the task's row length", minimum=1
    )
    by: str = option("d_model", "the knob: d_model, num_heads, or an integer option of the attention")
    tolerance: float = option(0.05, "largest relative miss |achieved / target - 1| a label may keep", minimum=0)

    def __post_init__(self) -> None:
        require(
            (self.parameters is None) != (self.state_bytes is None),
            "match takes one target, parameters: N or state_bytes: N; give exactly one",
        )

    @property
    def quantity(self) -> str:
        return "parameters" if self.parameters is not None else "state_bytes"

    @property
    def target(self) -> int:
        return self.parameters if self.parameters is not None else self.state_bytes  # type: ignore[return-value]


def match_config(match: dict[str, Any]) -> MatchConfig:
    """The `match` model setting validated (ConfigError naming what is wrong)."""
    return make_options(MatchConfig, match, what="model setting 'match'")


def check_knob(match: MatchConfig, attention: str) -> None:
    """A ConfigError unless `by` is a model knob or an integer option of `attention`, and state_bytes a causal one."""
    if match.by not in MODEL_KNOBS and _option_field(attention, match.by) is None:
        options = sorted(_int_options(attention))
        raise ConfigError(
            f"match by={match.by!r} is neither {' nor '.join(MODEL_KNOBS)} nor an integer option of attention "
            f"{attention!r} (its integer options: {', '.join(options) or 'none'}); pick one of those"
        )
    if match.state_bytes is not None and not attention_entry(attention).capabilities.causal:
        raise ConfigError(
            f"match state_bytes needs a decoding state, and attention {attention!r} has no causal form; "
            f"match parameters instead"
        )


def _int_options(attention: str) -> dict[str, dataclasses.Field]:
    """The attention's own options whose type is int (or int | None), by name (not those the model sets)."""
    config = attention_entry(attention).config
    hints = typing.get_type_hints(config)
    return {
        f.name: f
        for f in dataclasses.fields(config)
        if hints[f.name] in (int, int | None) and f.name not in MODEL_SET_ATTENTION_OPTIONS
    }


def _option_field(attention: str, name: str) -> dataclasses.Field | None:
    return _int_options(attention).get(name)


@dataclasses.dataclass(frozen=True)
class Sized:
    """A model configuration and attention options after `match` (unchanged without it) and what was chosen."""

    config: ModelConfig
    options: dict[str, Any]
    record: dict[str, Any] | None


def candidates(config: ModelConfig, attention: str, by: str) -> list[int]:
    """The knob's values, ascending."""
    if by == "d_model":
        return [config.num_heads * k for k in range(1, 65536 // config.num_heads + 1)]
    if by == "num_heads":
        return [h for h in range(1, config.d_model + 1) if config.d_model % h == 0]
    f = _option_field(attention, by)
    low = int(f.metadata.get("minimum") or 1)
    high = int(f.metadata.get("maximum") or OPTION_MAXIMUM)
    return list(range(max(low, 1), high + 1))


def with_knob(config: ModelConfig, options: dict[str, Any], by: str, value: int) -> tuple[ModelConfig, dict]:
    """The configuration and options with the knob at `value` (d_model moves ffn_dim with it, at its ratio)."""
    if by == "d_model":
        ffn = max(1, round(config.ffn_dim * value / config.d_model))
        return dataclasses.replace(config, d_model=value, ffn_dim=ffn), dict(options)
    if by == "num_heads":
        return dataclasses.replace(config, num_heads=value), dict(options)
    return config, {**options, by: value}


def closest_value(values: list[int], quantity: Callable[[int], float], target: float, start: int) -> int:
    """The value whose quantity is closest to `target` (relative miss): each of at most EXHAUSTIVE values, else a
    doubling search from the index nearest `start` and a bisection, the quantity taken as non-decreasing."""
    miss = lambda v: abs(quantity(v) / target - 1.0)  # noqa: E731
    if len(values) <= EXHAUSTIVE:
        return min(values, key=miss)
    i = min(range(len(values)), key=lambda j: abs(values[j] - start))
    lo, hi, step = i, i, 1
    if quantity(values[i]) < target:
        while hi < len(values) - 1 and quantity(values[hi]) < target:
            lo, hi, step = hi, min(hi + step, len(values) - 1), step * 2
    else:
        while lo > 0 and quantity(values[lo]) >= target:
            hi, lo, step = lo, max(lo - step, 0), step * 2
    while hi - lo > 1:  # quantity(values[lo]) < target <= quantity(values[hi]), where both ends bracket it
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if quantity(values[mid]) < target else (lo, mid)
    return min((values[lo], values[hi]), key=miss)


def size_to_match(
    config: ModelConfig,
    attention: str,
    options: dict[str, Any],
    *,
    length: int,
    build: Callable[[ModelConfig, dict[str, Any]], nn.Module],
) -> Sized:
    """`config` and `options` sized by `config.match` (unchanged without it): `build(config, options)` makes the
    model whose parameters count, `length` is the row length the state is counted at. SkipCell where the closest
    value misses the tolerance."""
    if config.match is None:
        return Sized(config, dict(options), None)
    match = match_config(config.match)
    check_knob(match, attention)
    counted: dict[int, int] = {}

    def quantity(value: int) -> float:
        if value not in counted:
            cfg, opts = with_knob(config, options, match.by, value)
            counted[value] = (
                _parameters(build, cfg, opts)
                if match.parameters is not None
                else _state_bytes(attention, cfg, opts, length)
            )
        return float(counted[value])

    start = getattr(config, match.by) if match.by in MODEL_KNOBS else options.get(match.by, 1)
    value = closest_value(candidates(config, attention, match.by), quantity, match.target, int(start))
    achieved = int(quantity(value))
    record = {
        "target": {match.quantity: match.target},
        "by": match.by,
        "value": value,
        "achieved": achieved,
        "ratio": achieved / match.target,
        "tolerance": match.tolerance,
        "within": abs(achieved / match.target - 1.0) <= match.tolerance + 1e-12,
        "counted": len(counted),
    }
    if not record["within"]:
        raise SkipCell(
            f"match {match.quantity}={match.target} by {match.by}: the closest, {match.by}={value}, gives "
            f"{achieved} ({record['ratio']:.3f}x), outside the tolerance {match.tolerance:g}; change the target, "
            f"the knob or the tolerance"
        )
    sized_config, sized_options = with_knob(config, options, match.by, value)
    return Sized(sized_config, sized_options, record)


def _parameters(build: Callable[[ModelConfig, dict[str, Any]], nn.Module], cfg: ModelConfig, opts: dict) -> int:
    with torch.random.fork_rng(devices=[]):  # building seeds torch's generator: leave the caller's stream alone
        return parameter_total(build(cfg, opts))


def _state_bytes(attention: str, cfg: ModelConfig, opts: dict[str, Any], length: int) -> int:
    with torch.random.fork_rng(devices=[]):
        module = build_attention(
            attention,
            head_dim=cfg.head_dim,
            num_heads=cfg.num_heads,
            max_length=length,
            seed=0,
            **{**opts, "causal": True},
        ).eval()
        return state_bytes(carried_state(module, length, cfg.head_dim, cfg.num_heads))
