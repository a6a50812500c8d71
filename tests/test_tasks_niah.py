"""Needle in a haystack: every answer found again by searching the row's text for the asked needles."""

from __future__ import annotations

import re

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.tasks import load_task
from attnbench.tasks.niah import NiahConfig, Words

SMALL = {"num_train": 30, "num_validation": 10, "num_test": 30}


def texts(data, options: dict) -> list[tuple[str, str]]:
    """(the row's text up to 'Answer:', the labelled answer's text) of each test row, characters joined."""
    cfg = NiahConfig(**options)
    split = data["test"]
    out = []
    for ids, mask, labels in zip(split.input_ids, split.attention_mask, split.labels):
        ids, labels = ids[mask].tolist(), labels[mask].tolist()
        if cfg.level == "byte":
            text, answer = bytes(ids).decode(), bytes(t for t in labels if t != -100).decode()
        else:
            vocabulary = Words(cfg).vocabulary
            text = " ".join(vocabulary[t] for t in ids)
            answer = "".join(vocabulary[t] for t in labels if t != -100)
        out.append((text[: text.index("Answer:")], answer))
    return out


def spelt(text: str) -> str:
    """Token-level text with each spelt value or name joined again ('7 3 3 3' -> '7333', 'K U G A' -> 'KUGA')."""
    return re.sub(r"(?<=\b\w) (?=\w\b)", "", text)


def needles(text: str) -> list[tuple[str, str]]:
    """(key, value) of every needle sentence in the text, in order."""
    return re.findall(r"special magic numbers for (\w+) is: ([\w-]+) \.", text)


@pytest.mark.parametrize("level", ["token", "byte"])
@pytest.mark.parametrize("haystack", ["noise", "needle", "generated", "essay"])
def test_single_and_multikey_answers_are_the_asked_keys_value(level, haystack):
    for variant in ("single", "multikey"):
        options = {"variant": variant, "level": level, "haystack": haystack, "context_length": [160, 200]}
        if level == "byte":
            options |= {"context_length": [400], "value": "uuid", "value_length": 8}
        for text, answer in texts(load_task("niah", **options, **SMALL), options):
            text = spelt(text) if level == "token" else text
            (key,) = re.findall(r"What is the special magic number for (\w+) \?", text)
            found = [v for k, v in needles(text) if k == key]
            assert found == [answer]  # exactly one needle holds the asked key, and its value is the answer
            if variant == "multikey" and haystack != "needle":
                assert len({k for k, _ in needles(text)}) == 4


def test_multivalue_answers_every_value_in_order_and_multiquery_in_asked_order():
    for text, answer in texts(load_task("niah", variant="multivalue", **SMALL), {"variant": "multivalue"}):
        text = spelt(text)
        (key,) = re.findall(r"numbers for (\w+) \?", text)
        assert answer == "".join(v for k, v in needles(text) if k == key) and len(needles(text)) == 4
    for text, answer in texts(load_task("niah", variant="multiquery", **SMALL), {"variant": "multiquery"}):
        text = spelt(text)
        (keys,) = re.findall(r"What are all the special magic numbers for (.+?) \?", text)
        table = dict(needles(text))
        assert answer == "".join(table[k] for k in keys.split(" , "))


def test_variable_tracking_answers_the_chain_found_by_following_assignments():
    options = {"variant": "variable_tracking", "num_chains": 2, "num_hops": 3, "context_length": [256]}
    for text, answer in texts(load_task("niah", **options, **SMALL), options):
        text = spelt(text)
        (value,) = re.findall(r"assigned the value (\w+) \.", text)
        (name,) = re.findall(rf"VAR (\w+) = {value} \.", text)
        chain = [name]
        while hop := re.findall(rf"VAR (\w+) = VAR {chain[-1]} \.", text):
            chain += hop
        assert answer == "".join(chain) and len(chain) == 4


def test_test_rows_cover_the_grid_and_the_asked_needle_stands_at_its_depth():
    options = {"context_length": [128, 256], "depths": [0.0, 0.5, 1.0], "num_test": 60}
    data = load_task("niah", **{**SMALL, **options})
    tags = data["test"].tags
    grid = sorted(zip(tags["context_length"].tolist(), tags["depth"].tolist()))
    assert grid == sorted([(n, d) for n in (128, 256) for d in (0.0, 0.5, 1.0)] * 10)
    lengths = data["test"].attention_mask.sum(dim=1)
    assert torch.equal(lengths, tags["context_length"])  # every row exactly its context length
    for (text, _), depth in zip(texts(data, {**options}), tags["depth"].tolist()):
        before = spelt(text).index("One of the special")
        fraction = before / spelt(text).index("What is")
        assert abs(fraction - depth) < 0.15, (fraction, depth)


def test_essay_is_an_input_of_the_cell_and_too_short_contexts_are_refused():
    assert NiahConfig(haystack="essay").inputs()["essay"].startswith("sha256:")
    assert NiahConfig().inputs() == {}
    with pytest.raises(ConfigError, match="too short"):
        load_task("niah", variant="variable_tracking", context_length=[64], **SMALL)
    with pytest.raises(ConfigError, match="num_keys"):
        load_task("niah", variant="multikey", num_needles=8, num_keys=4)
