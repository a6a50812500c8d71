"""Test-time input corruption: substitute, delete, swap, insert tokens at a severity; seeded.

Severity s is the fraction of a row's real, non-special tokens affected: about s*n tokens are
substituted, deleted or inserted, or s*n/2 adjacent pairs swapped (so about s*n tokens move);
"mixed" applies the four kinds in turn at s/4 each. Special tokens ([CLS], [SEP], [PAD], query
markers) are never touched and swaps stay within a segment, so pairs keep their layout. Rows that
grow past the width lose their last non-special tokens (pairs: the longer segment first).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnbench.errors import ConfigError
from attnbench.tasks.base import Split
from attnbench.tasks.tokenizer import truncate_pair

KINDS = ("substitute", "delete", "swap", "insert", "mixed")
BASIC = KINDS[:4]


def corrupt(
    split: Split,
    kind: str,
    severity: float,
    vocab_size: int,
    seed: int,
    special_ids: Sequence[int] = (0,),
    pad_id: int = 0,
) -> Split:
    """A corrupted copy of `split` (same width and labels); severity 0 returns an identical copy."""
    if kind not in KINDS:
        raise ConfigError(f"unknown corruption {kind!r}; choose one of: {', '.join(KINDS)}")
    if not 0.0 <= severity <= 1.0:
        raise ConfigError(f"corruption severity={severity} must lie in [0, 1]")
    if severity == 0:
        return Split(
            split.input_ids.clone(),
            split.attention_mask.clone(),
            split.labels.clone(),
            None if split.segment_ids is None else split.segment_ids.clone(),
        )
    if kind == "mixed":
        for step, basic in enumerate(BASIC):
            split = corrupt(split, basic, severity / len(BASIC), vocab_size, 4 * seed + step, special_ids, pad_id)
        return split
    specials = set(int(i) for i in special_ids)
    real_tokens = np.array([t for t in range(vocab_size) if t not in specials])
    if len(real_tokens) < 2:
        raise ConfigError(
            f"vocab_size={vocab_size} with special ids {sorted(specials)} leaves fewer than 2 "
            f"ordinary tokens to draw from"
        )
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    ids, mask = split.input_ids.numpy(), split.attention_mask.numpy()
    segs = None if split.segment_ids is None else split.segment_ids.numpy()
    width = ids.shape[1]
    rows, row_segs = [], []
    for r in range(len(split)):
        length = int(mask[r].sum())
        tokens = ids[r, :length].tolist()
        seg = [0] * length if segs is None else segs[r, :length].tolist()
        tokens, seg = _corrupt_row(tokens, seg, kind, severity, rng, specials, real_tokens)
        tokens, seg = _fit(tokens, seg, width, specials)
        rows.append(tokens)
        row_segs.append(seg)
    return Split.from_rows(rows, split.labels.tolist(), width, pad_id, None if segs is None else row_segs)


def _stochastic_round(x: float, rng: np.random.Generator) -> int:
    """floor(x) plus one with probability frac(x): unbiased, so the mean count is exactly x."""
    base = int(np.floor(x))
    return base + int(rng.random() < x - base)


def _other_tokens(old: list[int], real_tokens: np.ndarray, rng: np.random.Generator) -> list[int]:
    """For each old token, a uniformly drawn ordinary token different from it."""
    index = rng.integers(len(real_tokens) - 1, size=len(old))
    position = np.searchsorted(real_tokens, old)
    present = real_tokens[np.minimum(position, len(real_tokens) - 1)] == np.asarray(old)
    index += (present & (index >= position)).astype(index.dtype)
    return real_tokens[index].tolist()


def _corrupt_row(
    tokens: list[int],
    seg: list[int],
    kind: str,
    severity: float,
    rng: np.random.Generator,
    specials: set[int],
    real_tokens: np.ndarray,
) -> tuple[list[int], list[int]]:
    editable = [i for i, t in enumerate(tokens) if t not in specials]
    n = len(editable)
    if n == 0:
        return tokens, seg
    if kind == "swap":
        return _swap(tokens, seg, editable, _stochastic_round(severity * n / 2, rng), rng)
    count = min(n, _stochastic_round(severity * n, rng))
    chosen = sorted(rng.choice(editable, size=count, replace=False).tolist())
    if kind == "substitute":
        tokens = list(tokens)
        for i, new in zip(chosen, _other_tokens([tokens[i] for i in chosen], real_tokens, rng)):
            tokens[i] = new
        return tokens, seg
    if kind == "delete":
        drop = set(chosen)
        keep = [i for i in range(len(tokens)) if i not in drop]
        return [tokens[i] for i in keep], [seg[i] for i in keep]
    inserted = {i: int(real_tokens[rng.integers(len(real_tokens))]) for i in chosen}  # insert before i
    out_tokens, out_seg = [], []
    for i, (t, s) in enumerate(zip(tokens, seg)):
        if i in inserted:
            out_tokens.append(inserted[i])
            out_seg.append(s)
        out_tokens.append(t)
        out_seg.append(s)
    return out_tokens, out_seg


def _swap(
    tokens: list[int], seg: list[int], editable: list[int], count: int, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """Swap `count` disjoint adjacent pairs of ordinary tokens within one segment."""
    allowed = set(editable)
    starts = [i for i in editable if i + 1 in allowed and seg[i] == seg[i + 1]]
    tokens, used = list(tokens), set()
    for i in rng.permutation(starts).tolist() if starts else []:
        if count == 0:
            break
        if i in used or i + 1 in used:
            continue
        tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        used.update((i, i + 1))
        count -= 1
    return tokens, seg


def _fit(tokens: list[int], seg: list[int], width: int, specials: set[int]) -> tuple[list[int], list[int]]:
    """Drop the last ordinary tokens (pairs: of the longer segment first) until the row fits `width`."""
    excess = len(tokens) - width
    if excess <= 0:
        return tokens, seg
    counts = [sum(1 for t, s in zip(tokens, seg) if t not in specials and s == side) for side in (0, 1)]
    keep = list(truncate_pair(counts[0], counts[1], counts[0] + counts[1] - excess))
    out_tokens, out_seg, seen = [], [], [0, 0]
    for t, s in zip(tokens, seg):
        if t not in specials:
            seen[s] += 1
            if seen[s] > keep[s]:
                continue
        out_tokens.append(t)
        out_seg.append(s)
    return out_tokens, out_seg
