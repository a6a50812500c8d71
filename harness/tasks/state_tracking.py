"""State tracking: parity, counting modulo m and the word problem of S3 / S5, the running state labelled at every
position (as the state-tracking papers score it), for the decoder.

A row is a sequence of input symbols x_1 .. x_L, and position t is labelled with the state after x_1 .. x_t:
- `parity`: bits; the state is x_1 xor ... xor x_t;
- `modular_count`: symbols 0 .. num_values - 1; the state is (x_1 + ... + x_t) mod `modulus`;
- `permutation`: the elements of the symmetric group S_n (n = 3 or 5, all n! of them as symbols, numbered in
  lexicographic order of their one-line form); the state is the product x_1 x_2 ... x_t, composed left to right
  (as permutations of {0 .. n-1}, (a b)(i) = b(a(i)): a acts first), the word problem of Merrill et al. (2024,
  "The illusion of state in state-space models"); S5 is not solvable, so no constant-depth circuit of the kind
  a fixed-depth transformer or a diagonal linear recurrence computes can track it at every length.
Grazzi et al. (2025, arXiv 2411.12537) show that a linear recurrence whose transition eigenvalues are all positive
cannot solve parity at any length; gates in (0, 1) are such transitions.

Lengths: training and validation rows at `train_lengths` (equal shares, rows of several lengths padded on the
right), the test split at the same lengths, and one more test split per `test_lengths` entry
(`TaskData.eval_splits`, scored as `accuracy@<length>`). Rows are drawn independently (long rows collide with
vanishing probability; nothing de-duplicates them). Token ids: 0 is padding, then the input symbols, then the
state symbols; the labels are state ids, so the decoder's head over the vocabulary predicts them.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import ClassVar, Literal

import numpy as np
import torch

from attnbench.options import option, require
from attnbench.tasks import TaskConfig, TestRows, register_task
from attnbench.tasks.sequence import IGNORE, SequenceTaskData, TokenSplit, no_label_noise

PAD_ID = 0
GROUP_DEGREES = {"S3": 3, "S5": 5}


@dataclasses.dataclass
class StateTrackingConfig(TaskConfig):
    """Lengths and split sizes shared by the state-tracking tasks."""

    test_rows: ClassVar[TestRows] = "fresh"  # every seed draws its own rows

    train_lengths: list[int] = option([32], "lengths of the training (and validation, test) rows", minimum=1)
    test_lengths: list[int] = option(
        [32, 64, 128], "lengths of the extra test splits, each scored as accuracy@<length>", minimum=1
    )
    num_train: int = option(4000, "training rows", minimum=1, maximum=10_000_000)
    num_validation: int = option(500, "validation rows", minimum=1, maximum=10_000_000)
    num_test: int = option(500, "test rows, and rows of each extra test split", minimum=1, maximum=10_000_000)

    def __post_init__(self) -> None:
        super().__post_init__()
        no_label_noise(self.label_noise, "state tracking")
        require(len(self.train_lengths) >= 1, "train_lengths is empty; give at least one length")
        self.train_lengths, self.test_lengths = sorted(set(self.train_lengths)), sorted(set(self.test_lengths))

    def symbols(self) -> int:
        """How many input symbols the task draws from."""
        raise NotImplementedError

    def states(self) -> int:
        """How many states the running state takes."""
        raise NotImplementedError

    def running_states(self, symbols: np.ndarray) -> np.ndarray:
        """The state after each prefix: symbols (N, L) in [0, symbols()) -> states (N, L) in [0, states())."""
        raise NotImplementedError


@dataclasses.dataclass
class ParityConfig(StateTrackingConfig):
    """Parity of the bits read so far."""

    def symbols(self) -> int:
        return 2

    def states(self) -> int:
        return 2

    def running_states(self, symbols: np.ndarray) -> np.ndarray:
        return np.cumsum(symbols, axis=1) % 2


@dataclasses.dataclass
class ModularCountConfig(StateTrackingConfig):
    """The sum of the symbols read so far, modulo `modulus`."""

    modulus: int = option(5, "m: the state is the running sum mod m", minimum=2, maximum=1000)
    num_values: int | None = option(None, "symbols 0 .. num_values - 1 (None: modulus)", minimum=2, maximum=1000)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.num_values = self.num_values or self.modulus

    def symbols(self) -> int:
        return self.num_values

    def states(self) -> int:
        return self.modulus

    def running_states(self, symbols: np.ndarray) -> np.ndarray:
        return np.cumsum(symbols, axis=1) % self.modulus


@dataclasses.dataclass
class PermutationConfig(StateTrackingConfig):
    """The product of the permutations read so far (the word problem of S3 or S5)."""

    group: Literal["S3", "S5"] = option("S5", "the symmetric group: S3 (6 elements, solvable) or S5 (120, not)")

    def symbols(self) -> int:
        return len(group_elements(GROUP_DEGREES[self.group]))

    def states(self) -> int:
        return self.symbols()

    def running_states(self, symbols: np.ndarray) -> np.ndarray:
        table = composition_table(GROUP_DEGREES[self.group])
        states = np.empty_like(symbols)
        state = symbols[:, 0]
        states[:, 0] = state
        for t in range(1, symbols.shape[1]):
            state = table[state, symbols[:, t]]
            states[:, t] = state
        return states


def group_elements(degree: int) -> list[tuple[int, ...]]:
    """The permutations of {0 .. degree-1} in one-line form (p[i] is the image of i), lexicographic order."""
    return list(itertools.permutations(range(degree)))


def composition_table(degree: int) -> np.ndarray:
    """table[a, b] = the number of the product a b (a acts first: i -> b[a[i]]) -> (n!, n!) int."""
    elements = group_elements(degree)
    number = {p: i for i, p in enumerate(elements)}
    return np.array([[number[tuple(b[a[i]] for i in range(degree))] for b in elements] for a in elements])


def state_rows(cfg: StateTrackingConfig, lengths: list[int], count: int, seed: list[int]) -> TokenSplit:
    """`count` rows in equal shares over `lengths` (the longer first get the remainder), padded on the right to the
    longest: input ids 1 .. symbols, labels the state ids after each prefix; seeded by `seed` (a SeedSequence
    entropy list)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    width, first_state = max(lengths), 1 + cfg.symbols()
    ids = np.full((count, width), PAD_ID, dtype=np.int64)
    labels = np.full((count, width), IGNORE, dtype=np.int64)
    shares = np.array_split(np.arange(count), len(lengths))
    for length, rows in zip(lengths, shares[::-1]):
        symbols = rng.integers(cfg.symbols(), size=(len(rows), length))
        ids[rows, :length] = 1 + symbols
        labels[rows, :length] = first_state + cfg.running_states(symbols)
    order = rng.permutation(count)
    ids, labels = torch.from_numpy(ids[order]), torch.from_numpy(labels[order])
    return TokenSplit(ids, ids != PAD_ID, labels)


def state_tracking_task(name: str, cfg: StateTrackingConfig, what: str) -> SequenceTaskData:
    """The task `name`: train, validation and test rows at train_lengths, an extra test split per test length."""
    splits = {
        split: state_rows(cfg, cfg.train_lengths, size, [cfg.seed, i])
        for i, (split, size) in enumerate(
            (("train", cfg.num_train), ("validation", cfg.num_validation), ("test", cfg.num_test))
        )
    }
    eval_splits = {n: state_rows(cfg, [n], cfg.num_test, [cfg.seed, 3, n]) for n in cfg.test_lengths}
    return SequenceTaskData(
        name,
        splits,
        num_classes=1 + cfg.symbols() + cfg.states(),
        vocab_size=1 + cfg.symbols() + cfg.states(),
        max_length=max(cfg.train_lengths),
        pad_id=PAD_ID,
        info={
            "source": f"generated (state tracking: {what}, running state labelled at every position)",
            "symbol_ids": [1, cfg.symbols()],
            "state_ids": [1 + cfg.symbols(), cfg.symbols() + cfg.states()],
            "train_lengths": cfg.train_lengths,
            "test_lengths": cfg.test_lengths,
        },
        eval_splits=eval_splits,
    )


@register_task("parity", config=ParityConfig)
def parity(cfg: ParityConfig) -> SequenceTaskData:
    """Parity: label every prefix of a bit string with its parity."""
    return state_tracking_task("parity", cfg, "parity of the bits so far")


@register_task("modular_count", config=ModularCountConfig)
def modular_count(cfg: ModularCountConfig) -> SequenceTaskData:
    """Counting modulo m: label every prefix with the sum of its symbols mod m."""
    return state_tracking_task("modular_count", cfg, f"sum mod {cfg.modulus} of symbols 0..{cfg.num_values - 1}")


@register_task("permutation", config=PermutationConfig)
def permutation(cfg: PermutationConfig) -> SequenceTaskData:
    """Word problem of S3 / S5: label every prefix with the product of its permutations."""
    return state_tracking_task("permutation", cfg, f"word problem of {cfg.group}")
