"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), generated as Zoology generates it.

A row of `seq_len` tokens: `num_kv_pairs` key-value pairs k1 v1 ... kP vP (keys distinct, drawn from
[1, vocab/2); values distinct, from [vocab/2, vocab)), then the rest of the row, where each key is asked
once, at an even offset 2 g of the query region, the gaps g drawn without replacement with probability
proportional to g^(power_a - 1) (small gaps likelier: a power law). The label at a query's position is
the value paired with that key (the next token to predict); every other position carries -100. Other
positions of the query region hold random tokens from the whole vocabulary (Zoology's
`random_non_queries`). The decoder is scored on the labelled positions only.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch

from attnbench.options import option, require
from attnbench.tasks import TaskConfig, TestRows, register_task
from attnbench.tasks.sequence import IGNORE, SequenceTaskData, TokenSplit, no_label_noise


@dataclasses.dataclass
class MqarConfig(TaskConfig):
    """Options of the MQAR generator (Zoology's names)."""

    num_kv_pairs: int = option(8, "key-value pairs per row (each key is queried once)", minimum=1)
    seq_len: int = option(64, "tokens per row (even, at least 4 num_kv_pairs)", minimum=4)
    vocab_size: int = option(8192, "token vocabulary: keys below vocab/2, values above (more than seq_len)", minimum=8)
    power_a: float = option(0.01, "power-law exponent of the query gaps: p(g) ~ g^(power_a - 1)")
    num_train: int = option(20000, "training rows", minimum=1)
    num_validation: int = option(1000, "validation rows", minimum=1)
    num_test: int = option(1000, "test rows", minimum=1)

    test_rows: ClassVar[TestRows] = "fresh"  # every seed draws its own rows

    def __post_init__(self) -> None:
        super().__post_init__()
        no_label_noise(self.label_noise, "mqar")
        require(self.seq_len % 2 == 0, f"seq_len={self.seq_len} must be even")
        require(self.vocab_size > self.seq_len, f"vocab_size={self.vocab_size} must exceed seq_len={self.seq_len}")
        require(
            4 * self.num_kv_pairs <= self.seq_len,
            f"num_kv_pairs={self.num_kv_pairs} needs seq_len >= {4 * self.num_kv_pairs}; raise seq_len",
        )
        require(
            self.num_kv_pairs < self.vocab_size // 2,
            f"num_kv_pairs={self.num_kv_pairs} distinct keys need vocab_size above {2 * self.num_kv_pairs}",
        )
        require(self.power_a > 0, f"power_a={self.power_a} must be positive")
        space = (self.seq_len - 2 * self.num_kv_pairs) // 2
        with np.errstate(all="ignore"):
            weights = gap_weights(space, self.power_a)
        require(
            bool(np.isfinite(weights).all()) and np.count_nonzero(weights) >= self.num_kv_pairs,
            f"power_a={self.power_a}: the query gaps' weights g^(power_a - 1) over gaps 1..{space} overflow or vanish "
            f"(no {self.num_kv_pairs} distinct gaps can be drawn from them); use a smaller power_a (Zoology: 0.01; "
            f"above 1 favours long gaps, e.g. 2 or 10)",
        )

    def at_length(self, length: int) -> MqarConfig:
        """Rows of `length` tokens, the same pairs per row; the test split's seed does not depend on the others'
        sizes, so they shrink to one row."""
        return dataclasses.replace(self, seq_len=length, num_train=1, num_validation=1, eval_lengths=[])


def gap_weights(space: int, power_a: float) -> np.ndarray:
    """The probability of each query gap 1..space: p(g) ~ g^(power_a - 1), as Zoology draws them."""
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    return p / p.sum()


def multiquery_ar(
    num_examples: int, seq_len: int, vocab_size: int, num_kv_pairs: int, power_a: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """MQAR rows as Zoology's `multiquery_ar` makes them -> (inputs (N, seq_len), labels (N, seq_len), -100 =
    no label). Seeded by `seed` alone (numpy's Generator)."""
    rng = np.random.default_rng(seed)
    context = 2 * num_kv_pairs
    key_vocab = vocab_size // 2
    keys = np.stack(
        [rng.choice(np.arange(1, key_vocab), size=num_kv_pairs, replace=False) for _ in range(num_examples)]
    )
    values = np.stack(
        [rng.choice(np.arange(key_vocab, vocab_size), size=num_kv_pairs, replace=False) for _ in range(num_examples)]
    )
    kvs = np.zeros((num_examples, context), dtype=np.int64)
    kvs[:, 0::2], kvs[:, 1::2] = keys, values
    space = (seq_len - context) // 2
    p = gap_weights(space, power_a)
    gaps = np.stack([rng.choice(space, size=num_kv_pairs, replace=False, p=p) for _ in range(num_examples)])
    queries = np.zeros((num_examples, seq_len - context + 1), dtype=np.int64)
    np.put_along_axis(queries, gaps * 2, keys, axis=1)
    examples = np.concatenate([kvs, queries], axis=1)
    labels = np.full((num_examples, seq_len + 1), IGNORE, dtype=np.int64)
    np.put_along_axis(labels, gaps * 2 + context + 1, values, axis=1)
    inputs, labels = torch.from_numpy(examples[:, :-1].copy()), torch.from_numpy(labels[:, 1:].copy())
    filler = torch.from_numpy(rng.integers(vocab_size, size=inputs.shape))
    inputs = torch.where(inputs == 0, filler, inputs)
    return inputs, labels


@register_task("mqar", config=MqarConfig)
def mqar(cfg: MqarConfig) -> SequenceTaskData:
    """Multi-query associative recall (Zoology): recall the value of each queried key, answers only labelled."""
    splits = {}
    for i, (split, size) in enumerate(
        (("train", cfg.num_train), ("validation", cfg.num_validation), ("test", cfg.num_test))
    ):
        inputs, labels = multiquery_ar(
            size,
            cfg.seq_len,
            cfg.vocab_size,
            cfg.num_kv_pairs,
            cfg.power_a,
            seed=int(np.random.SeedSequence([cfg.seed, i]).generate_state(1)[0]),
        )
        splits[split] = TokenSplit(inputs, torch.ones_like(inputs, dtype=torch.bool), labels)
    return SequenceTaskData(
        "mqar",
        splits,
        num_classes=cfg.vocab_size,
        vocab_size=cfg.vocab_size,
        max_length=cfg.seq_len,
        pad_id=0,
        info={
            "source": "generated (MQAR as Zoology's multiquery_ar, random non-queries)",
            "num_kv_pairs": cfg.num_kv_pairs,
            "power_a": cfg.power_a,
        },
    )
