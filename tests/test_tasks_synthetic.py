"""Generated tasks: determinism, balance, disjoint splits, label noise, and labels from independent evaluators."""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np
import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.tasks import load_task, task_names
from attnbench.tasks.listops import vocabulary
from attnbench.tasks.nonlinear import NonlinearConfig, NonlinearSampler

SIZES = {"num_train": 300, "num_validation": 100, "num_test": 100}
SMALL = {
    "listops": {**SIZES, "min_length": 16, "max_length": 64},
    "associative_recall": {**SIZES, "num_pairs": 8, "num_keys": 32, "num_classes": 5},
    "nonlinear_tokens": {**SIZES, "num_classes": 3, "max_length": 32},
}


@functools.lru_cache(maxsize=None)
def small(name: str, seed: int = 0, label_noise: float = 0.0):
    return load_task(name, seed=seed, label_noise=label_noise, **SMALL[name])


def rows(split) -> list[tuple[int, ...]]:
    return [tuple(ids[m].tolist()) for ids, m in zip(split.input_ids, split.attention_mask)]


def test_all_tasks_are_registered():
    assert set(task_names()) >= {
        "listops",
        "associative_recall",
        "nonlinear_tokens",
        "sst2",
        "rotten_tomatoes",
        "qqp",
        "text",
    }


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_data_other_seed_other_data(name):
    a, b, c = small(name, 0), load_task(name, seed=0, **SMALL[name]), small(name, 1)
    for split in ("train", "validation", "test"):
        assert torch.equal(a[split].input_ids, b[split].input_ids)
        assert torch.equal(a[split].labels, b[split].labels)
    assert not torch.equal(a["train"].input_ids, c["train"].input_ids)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_classes_balanced_and_sizes_as_asked(name):
    data = small(name)
    for split, size in zip(("train", "validation", "test"), SIZES.values()):
        counts = np.bincount(data[split].labels.numpy(), minlength=data.num_classes)
        assert counts.sum() == size
        assert counts.max() - counts.min() <= 1, (split, counts)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_splits_disjoint_and_rows_unique(name):
    data = small(name)
    seen: set = set()
    for split in ("train", "validation", "test"):
        these = rows(data[split])
        assert len(set(these)) == len(these)
        assert not seen & set(these), f"{split} shares rows with an earlier split"
        seen |= set(these)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_padding_is_right_and_ids_in_vocabulary(name):
    data = small(name)
    split = data["train"]
    lengths = split.attention_mask.sum(dim=1)
    assert torch.equal(split.attention_mask, torch.arange(split.input_ids.shape[1]) < lengths[:, None])
    assert (split.input_ids[~split.attention_mask] == data.pad_id).all()
    assert (split.input_ids[split.attention_mask] != data.pad_id).all()
    assert int(split.input_ids.max()) < data.vocab_size


@pytest.mark.parametrize("name", sorted(SMALL))
def test_label_noise_flips_that_fraction_of_train_only(name):
    clean, noisy = small(name), small(name, label_noise=0.2)
    flipped = int((clean["train"].labels != noisy["train"].labels).sum())
    assert flipped == round(0.2 * SIZES["num_train"])
    assert torch.equal(clean["train"].input_ids, noisy["train"].input_ids)
    for split in ("validation", "test"):
        assert torch.equal(clean[split].labels, noisy[split].labels)
    assert noisy.info["label_noise"]["flipped"] == flipped
    assert not torch.equal(noisy["train"].labels, small(name, seed=1, label_noise=0.2)["train"].labels)


def _evaluate_listops(words: list[str]) -> int:
    """Independent recursive evaluator over the printed form, e.g. '[MAX 2 [SM 4 7 ] ]'."""

    def parse(i: int) -> tuple[int, int]:
        if words[i].isdigit():
            return int(words[i]), i + 1
        op, args, i = words[i][1:], [], i + 1
        while words[i] != "]":
            value, i = parse(i)
            args.append(value)
        result = {"MAX": max, "MIN": min, "MED": lambda a: int(statistics.median(a)), "SM": lambda a: sum(a) % 10}[op](
            args
        )
        return result, i + 1

    value, end = parse(0)
    assert end == len(words)
    return value


def test_listops_labels_match_an_independent_evaluator():
    data = small("listops")
    words = vocabulary(10)
    for split in ("train", "test"):
        for row, label in zip(rows(data[split]), data[split].labels.tolist()):
            assert 16 <= len(row) <= 64
            assert _evaluate_listops([words[t] for t in row]) == label


def _recall_pairs(row: tuple[int, ...], layout: str, num_keys: int, num_classes: int) -> list[tuple[int, int]]:
    """(key, value) numbers of a row's pairs, decoded from the token ids."""
    body = row[:-2]
    if layout == "joined":
        return [divmod(t - 2 - num_keys, num_classes) for t in body]
    assert all(2 <= k < 2 + num_keys for k in body[0::2]) and all(v >= 2 + num_keys for v in body[1::2])
    return [(k - 2, v - 2 - num_keys) for k, v in zip(body[0::2], body[1::2])]


@pytest.mark.parametrize("layout", ["joined", "separate"])
def test_recall_label_is_the_value_of_the_queried_key(layout):
    num_keys, num_classes = 32, 5
    data = load_task("associative_recall", layout=layout, **SMALL["associative_recall"])
    assert data.max_length == (8 if layout == "joined" else 16) + 2
    for row, label in zip(rows(data["train"]), data["train"].labels.tolist()):
        pairs = _recall_pairs(row, layout, num_keys, num_classes)
        keys = [k for k, _ in pairs]
        assert row[-2] == 1 and len(set(keys)) == len(keys) == 8 and all(0 <= k < num_keys for k in keys)
        assert dict(pairs)[row[-1] - 2] == label
        counts = [[v for _, v in pairs].count(c) for c in range(num_classes)]
        assert max(counts) - min(counts) <= 1  # no majority-value shortcut
        assert max(row) < data.vocab_size


def test_nonlinear_cross_token_term_matches_a_naive_double_loop():
    score = NonlinearSampler(NonlinearConfig(num_features=4, num_tokens=16, sharpness=2.0)).score
    types = [3, 7, 7, 0, 15]
    outputs = []
    for i, a in enumerate(types):
        weights = {
            j: math.exp(2.0 * float(score.z[a] @ score.a @ score.z[b]) / math.sqrt(4))
            for j, b in enumerate(types)
            if j != i
        }
        total = sum(weights.values())
        mixed = sum(w / total * score.z[types[j]] for j, w in weights.items())
        outputs.append(math.sin(float(score.u @ mixed)))
    assert score.terms(np.array(types))[1] == pytest.approx(np.mean(outputs))
    assert score.terms(np.array(types))[0] == pytest.approx(np.mean(score.single[types]))


@pytest.mark.parametrize("noise, low, high", [(0.0, 1.0, 1.0), (20.0, 0.35, 0.65)])
def test_nonlinear_noise_sigma_controls_agreement_with_the_clean_score(noise, low, high):
    data = load_task("nonlinear_tokens", seed=3, noise=noise, num_classes=2, **SIZES)
    clean = NonlinearSampler(NonlinearConfig(seed=3, noise=0.0, num_classes=2))
    split = data["train"]
    scores = [clean.score.score(clean.score.terms(np.array(r) - 1)) for r in rows(split)]
    agree = np.mean((np.array(scores) > np.median(scores)) == split.labels.numpy().astype(bool))
    assert low <= agree <= high


@pytest.mark.parametrize("name", sorted(SMALL))
def test_rows_fit_the_shared_classifier(name):
    data = small(name)
    cfg = ModelConfig(
        vocab_size=data.vocab_size,
        num_classes=data.num_classes,
        max_length=data.max_length,
        d_model=16,
        num_heads=2,
        ffn_dim=16,
        num_layers=1,
        pad_id=data.pad_id,
    )
    ids, mask, seg, labels = next(data["test"].batches(32))
    logits = TransformerClassifier(cfg, "softmax")(ids, mask, seg)
    assert logits.shape == (len(labels), data.num_classes) and torch.isfinite(logits).all()


def test_unknown_option_names_the_closest_valid_one():
    with pytest.raises(ConfigError, match="did you mean 'max_length'"):
        load_task("listops", max_lenght=10)


def test_listops_natural_classes_follow_the_generator_and_presets_pick_the_balance():
    from attnbench.tasks.listops import ListOpsConfig, ListOpsSampler

    options = {"min_length": 16, "max_length": 64, "num_train": 1500, "num_validation": 100, "num_test": 100}
    natural = load_task("listops", class_balance="natural", **options)
    counts = np.bincount(natural["train"].labels.numpy(), minlength=10) / 1500
    sampler, rng, drawn = ListOpsSampler(ListOpsConfig(**options)), np.random.default_rng(7), []
    while len(drawn) < 3000:  # the generator's own class distribution, drawn independently
        example = sampler(rng)
        if example is not None:
            drawn.append(example[1])
    expected = np.bincount(drawn, minlength=10) / 3000
    assert np.abs(counts - expected).max() < 0.04 and counts.max() - counts.min() > 0.02  # not balanced
    assert ListOpsConfig().class_balance == "balanced" and ListOpsConfig().generator_version == 1
    lra = ListOpsConfig(preset="lra")
    assert lra.class_balance == "natural" and lra.generator_version == 2  # LRA's distribution: new cell ids
    assert ListOpsConfig(preset="lra", class_balance="balanced").generator_version == 1
