"""ListOps (Long Range Arena generator semantics): the value of a nested list expression.

Trees are drawn as in LRA's `generate_tree`: below `max_depth` a node is an operator with
probability `operator_probability` (LRA: 0.25), else a digit; an operator takes 2..`max_args`
arguments. Operators: [MAX, [MIN, [MED (integer part of the median), [SM (sum modulo the number of
values). Expressions outside [min_length, max_length] tokens are rejected. Printed form:
"[MAX 2 9 [MIN 4 7 ] 0 ]"; one token per digit, operator and closing bracket.

`preset: lra` sets LRA's sizes (lengths 500-2,000, depth 10, up to 10 arguments, 96k/2k/2k examples;
google-research/long-range-arena, lra_benchmarks/data/listops.py); `preset: cpu` (the default) keeps the
options as given. The cell's provenance names the preset that ran.

Class balance: LRA keeps every expression its generator draws, so its classes are as unequal as the values of
random expressions (its majority class holds 17.3% of its data); `class_balance: balanced` instead gives every
class an equal share of each split (a classifier cannot then score above 10% by the majority class alone, and
chance is the same in every split). The default follows the preset: natural under `preset: lra` (LRA's data, so
that accuracies compare with LRA's), balanced under `preset: cpu` (this harness's earlier choice, which the
committed lra-cpu run used; its cells keep their ids). Under `preset: lra` the splits changed from balanced to
natural, so its cells carry generator version 2 and get new ids.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Literal

import numpy as np

from attnbench.errors import ConfigError
from attnbench.options import option, require
from attnbench.tasks import register_task
from attnbench.tasks.base import TaskData
from attnbench.tasks.synthetic import Example, SyntheticConfig, balanced_splits, split_info

Operator = Literal["MAX", "MIN", "MED", "SM"]
OPERATORS: tuple[str, ...] = ("MAX", "MIN", "MED", "SM")
PAD_ID = 0


@dataclasses.dataclass
class ListOpsConfig(SyntheticConfig):
    """Options of the ListOps generator (defaults sized for CPU; LRA used lengths 500-2000)."""

    min_length: int = option(32, "shortest expression in tokens")
    max_length: int = option(128, "longest expression in tokens (the row width)", maximum=65536)
    max_depth: int = option(10, "maximum nesting depth (LRA: 10)")
    max_args: int = option(5, "maximum arguments of an operator (LRA: 10, for lengths 500-2000)")
    num_classes: int = option(10, "values are the digits 0..num_classes-1; SM is the sum modulo num_classes")
    operators: list[Operator] = option(list(OPERATORS), "operators used")
    operator_probability: float = option(0.25, "probability that a node above max_depth is an operator (LRA: 0.25)")
    preset: Literal["cpu", "lra"] = option(
        "cpu",
        "cpu: the options as given; lra: LRA's sizes (lengths 500-2000, "
        "depth 10, 10 arguments, 96k/2k/2k), which then may not be given",
    )
    class_balance: Literal["balanced", "natural"] | None = option(
        None,
        "balanced: every class an equal share of each split; natural: the classes as the generator draws them "
        "(LRA's data: its majority class holds 17.3%); None: natural under preset lra, balanced under cpu",
    )

    def __post_init__(self) -> None:
        if self.preset == "lra":
            self._apply_lra_preset()
        self.class_balance = self.class_balance or ("natural" if self.preset == "lra" else "balanced")
        if self.preset == "lra" and self.class_balance == "natural":
            self.generator_version = 2  # preset lra made balanced splits before: its cells move, preset cpu's stay
        super().__post_init__()
        require(
            1 <= self.min_length <= self.max_length,
            f"min_length={self.min_length} and max_length={self.max_length} need 1 <= min <= max",
        )
        require(self.max_depth >= 2, f"max_depth={self.max_depth} must be at least 2 to allow an operator")
        require(self.max_args >= 2, f"max_args={self.max_args} must be at least 2")
        require(2 <= self.num_classes <= 100, f"num_classes={self.num_classes} must lie in [2, 100]")
        require(len(self.operators) >= 1, "operators is empty; give at least one of MAX, MIN, MED, SM")
        require(
            0 < self.operator_probability < 1, f"operator_probability={self.operator_probability} must lie in (0, 1)"
        )

    def at_length(self, length: int) -> ListOpsConfig:
        """Expressions up to `length` tokens, the shortest scaled alike (min_length x length / max_length), the rest
        of the options kept (a preset's values included); the training and validation splits shrink to one row
        per class. Drawn afresh: where the length ranges overlap, a row may also be a training row."""
        shortest = max(1, min(length, round(self.min_length * length / self.max_length)))
        few = self.num_classes
        return dataclasses.replace(
            self,
            preset="cpu",
            min_length=shortest,
            max_length=length,
            num_train=few,
            num_validation=few,
            eval_lengths=[],
        )

    def _apply_lra_preset(self) -> None:
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        changed = sorted(name for name in LRA_PRESET if getattr(self, name) != defaults[name])
        if changed:
            raise ConfigError(f"listops: preset: lra sets {changed} itself; remove them or use preset: cpu")
        for name, value in LRA_PRESET.items():
            setattr(self, name, value)


LRA_PRESET = {
    "min_length": 500,
    "max_length": 2000,
    "max_depth": 10,
    "max_args": 10,
    "num_train": 96_000,
    "num_validation": 2_000,
    "num_test": 2_000,
}


def vocabulary(num_classes: int, operators: tuple[str, ...] = OPERATORS) -> list[str]:
    """Token strings by id: [PAD], the digits, the operators ("[MAX", ...), then "]"."""
    return ["[PAD]"] + [str(v) for v in range(num_classes)] + ["[" + op for op in operators] + ["]"]


def apply_operator(op: str, args: list[int], num_classes: int) -> int:
    """The value of one operator on its argument values (MED: integer part of the median, as LRA)."""
    if op == "MAX":
        return max(args)
    if op == "MIN":
        return min(args)
    if op == "MED":
        ordered, mid = sorted(args), len(args) // 2
        return ordered[mid] if len(args) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
    return sum(args) % num_classes


def evaluate(tokens: list[int] | tuple[int, ...], num_classes: int) -> int:
    """The value of a tokenised expression (ids as in `vocabulary`), by a stack machine."""
    end_id = 1 + num_classes + len(OPERATORS)
    stack: list[list] = [["", []]]
    for t in tokens:
        if 1 <= t <= num_classes:
            stack[-1][1].append(t - 1)
        elif t == end_id:
            op, args = stack.pop()
            stack[-1][1].append(apply_operator(op, args, num_classes))
        else:
            stack.append([OPERATORS[t - 1 - num_classes], []])
    return stack[0][1][0]


class _TooLong(Exception):
    """The partial expression already exceeds max_length (the draw is rejected)."""


class ListOpsSampler:
    """Draws (tokens, value) examples; token ids follow `vocabulary(num_classes)`."""

    def __init__(self, cfg: ListOpsConfig):
        self.cfg = cfg
        self.end_id = 1 + cfg.num_classes + len(OPERATORS)
        self.op_ids = [1 + cfg.num_classes + OPERATORS.index(op) for op in cfg.operators]

    def __call__(self, rng: np.random.Generator) -> Example | None:
        tokens: list[int] = []
        fast = random.Random(int(rng.integers(2**63)))  # Python's generator: ~20x cheaper per draw
        try:
            self._tree(fast.random, depth=1, tokens=tokens)
        except _TooLong:
            return None
        if len(tokens) < self.cfg.min_length:
            return None
        return tuple(tokens), evaluate(tokens, self.cfg.num_classes)

    def _tree(self, uniform: Callable[[], float], depth: int, tokens: list[int]) -> None:
        cfg = self.cfg
        if len(tokens) >= cfg.max_length:
            raise _TooLong
        # A lone digit (length 1) is always rejected when min_length > 1, so the root is then
        # drawn as an operator directly: the accepted expressions keep LRA's distribution.
        operator_root = depth == 1 and cfg.min_length > 1
        if depth >= cfg.max_depth or (not operator_root and uniform() > cfg.operator_probability):
            tokens.append(1 + int(uniform() * cfg.num_classes))
            return
        tokens.append(self.op_ids[int(uniform() * len(self.op_ids))])
        for _ in range(2 + int(uniform() * (cfg.max_args - 1))):
            self._tree(uniform, depth + 1, tokens)
        tokens.append(self.end_id)
        if len(tokens) > cfg.max_length:
            raise _TooLong


@register_task("listops", config=ListOpsConfig)
def listops(cfg: ListOpsConfig) -> TaskData:
    """ListOps: classify the value (0-9) of a nested MAX/MIN/MED/SM expression (LRA generator)."""
    sampler = ListOpsSampler(cfg)
    splits = balanced_splits(sampler, cfg.num_classes, cfg, cfg.max_length, "listops", cfg.class_balance == "balanced")
    vocab = vocabulary(cfg.num_classes)
    return TaskData(
        "listops",
        splits,
        num_classes=cfg.num_classes,
        vocab_size=len(vocab),
        max_length=cfg.max_length,
        pad_id=PAD_ID,
        info={
            "source": "generated (LRA ListOps semantics)",
            "preset": cfg.preset,
            "class_balance": cfg.class_balance,
            "vocabulary": vocab,
            "splits": split_info(splits),
        },
        special_ids=(PAD_ID,),
    )
