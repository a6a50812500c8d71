"""WordPiece tokenizer: trained once on real SST-2 and reused from the cache; truncation, padding, masks, pairs."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from attnbench.errors import UserError
from attnbench.tasks import tokenizer as tokenizer_module
from attnbench.tasks.tokenizer import SPECIAL_TOKENS, build_encoder, cached_wordpiece, truncate_pair

DATA_DIR = os.environ.get("ATTNBENCH_DATA_DIR")
FALLBACK = [
    f"a {w} film about {v} and the {u} end ."
    for w, v, u in itertools.product(["fine", "dull", "warm", "odd"], ["love", "war", "time"], ["sad", "happy", "late"])
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """SST-2 training sentences (real data), or a small fallback corpus when ATTNBENCH_DATA_DIR is unset."""
    if not DATA_DIR:
        return FALLBACK
    lines = (Path(DATA_DIR) / "sst2" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["sentence"] for line in lines]


@pytest.fixture(scope="module")
def encoder(texts, cache_dir):
    return build_encoder("wordpiece", texts, 8000, cache_dir)


def test_second_load_reuses_the_cache_file(texts, cache_dir, encoder, monkeypatch):
    path = Path(encoder.description["cache_file"])
    stamp = path.stat().st_mtime_ns
    monkeypatch.setattr(tokenizer_module, "train_wordpiece", lambda *a, **k: pytest.fail("retrained"))
    again, again_path, trained = cached_wordpiece(texts, 8000, cache_dir)
    assert not trained and again_path == path and path.stat().st_mtime_ns == stamp
    assert again.get_vocab() == encoder.tokenizer.get_vocab()


def test_cache_key_changes_with_data_and_settings(texts, cache_dir):
    base = tokenizer_module.wordpiece_key(texts, 8000, True)
    assert base == tokenizer_module.wordpiece_key(list(texts), 8000, True)
    assert base != tokenizer_module.wordpiece_key(texts[:-1], 8000, True)
    assert base != tokenizer_module.wordpiece_key(texts, 4000, True)
    assert base != tokenizer_module.wordpiece_key(texts, 8000, False)


def test_special_tokens_fixed_ids_and_vocabulary_size(encoder):
    assert [encoder.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert encoder.pad_id == 0 and encoder.special_ids == (0, 1, 2, 3, 4)
    assert encoder.vocab_size <= 8000
    assert encoder.pieces(["Hello THERE"]) == encoder.pieces(["hello there"])  # lower-cased


def test_truncation_padding_and_masks(encoder, texts):
    sample = sorted(texts[:200], key=len)
    short, long = sample[0], sample[-1]
    split = encoder.encode([short, long], [0, 1], max_length=12)
    assert split.input_ids.shape == (2, 12)
    pieces = encoder.pieces([short, long])
    n_short = min(len(pieces[0]) + 2, 12)
    assert split.input_ids[1].tolist() == [2] + pieces[1][:10] + [3]  # [CLS] ... [SEP], truncated
    assert split.attention_mask[1].all()
    assert split.input_ids[0, :n_short].tolist() == ([2] + pieces[0] + [3])[:n_short]
    assert split.attention_mask[0].tolist() == [True] * n_short + [False] * (12 - n_short)
    assert (split.input_ids[0, n_short:] == 0).all()
    assert split.segment_ids is None and split.labels.tolist() == [0, 1]


def test_pairs_segments_and_fair_truncation(encoder):
    a, b = "a " * 30, "the acting is good"  # b fits: only a is cut
    split = encoder.encode([a], [1], max_length=16, pairs=[b])
    ids, seg = split.input_ids[0].tolist(), split.segment_ids[0].tolist()
    keep_b = len(encoder.pieces([b])[0])
    keep_a = 16 - 3 - keep_b
    assert ids == [2] + [encoder.tokenizer.token_to_id("a")] * keep_a + [3] + encoder.pieces([b])[0] + [3]
    assert seg == [0] * (keep_a + 2) + [1] * (keep_b + 1)
    assert split.attention_mask.all()


def _longest_first(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Naive reference: remove one token at a time from the currently longer side (ties: b)."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncate_pair_matches_the_token_by_token_rule():
    for len_a, len_b, budget in itertools.product(range(0, 30, 3), range(0, 30, 4), (5, 13, 40)):
        kept = truncate_pair(len_a, len_b, budget)
        assert kept == _longest_first(len_a, len_b, budget)
        assert sum(kept) == min(len_a + len_b, budget)


@pytest.mark.skipif(os.environ.get("HF_HUB_OFFLINE") != "1", reason="needs HF_HUB_OFFLINE=1 to test the offline error")
def test_hub_tokenizer_offline_is_a_clear_error():
    with pytest.raises(UserError, match="'bert-base-uncased' could not be loaded.*use tokenizer: wordpiece"):
        build_encoder("bert-base-uncased", [], 8000)
