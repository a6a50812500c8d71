"""State tracking: every label against an independent solver (a fold, a sum, products of permutation matrices)."""

from __future__ import annotations

import functools
import operator

import numpy as np
import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.tasks import load_task
from attnbench.tasks.state_tracking import group_elements

SMALL = {"num_train": 40, "num_validation": 10, "num_test": 12}


def real_rows(split) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) of each row without its padding."""
    return [
        (ids[m].tolist(), lab[m].tolist()) for ids, m, lab in zip(split.input_ids, split.attention_mask, split.labels)
    ]


def every_split(data):
    yield from data.splits.values()
    yield from data.eval_splits.values()


def test_parity_labels_are_a_fold_of_xor_over_each_prefix():
    data = load_task("parity", train_lengths=[5, 9], test_lengths=[30], **SMALL)
    symbol, state = data.info["symbol_ids"][0], data.info["state_ids"][0]
    for split in every_split(data):
        for ids, labels in real_rows(split):
            bits = [t - symbol for t in ids]
            assert set(bits) <= {0, 1}
            assert labels == [state + functools.reduce(operator.xor, bits[: t + 1]) for t in range(len(bits))]


def test_modular_count_labels_are_the_prefix_sums_mod_m():
    data = load_task("modular_count", modulus=3, num_values=7, train_lengths=[6], test_lengths=[20], **SMALL)
    symbol, state = data.info["symbol_ids"][0], data.info["state_ids"][0]
    for split in every_split(data):
        for ids, labels in real_rows(split):
            values = [t - symbol for t in ids]
            assert max(values) < 7
            assert labels == [state + sum(values[: t + 1]) % 3 for t in range(len(values))]


@pytest.mark.parametrize("group,degree", [("S3", 3), ("S5", 5)])
def test_permutation_labels_are_products_of_permutation_matrices(group, degree):
    data = load_task("permutation", group=group, train_lengths=[7], test_lengths=[25], **SMALL)
    symbol, state = data.info["symbol_ids"][0], data.info["state_ids"][0]
    elements = group_elements(degree)
    matrices = [np.eye(degree, dtype=int)[list(p)] for p in elements]  # row i has its 1 at column p[i]
    number = {m.tobytes(): i for i, m in enumerate(matrices)}
    assert len(number) == len(elements)  # a faithful representation: one matrix per element
    for split in every_split(data):
        for ids, labels in real_rows(split):
            product = np.eye(degree, dtype=int)
            for t, token in enumerate(ids):
                product = product @ matrices[token - symbol]  # x_1 acts first: e_i P_1 P_2 = e_{p2[p1[i]]}
                assert labels[t] == state + number[product.tobytes()]


def test_rows_at_each_length_and_one_eval_split_per_test_length():
    data = load_task("parity", train_lengths=[8, 16], test_lengths=[16, 64], **SMALL)
    train = data["train"]
    assert sorted(set(train.attention_mask.sum(dim=1).tolist())) == [8, 16] and train.input_ids.shape[1] == 16
    assert sorted(data.eval_splits) == [16, 64]
    for length, split in data.eval_splits.items():
        assert split.input_ids.shape == (12, length) and bool(split.attention_mask.all())
    assert not torch.equal(data.eval_splits[16].input_ids, data["test"].input_ids[:, :16])
    assert data.summary()["eval_splits"] == {"16": 12, "64": 12}
    again = load_task("parity", train_lengths=[8, 16], test_lengths=[16, 64], **SMALL)
    assert torch.equal(again.eval_splits[64].input_ids, data.eval_splits[64].input_ids)
    other = load_task("parity", seed=1, train_lengths=[8, 16], test_lengths=[16, 64], **SMALL)
    assert not torch.equal(other["train"].input_ids, train.input_ids)


def test_permutation_refuses_an_unknown_group():
    with pytest.raises(ConfigError, match="S4"):
        load_task("permutation", group="S4")
