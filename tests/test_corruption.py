"""Input corruption: identity at severity 0, the asked fraction changed, specials untouched, pairs kept, seeded."""

from __future__ import annotations

import random

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.tasks.base import Split
from attnbench.tasks.corruption import KINDS, corrupt

PAD, CLS, SEP = 0, 2, 3
SPECIALS = (0, 1, 2, 3, 4)
VOCAB = 60
WIDTH = 40


def make_split(pairs: bool, rows: int = 300, seed: int = 0, full: bool = False) -> Split:
    rng = random.Random(seed)
    tokens, segments = [], []
    for _ in range(rows):
        if pairs:
            a = [rng.randrange(5, VOCAB) for _ in range(rng.randint(3, 17))]
            b = [rng.randrange(5, VOCAB) for _ in range(WIDTH - 3 - len(a) if full else rng.randint(3, 17))]
            tokens.append([CLS] + a + [SEP] + b + [SEP])
            segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        else:
            body = [rng.randrange(5, VOCAB) for _ in range(WIDTH - 2 if full else rng.randint(5, 35))]
            tokens.append([CLS] + body + [SEP])
    return Split.from_rows(tokens, [i % 2 for i in range(rows)], WIDTH, PAD, segments if pairs else None)


def real_rows(split: Split) -> list[list[int]]:
    return [ids[m].tolist() for ids, m in zip(split.input_ids, split.attention_mask)]


def ordinary(row: list[int]) -> list[int]:
    return [t for t in row if t not in SPECIALS]


def is_subsequence(short: list[int], long: list[int]) -> bool:
    it = iter(long)
    return all(t in it for t in short)


def specials_layout(split: Split) -> list[list[tuple[int, int]]]:
    """The special tokens of each row with the segment they sit in, in order."""
    out = []
    for r, row in enumerate(real_rows(split)):
        seg = [0] * len(row) if split.segment_ids is None else split.segment_ids[r][: len(row)].tolist()
        out.append([(t, s) for t, s in zip(row, seg) if t in SPECIALS])
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pairs", [False, True])
def test_severity_zero_is_the_identity(kind, pairs):
    split = make_split(pairs)
    out = corrupt(split, kind, 0.0, VOCAB, seed=1, special_ids=SPECIALS)
    assert torch.equal(out.input_ids, split.input_ids) and torch.equal(out.attention_mask, split.attention_mask)
    assert torch.equal(out.labels, split.labels)
    assert pairs == (out.segment_ids is not None) and (not pairs or torch.equal(out.segment_ids, split.segment_ids))


@pytest.mark.parametrize("severity", [0.05, 0.2, 0.4])
def test_substitute_changes_about_that_fraction_of_ordinary_tokens(severity):
    split = make_split(False)
    out = corrupt(split, "substitute", severity, VOCAB, seed=0, special_ids=SPECIALS)
    assert torch.equal(out.attention_mask, split.attention_mask)
    changed = (out.input_ids != split.input_ids).sum().item()
    ordinary_count = sum(len(ordinary(r)) for r in real_rows(split))
    assert changed / ordinary_count == pytest.approx(severity, abs=0.02)
    new = out.input_ids[out.input_ids != split.input_ids]
    assert ((new >= 5) & (new < VOCAB)).all()


@pytest.mark.parametrize("kind", ["substitute", "delete", "swap", "insert", "mixed"])
@pytest.mark.parametrize("pairs", [False, True])
def test_specials_untouched_and_segments_consistent(kind, pairs):
    split = make_split(pairs)
    out = corrupt(split, kind, 0.3, VOCAB, seed=2, special_ids=SPECIALS)
    assert out.input_ids.shape == split.input_ids.shape
    assert specials_layout(out) == specials_layout(split)
    lengths = out.attention_mask.sum(dim=1)
    assert torch.equal(out.attention_mask, torch.arange(WIDTH) < lengths[:, None])  # right padding kept
    assert (out.input_ids[~out.attention_mask] == PAD).all()
    if pairs:
        for r, row in enumerate(real_rows(out)):
            first_sep = row.index(SEP)
            assert out.segment_ids[r][: len(row)].tolist() == [0] * (first_sep + 1) + [1] * (len(row) - first_sep - 1)


@pytest.mark.parametrize("severity", [0.1, 0.3])
def test_delete_removes_about_that_fraction_and_keeps_order(severity):
    split = make_split(True)
    out = corrupt(split, "delete", severity, VOCAB, seed=3, special_ids=SPECIALS)
    before, after = real_rows(split), real_rows(out)
    assert all(is_subsequence(ordinary(a), ordinary(b)) for a, b in zip(after, before))
    removed = sum(len(ordinary(b)) - len(ordinary(a)) for a, b in zip(after, before))
    assert removed / sum(len(ordinary(b)) for b in before) == pytest.approx(severity, abs=0.02)


def test_swap_moves_about_that_fraction_within_rows():
    split = make_split(False)
    out = corrupt(split, "swap", 0.2, VOCAB, seed=4, special_ids=SPECIALS)
    moved, total = 0, 0
    for a, b in zip(real_rows(out), real_rows(split)):
        assert sorted(a) == sorted(b)
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        assert all(a[i] == b[i + 1] or a[i] == b[i - 1] for i in diff)
        moved, total = moved + len(diff), total + len(ordinary(b))
    assert moved / total == pytest.approx(0.2, abs=0.03)


def test_insert_adds_about_that_fraction_and_keeps_the_original():
    split = make_split(False, full=False)
    out = corrupt(split, "insert", 0.1, VOCAB, seed=5, special_ids=SPECIALS)
    added, total = 0, 0
    for a, b in zip(real_rows(out), real_rows(split)):
        if len(a) < WIDTH:  # not truncated
            assert is_subsequence(b, a)
            added, total = added + len(a) - len(b), total + len(ordinary(b))
    assert added / total == pytest.approx(0.1, abs=0.02)


@pytest.mark.parametrize("pairs", [False, True])
def test_insert_on_full_rows_truncates_at_the_width_keeping_specials(pairs):
    split = make_split(pairs, rows=50, full=True)
    out = corrupt(split, "insert", 0.5, VOCAB, seed=6, special_ids=SPECIALS)
    assert out.attention_mask.all()
    assert specials_layout(out) == specials_layout(split)


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_corruption_other_seed_other(kind):
    split = make_split(True)
    a = corrupt(split, kind, 0.2, VOCAB, seed=7, special_ids=SPECIALS)
    b = corrupt(split, kind, 0.2, VOCAB, seed=7, special_ids=SPECIALS)
    c = corrupt(split, kind, 0.2, VOCAB, seed=8, special_ids=SPECIALS)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.segment_ids, b.segment_ids)
    assert not torch.equal(a.input_ids, c.input_ids)


def test_bad_kind_and_severity_are_config_errors():
    split = make_split(False, rows=2)
    with pytest.raises(ConfigError, match="choose one of: substitute"):
        corrupt(split, "shuffle", 0.1, VOCAB, seed=0)
    with pytest.raises(ConfigError, match=r"severity=1.5 must lie in \[0, 1\]"):
        corrupt(split, "delete", 1.5, VOCAB, seed=0)
