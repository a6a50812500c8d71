"""Needle in a haystack, as RULER defines its retrieval and tracing tasks (Hsieh et al. 2024, NVIDIA/RULER,
`scripts/data/synthetic/niah.py`, `variable_tracking.py`), generated at CPU scale for the decoder.

A row is a haystack of sentences with needles inserted between them, a question, and the answer, all counted in
`context_length` tokens (one per word and one per character of a value or a name, `level: token`; or the text's
UTF-8 bytes, `level: byte`). A needle is RULER's sentence "One of the special magic numbers for KEY is: VALUE .",
the question "What is the special magic number for KEY ? Answer:" (RULER's template and answer prefix, shortened),
and the answer the value; only the answer's tokens are labelled, each scored as the next token, and an answer is
right when all its tokens are (exact match). Values are numbers of `value_length` digits or UUID-like strings of
as many hexadecimal characters (a dash after every four); keys are words.
- `single`: one needle, asked. `multikey`: `num_needles` needles under different keys, one asked (the others
  distract). `multivalue`: `num_values` needles under one key, all asked, answered in the order they stand.
  `multiquery`: `num_queries` keys asked at once, answered in the order asked. `variable_tracking`: chains of
  `num_hops` assignments "VAR B = VAR A ." from "VAR A = VALUE ." (`num_chains` chains, one asked: "Find all
  variables that are assigned the value VALUE . Answer:"), answered by the chain's names in order.
- Haystacks: `noise` (RULER's repeated filler, "The grass is green. The sky is blue. ..."), `needle` (RULER's
  multikey_2: every sentence a needle of another key), `generated` (sentences of words drawn from a fixed list of
  made-up words), `essay` (the text of Python's own documentation topics, `pydoc_data.topics`, read at run time
  where installed, never stored; its SHA-256 is an input of the cell).
- Depth: where the asked needle (the first of a multi-value key, the head of the asked chain) stands, as the
  fraction of the haystack's sentences before it (0: first, 1: last before the question); the other needles
  stand at random places. Training rows draw depths uniformly, test rows are `num_test` spread evenly over the
  grid `depths` x `context_length`, tagged with both (the report's heat map).
Token ids (level token): 0 padding, then the task's words and characters in sorted order (words of the essay
beyond its `essay_vocab` most frequent become [UNK]); level byte: the 256 byte values, 0 (NUL) never in a text.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import re
import string
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics
from typing import ClassVar, Literal

import numpy as np
import torch

from attnbench.options import option, require
from attnbench.tasks import TaskConfig, TestRows, register_task
from attnbench.tasks.sequence import IGNORE, SequenceTaskData, TokenSplit, no_label_noise

PAD_ID = 0
UNK = "[UNK]"
NOISE = "The grass is green . The sky is blue . The sun is yellow . Here we go . There and back again ."
NEEDLE = "One of the special magic numbers for {key} is: {value} ."
QUESTION = "What is the special magic number for {key} ? Answer:"
QUESTIONS = "What are all the special magic numbers for {keys} ? Answer:"
CHAIN_START, CHAIN_HOP = "VAR {name} = {value} .", "VAR {name} = VAR {previous} ."
CHAIN_QUESTION = "Find all variables that are assigned the value {value} . Answer:"
Variant = Literal["single", "multikey", "multivalue", "multiquery", "variable_tracking"]


@dataclasses.dataclass
class NiahConfig(TaskConfig):
    """Options of the needle-in-a-haystack generator (defaults: CPU-sized single needles in RULER's noise)."""

    test_rows: ClassVar[TestRows] = "fresh"  # every seed draws its own rows

    variant: Variant = option("single", "single | multikey | multivalue | multiquery | variable_tracking (RULER's)")
    level: Literal["token", "byte"] = option("token", "token: a token per word and per value character; byte: UTF-8")
    haystack: Literal["noise", "needle", "generated", "essay"] = option(
        "noise", "noise (RULER's filler), needle (needles of other keys), generated (made-up words), essay (pydoc)"
    )
    context_length: list[int] = option([128], "row lengths in tokens (training rows in equal shares)", minimum=16)
    depths: list[float] = option([0.0, 0.25, 0.5, 0.75, 1.0], "test grid of the asked needle's depth, in [0, 1]")
    value: Literal["number", "uuid"] = option("number", "needle values: numbers, or UUID-like hexadecimal strings")
    value_length: int = option(4, "characters of a value (RULER: 7 digits, 32 hex)", minimum=1, maximum=32)
    num_keys: int = option(64, "key words (and variable names) to draw from", minimum=4, maximum=10_000)
    num_needles: int = option(4, "multikey: needles under different keys (RULER: 4)", minimum=2)
    num_values: int = option(4, "multivalue: needles under the asked key (RULER: 4)", minimum=2)
    num_queries: int = option(4, "multiquery: keys asked at once (RULER: 4)", minimum=2)
    num_chains: int = option(1, "variable_tracking: chains (RULER: 1)", minimum=1)
    num_hops: int = option(4, "variable_tracking: assignments after a chain's first (RULER: 4)", minimum=1)
    haystack_words: int = option(256, "generated: made-up words the haystack draws from", minimum=8)
    essay_vocab: int = option(2000, "essay, level token: the most frequent words kept as tokens", minimum=10)
    num_train: int = option(4000, "training rows", minimum=1, maximum=10_000_000)
    num_validation: int = option(400, "validation rows (depths drawn as the training rows')", minimum=1)
    num_test: int = option(500, "test rows, spread evenly over depths x context_length", minimum=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        no_label_noise(self.label_noise, "niah")
        require(len(self.context_length) >= 1, "context_length is empty; give at least one length")
        require(all(0.0 <= d <= 1.0 for d in self.depths) and self.depths, f"depths={self.depths} must lie in [0, 1]")
        self.context_length = sorted(set(self.context_length))
        keys_needed = {"multikey": self.num_needles, "multiquery": self.num_queries}.get(self.variant, 1)
        if self.variant == "variable_tracking":
            keys_needed = self.num_chains * (self.num_hops + 1)
        require(
            keys_needed <= self.num_keys,
            f"variant {self.variant} needs {keys_needed} distinct keys or names; raise num_keys to {keys_needed}",
        )

    def inputs(self) -> dict[str, Path | str]:
        """The essay's SHA-256 (it depends on the Python that runs), an input of the cell; nothing otherwise."""
        if self.haystack != "essay":
            return {}
        return {"essay": f"sha256:{hashlib.sha256(essay_text().encode()).hexdigest()}"}


def essay_text() -> str:
    """Python's documentation topics (what help("if") shows), in key order: the essay haystack."""
    return "\n\n".join(topics[key] for key in sorted(topics))


def made_up_words(count: int, seed: int) -> list[str]:
    """`count` distinct pronounceable made-up words (two or three consonant-vowel syllables), from a fixed seed."""
    rand, words = random.Random(seed), set()
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    while len(words) < count:
        words.add("".join(rand.choice(consonants) + rand.choice(vowels) for _ in range(rand.choice((2, 3)))))
    return sorted(words)


class Words:
    """The word lists of a configuration (fixed for every seed) and its token vocabulary."""

    def __init__(self, cfg: NiahConfig):
        self.cfg = cfg
        self.keys = made_up_words(cfg.num_keys, seed=1)
        self.names = [word.upper() for word in made_up_words(cfg.num_keys, seed=2)]  # variables, spelt
        self.filler = [w for w in made_up_words(cfg.haystack_words + cfg.num_keys, seed=3) if w not in self.keys]
        self.filler = self.filler[: cfg.haystack_words]
        self.essay: list[list[str]] = []
        if cfg.haystack == "essay":
            text = re.sub(r"\s+", " ", essay_text())
            sentences = [s.split() for s in re.split(r"(?<=[.!?]) ", text) if s.split()]
            counts = collections.Counter(w for s in sentences for w in s)
            kept = {w for w, _ in counts.most_common(cfg.essay_vocab)} if cfg.level == "token" else set(counts)
            self.essay = [[w if w in kept else UNK for w in s] for s in sentences]
        self.vocabulary = self._vocabulary() if cfg.level == "token" else None
        self.ids = {w: i for i, w in enumerate(self.vocabulary or [])}

    def _vocabulary(self) -> list[str]:
        """Token strings by id (level token): [PAD], then every word and character a row can hold, sorted."""
        templates = " ".join([NOISE, NEEDLE, QUESTION, QUESTIONS, CHAIN_START, CHAIN_HOP, CHAIN_QUESTION, ","])
        words = {w for w in templates.split() if "{" not in w} | set(self.keys) | set(self.filler)
        words |= {w for s in self.essay for w in s} | {UNK}
        characters = set(string.digits + "abcdef-" + string.ascii_uppercase)
        return ["[PAD]", *sorted(words | characters)]

    def encode(self, words: list[str], spelt: set[str]) -> list[int]:
        """Token ids of a list of words; the words in `spelt` (values, names) a token per character."""
        if self.vocabulary is None:
            return list(" ".join(words).encode("utf-8") + b" ")
        ids = []
        for w in words:
            ids += [self.ids[c] for c in w] if w in spelt else [self.ids.get(w, self.ids[UNK])]
        return ids


@dataclasses.dataclass
class Row:
    """One generated row: tokens, which of them are answer tokens, and the asked needle's depth."""

    tokens: list[int]
    answer: list[bool]
    depth: float


def _value(cfg: NiahConfig, rand: random.Random) -> str:
    """A needle value: `value_length` digits (no leading zero), or hex characters with a dash after every four."""
    if cfg.value == "number":
        return str(rand.randint(1, 9)) + "".join(rand.choice(string.digits) for _ in range(cfg.value_length - 1))
    chars = "".join(rand.choice("0123456789abcdef") for _ in range(cfg.value_length))
    return "-".join(chars[i : i + 4] for i in range(0, len(chars), 4))


def _needle(key: str, value: str) -> list[str]:
    return NEEDLE.format(key=key, value=value).split()


def _sentences(
    cfg: NiahConfig, rand: random.Random, words: Words, asked: set[str], spelt: set[str]
) -> Iterator[list[str]]:
    """An endless stream of haystack sentences (lists of words); a needle haystack's values join `spelt`."""
    noise = NOISE.split()
    sentences = [noise[i : i + 5] for i in range(0, 15, 5)] + [noise[15:19], noise[19:]]
    start = rand.randrange(len(words.essay)) if cfg.haystack == "essay" else 0
    for i in range(10**9):
        if cfg.haystack == "noise":
            yield sentences[i % len(sentences)]
        elif cfg.haystack == "essay":
            yield words.essay[(start + i) % len(words.essay)]
        elif cfg.haystack == "generated":
            yield [rand.choice(words.filler) for _ in range(rand.randint(4, 10))] + ["."]
        else:
            key = rand.choice([k for k in words.keys if k not in asked])
            value = _value(cfg, rand)
            spelt.add(value)
            yield _needle(key, value)


def _plan(cfg: NiahConfig, rand: random.Random, words: Words) -> tuple[list[list[list[str]]], list[str], list[str]]:
    """The groups of needle sentences (the asked group first: its statements stand in order from the asked depth
    on), the question's words and the answer words of one row."""
    if cfg.variant == "variable_tracking":
        names = rand.sample(words.names, cfg.num_chains * (cfg.num_hops + 1))
        chains, values = [], []
        for c in range(cfg.num_chains):
            chain = names[c * (cfg.num_hops + 1) : (c + 1) * (cfg.num_hops + 1)]
            values.append(_value(cfg, rand))
            statements = [CHAIN_START.format(name=chain[0], value=values[-1]).split()]
            statements += [CHAIN_HOP.format(name=b, previous=a).split() for a, b in zip(chain, chain[1:])]
            chains.append((chain, statements))
        question = CHAIN_QUESTION.format(value=values[0]).split()
        return [chains[0][1], *(statements for _, statements in chains[1:])], question, chains[0][0]
    count = {"multikey": cfg.num_needles, "multiquery": cfg.num_queries}.get(cfg.variant, 1)
    keys = rand.sample(words.keys, count)
    values = [[_value(cfg, rand) for _ in range(cfg.num_values if cfg.variant == "multivalue" else 1)] for _ in keys]
    needles = [[_needle(k, v) for v in vs] for k, vs in zip(keys, values)]
    if cfg.variant == "multiquery":
        asked = list(range(count))
        rand.shuffle(asked)
        question = QUESTIONS.format(keys=" , ".join(keys[i] for i in asked)).split()
        return [needles[i] for i in asked], question, [values[i][0] for i in asked]
    question = (QUESTIONS if cfg.variant == "multivalue" else QUESTION).format(key=keys[0], keys=keys[0]).split()
    return [needles[0], *needles[1:]], question, values[0]


def niah_row(cfg: NiahConfig, rand: random.Random, words: Words, length: int, depth: float | None) -> Row:
    """One row of `length` tokens; `depth` None draws the asked needle's depth uniformly."""
    groups, question, answers = _plan(cfg, rand, words)
    template = set(" ".join([NEEDLE, CHAIN_START, CHAIN_HOP, CHAIN_QUESTION]).split())
    asked = {w for g in groups for s in g for w in s}
    spelt = {w for w in asked | set(question) | set(answers) if w not in template and w not in words.ids}
    tail = words.encode(question, spelt)
    answer_ids = [words.encode([a], spelt) for a in answers]
    comma = words.encode([","], spelt)
    body = sum((ids + (comma if i < len(answer_ids) - 1 else []) for i, ids in enumerate(answer_ids)), [])
    needles = [[words.encode(s, spelt) for s in group] for group in groups]
    budget = length + 1 - len(tail) - len(body) - sum(len(ids) for group in needles for ids in group)
    require(budget >= 0, f"context_length={length} is too short for the needles and the question; raise it")
    haystack, used = [], 0
    for sentence in _sentences(cfg, rand, words, asked, spelt):
        ids = words.encode(sentence, spelt)
        haystack.append(ids[: budget - used])
        used += len(haystack[-1])
        if used >= budget:
            break
    depth = rand.random() if depth is None else depth
    places = {0: [int(depth * len(haystack) + 0.5)]}
    for g in range(len(groups)):  # the asked group's later statements and the other groups at random places
        first = places.get(g, [rand.randint(0, len(haystack))])[0]
        places[g] = [first] + sorted(rand.randint(first, len(haystack)) for _ in groups[g][1:])
    inserts = collections.defaultdict(list)
    for g, group in enumerate(needles):
        for place, ids in zip(places[g], group):
            inserts[place].append(ids)
    tokens: list[int] = []
    for i in range(len(haystack) + 1):
        for ids in inserts.get(i, []):
            tokens += ids
        tokens += haystack[i] if i < len(haystack) else []
    tokens += tail
    answer = [False] * len(tokens)
    for i, ids in enumerate(answer_ids):
        answer += [True] * len(ids) + ([False] * len(comma) if i < len(answer_ids) - 1 else [])
        tokens += ids + (comma if i < len(answer_ids) - 1 else [])
    if cfg.level == "byte":  # each word's trailing space: not an answer
        tokens, answer = _drop_spaces_from_answers(tokens, answer)
    return Row(tokens, answer, depth)


def _drop_spaces_from_answers(tokens: list[int], answer: list[bool]) -> tuple[list[int], list[bool]]:
    """Byte level: the space after each answer word is not part of the answer."""
    return tokens, [a and t != ord(" ") for t, a in zip(tokens, answer)]


def niah_split(rows: list[Row], width: int, tags: dict[str, list[float]] | None = None) -> TokenSplit:
    """Rows (each one token longer than its input) -> inputs, labels (answer tokens as next tokens), padded."""
    count = len(rows)
    ids = np.full((count, width), PAD_ID, dtype=np.int64)
    labels = np.full((count, width), IGNORE, dtype=np.int64)
    for r, row in enumerate(rows):
        n = len(row.tokens) - 1
        ids[r, :n] = row.tokens[:-1]
        labels[r, :n] = np.where(row.answer[1:], row.tokens[1:], IGNORE)
    ids_t = torch.from_numpy(ids)
    mask = torch.arange(width) < torch.tensor([len(row.tokens) - 1 for row in rows])[:, None]
    tensors = {name: torch.tensor(values) for name, values in (tags or {}).items()}
    return TokenSplit(ids_t, mask, torch.from_numpy(labels), tags=tensors)


@register_task("niah", config=NiahConfig)
def niah(cfg: NiahConfig) -> SequenceTaskData:
    """Needle in a haystack (RULER): answer the asked needle's value, scored on exact match of its tokens."""
    words = Words(cfg)
    width = max(cfg.context_length)
    seeds = np.random.SeedSequence(cfg.seed).generate_state(3).tolist()
    splits = {}
    for seed, (split, size) in zip(seeds, (("train", cfg.num_train), ("validation", cfg.num_validation))):
        rand = random.Random(seed)
        lengths = [cfg.context_length[i % len(cfg.context_length)] for i in range(size)]
        splits[split] = niah_split([niah_row(cfg, rand, words, n, None) for n in lengths], width)
    rand = random.Random(seeds[2])
    grid = [(n, d) for n in cfg.context_length for d in cfg.depths]
    cells = [grid[i % len(grid)] for i in range(cfg.num_test)]
    rows = [niah_row(cfg, rand, words, n, d) for n, d in cells]
    tags = {"context_length": [n for n, _ in cells], "depth": [d for _, d in cells]}
    splits["test"] = niah_split(rows, width, tags)
    return SequenceTaskData(
        "niah",
        splits,
        num_classes=len(words.vocabulary) if words.vocabulary else 256,
        vocab_size=len(words.vocabulary) if words.vocabulary else 256,
        max_length=width,
        pad_id=PAD_ID,
        info={
            "source": f"generated (RULER's {cfg.variant} needle task, {cfg.haystack} haystack, {cfg.level} level)",
            "vocabulary_size": len(words.vocabulary) if words.vocabulary else 256,
            "depths": cfg.depths,
            "context_lengths": cfg.context_length,
        },
    )
