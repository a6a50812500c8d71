"""Text -> padded token ids: a WordPiece tokenizer trained on the training split (cached), or a hub one.

Rows are [CLS] a [SEP] for single texts and [CLS] a [SEP] b [SEP] for pairs (segment ids 0 for
[CLS] a [SEP], 1 for b [SEP]), truncated to max_length (pairs: the longer side first, as BERT),
then right-padded with [PAD].
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from attnbench.cache import cache_root, set_aside, store_entry, verified_entry
from attnbench.errors import UserError
from attnbench.tasks.base import Split

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 in a locally trained tokenizer
LOCAL = "wordpiece"


def wordpiece_key(texts: Sequence[str], vocab_size: int, lowercase: bool) -> str:
    """Hash of the training texts and every setting that changes the trained vocabulary."""
    settings = {
        "kind": LOCAL,
        "vocab_size": vocab_size,
        "lowercase": lowercase,
        "special_tokens": SPECIAL_TOKENS,
        "tokenizers": tokenizers.__version__,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:20]


def train_wordpiece(texts: Sequence[str], vocab_size: int, lowercase: bool = True) -> Tokenizer:
    """A BERT-style WordPiece tokenizer (BERT normaliser and pre-tokeniser) trained on `texts`."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return tok


def cached_wordpiece(
    texts: Sequence[str], vocab_size: int, cache_dir: str | None = None, lowercase: bool = True
) -> tuple[Tokenizer, Path, bool]:
    """Load the tokenizer trained on exactly these texts and settings, or train and store it.

    Returns (tokenizer, cache file, whether it was trained now).
    """
    path = cache_root(cache_dir) / "tokenizers" / f"wordpiece-{wordpiece_key(texts, vocab_size, lowercase)}.json"
    if verified_entry(path, lambda p: _loads(p) is not None):
        tok = _loads(path)
        if tok is not None:
            return tok, path, False
        set_aside(path)
    tok = train_wordpiece(texts, vocab_size, lowercase)
    try:
        store_entry(path, tok.to_str().encode())  # atomic: parallel workers never read a half-written file
    except OSError:  # a cache that cannot be written costs the next run a training, never this one
        pass
    return tok, path, True


def _loads(path: Path) -> Tokenizer | None:
    """The cached tokenizer if it loads and has the special tokens at ids 0..4, else None."""
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - an unreadable entry is rebuilt, whatever the parser says
        return None
    return tok if all(tok.token_to_id(t) == i for i, t in enumerate(SPECIAL_TOKENS)) else None


def pretrained_tokenizer(name: str) -> Tokenizer:
    """A tokenizer.json file path, or a hub tokenizer such as 'bert-base-uncased' (needs the network)."""
    path = Path(name).expanduser()
    if name.endswith(".json") and path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception as err:  # noqa: BLE001 - the tokenizers parser raises a bare Exception with the line
            raise UserError(
                f"tokenizer file {str(path)!r} cannot be read ({err}); give a tokenizer.json that the tokenizers "
                f"package wrote (Tokenizer.save), or use tokenizer: {LOCAL} to train one on the training split"
            ) from None
    try:
        return Tokenizer.from_pretrained(name)
    except Exception as err:  # offline, unknown repository, or no tokenizer.json in it
        raise UserError(
            f"tokenizer {name!r} could not be loaded from the Hugging Face Hub ({err}); connect to "
            f"the network (and unset HF_HUB_OFFLINE), give the path of a local tokenizer.json, "
            f"or use tokenizer: {LOCAL} to train one on the training split"
        ) from None


class TextEncoder:
    """Turns texts or text pairs into a padded Split with [CLS]/[SEP], masks and segment ids."""

    def __init__(self, tokenizer: Tokenizer, description: dict):
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer, self.description = tokenizer, description
        self.pad_id = self._id("[PAD]")
        self.cls_id = self._id("[CLS]")
        self.sep_id = self._id("[SEP]")
        self.special_ids = tuple(sorted({self._id(t) for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None}))

    def _id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise UserError(
                f"tokenizer {self.description.get('name')!r} has no {token} token; "
                f"use a BERT-style (WordPiece) tokenizer"
            )
        return found

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens or truncation."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode(
        self, texts: Sequence[str], labels: Sequence[int], max_length: int, pairs: Sequence[str] | None = None
    ) -> Split:
        """Split of shape (N, max_length): [CLS] a [SEP] (b [SEP]), truncated and right-padded."""
        if max_length < (5 if pairs is not None else 3):
            raise UserError(f"max_length={max_length} leaves no room for text after [CLS]/[SEP]; use at least 8")
        first = self.pieces(texts)
        if pairs is None:
            rows = [[self.cls_id] + a[: max_length - 2] + [self.sep_id] for a in first]
            return Split.from_rows(rows, labels, max_length, self.pad_id)
        rows, segments = [], []
        for a, b in zip(first, self.pieces(pairs)):
            keep_a, keep_b = truncate_pair(len(a), len(b), max_length - 3)
            rows.append([self.cls_id] + a[:keep_a] + [self.sep_id] + b[:keep_b] + [self.sep_id])
            segments.append([0] * (keep_a + 2) + [1] * (keep_b + 1))
        return Split.from_rows(rows, labels, max_length, self.pad_id, segments)


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Tokens kept from each side: drop one from the longer side until both fit (BERT's longest-first)."""
    len_a, len_b = min(len_a, budget), min(len_b, budget)  # same outcome, bounded loop
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def build_encoder(name: str, train_texts: Sequence[str], vocab_size: int, cache_dir: str | None = None) -> TextEncoder:
    """The encoder for option tokenizer=`name`: 'wordpiece' (trained on train_texts, cached) or a hub name."""
    if name != LOCAL:
        return TextEncoder(pretrained_tokenizer(name), {"name": name, "source": "pretrained"})
    tok, path, trained = cached_wordpiece(train_texts, vocab_size, cache_dir)
    return TextEncoder(
        tok,
        {
            "name": LOCAL,
            "source": "trained on the training split",
            "vocab_size": vocab_size,
            "cache_file": str(path),
            "cache_hit": not trained,
        },
    )
