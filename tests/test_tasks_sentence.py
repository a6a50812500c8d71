"""Sentence tasks: real rows from $ATTNBENCH_DATA_DIR, pairs, the generic text task, the offline error."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer

from attnbench.errors import UserError
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.tasks import load_task

DATA_DIR = os.environ.get("ATTNBENCH_DATA_DIR")
needs_data = pytest.mark.skipif(
    not DATA_DIR,
    reason="ATTNBENCH_DATA_DIR is unset: no local SST-2 / Rotten Tomatoes files (CI sets it to ../shared/data)",
)


@pytest.fixture(scope="module")
def sst2(cache_dir):
    return load_task("sst2", cache_dir=cache_dir)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def squash(text: str) -> str:
    """Lower case, accents stripped, no whitespace: what survives BERT normalisation and decoding."""
    plain = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    return "".join(plain.split())


@needs_data
def test_sst2_real_rows_sizes_columns_and_labels(sst2):
    sizes = {"train": 6920, "validation": 872, "test": 1821}
    assert {s: len(sst2[s]) for s in sizes} == sizes
    assert sst2.num_classes == 2 and not sst2.pair and sst2.info["carved"] == {}
    assert sst2.info["source"].startswith("local files")
    raw = jsonl(Path(DATA_DIR) / "sst2" / "test.jsonl")
    assert sst2["test"].labels.tolist() == [r["label"] for r in raw]
    tok = Tokenizer.from_file(sst2.info["tokenizer"]["cache_file"])
    for i in range(5):  # rows arrive in file order; [CLS] text [SEP] decodes back to the sentence
        ids = sst2["test"].input_ids[i][sst2["test"].attention_mask[i]].tolist()
        assert ids[0] == tok.token_to_id("[CLS]") and ids[-1] == tok.token_to_id("[SEP]")
        assert squash(tok.decode(ids[1:-1]).replace(" ##", "")) == squash(raw[i]["sentence"])


@needs_data
def test_rotten_tomatoes_real_rows(cache_dir):
    data = load_task("rotten_tomatoes", cache_dir=cache_dir, max_length=64)
    sizes = {"train": 8530, "validation": 1066, "test": 1066}
    assert {s: len(data[s]) for s in sizes} == sizes
    assert data.info["columns"] == {"text": ["text"], "label": "label"}
    counts = sum(torch.bincount(data[s].labels, minlength=2) for s in sizes)
    assert counts.tolist() == [5331, 5331]
    assert data["train"].input_ids.shape[1] == 64


@needs_data
def test_sst2_label_noise_and_train_cap(cache_dir, sst2):
    data = load_task("sst2", cache_dir=cache_dir, max_train_examples=500, label_noise=0.1)
    assert len(data["train"]) == 500 and len(data["test"]) == 1821
    assert data.info["label_noise"]["flipped"] == 50
    assert torch.equal(data["test"].labels, sst2["test"].labels)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _questions(n: int, offset: int = 0) -> list[dict]:
    words = ["how", "do", "i", "learn", "python", "fast", "what", "is", "the", "best", "way", "to", "cook", "rice"]
    return [
        {
            "question1": " ".join(words[(i + offset) % 7 : (i + offset) % 7 + 5]) + " ?",
            "question2": " ".join(words[(i * 3) % 9 : (i * 3) % 9 + 4]) + " ?",
            "label": i % 2,
            "idx": i,
        }
        for i in range(n)
    ]


def test_qqp_pairs_from_local_files_with_unlabelled_test(tmp_path, cache_dir):
    _write_jsonl(tmp_path / "qqp" / "train.jsonl", _questions(60))
    _write_jsonl(tmp_path / "qqp" / "validation.jsonl", _questions(10, offset=3))
    _write_jsonl(tmp_path / "qqp" / "test.jsonl", [{**r, "label": -1} for r in _questions(10, offset=5)])
    data = load_task("qqp", data_dir=str(tmp_path), cache_dir=cache_dir, max_length=16, vocab_size=100)
    assert data.pair and data.num_classes == 2
    assert len(data["test"]) == 10 and len(data["validation"]) == 6 and len(data["train"]) == 54
    assert (
        "validation split" in data.info["carved"]["test"] and "carved from train" in data.info["carved"]["validation"]
    )
    assert data["test"].labels.tolist() == [r["label"] for r in _questions(10, offset=3)]
    tok = Tokenizer.from_file(data.info["tokenizer"]["cache_file"])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    split = data["test"]
    for ids, seg, mask in zip(split.input_ids, split.segment_ids, split.attention_mask):
        ids, seg = ids[mask].tolist(), seg[mask].tolist()
        first_sep = ids.index(sep)
        assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2
        assert seg == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    cfg = ModelConfig(
        vocab_size=data.vocab_size,
        num_classes=2,
        max_length=16,
        d_model=16,
        num_heads=2,
        ffn_dim=16,
        num_layers=1,
        num_segments=2,
        pad_id=data.pad_id,
    )
    ids, mask, seg, labels = next(split.batches(10))
    assert TransformerClassifier(cfg, "softmax")(ids, mask, seg).shape == (10, 2)


def test_text_task_csv_with_string_labels_carves_missing_splits(tmp_path, cache_dir):
    labels = ["good", "bad", "meh"] * 40
    frame = pd.DataFrame({"review": [f"this film was {w} number {i}" for i, w in enumerate(labels)], "stars": labels})
    frame.to_csv(tmp_path / "reviews.csv", index=False)
    data = load_task(
        "text",
        files={"train": "reviews.csv"},
        data_dir=str(tmp_path),
        text_columns=["review"],
        label_column="stars",
        cache_dir=cache_dir,
        max_length=16,
        vocab_size=100,
    )
    assert data.num_classes == 3 and data.info["label_names"] == ["bad", "good", "meh"]
    assert {s: len(data[s]) for s in ("train", "validation", "test")} == {"train": 96, "validation": 12, "test": 12}
    total = sum(torch.bincount(data[s].labels, minlength=3) for s in ("train", "validation", "test"))
    assert total.tolist() == [40, 40, 40]
    again = load_task(
        "text",
        files={"train": str(tmp_path / "reviews.csv")},
        text_columns=["review"],
        label_column="stars",
        cache_dir=cache_dir,
        max_length=16,
        vocab_size=100,
    )
    assert torch.equal(again["test"].input_ids, data["test"].input_ids)


def test_text_task_parquet_pairs_with_integer_labels(tmp_path, cache_dir):
    def frame(n: int, shift: int) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "a": [f"first text {i}" for i in range(n)],
                "b": [f"second {i} words" for i in range(n)],
                "y": [(3, 5, 7)[(i + shift) % 3] for i in range(n)],
            }
        )

    for split, n, shift in (("train", 30, 0), ("validation", 6, 1), ("test", 9, 2)):
        frame(n, shift).to_parquet(tmp_path / f"{split}.parquet")
    files = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "validation", "test")}
    data = load_task(
        "text",
        files=files,
        text_columns=["a", "b"],
        label_column="y",
        cache_dir=cache_dir,
        max_length=12,
        vocab_size=100,
    )
    assert data.pair and data.num_classes == 3 and data.info["label_names"] == [3, 5, 7]
    assert data["test"].labels.tolist() == [{3: 0, 5: 1, 7: 2}[v] for v in frame(9, 2)["y"]]
    assert data["test"].segment_ids is not None and int(data["test"].segment_ids.max()) == 1


def test_text_task_names_missing_columns(tmp_path):
    pd.DataFrame({"sentence": ["a b"] * 4, "label": [0, 1] * 2}).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(UserError, match=r"column\(s\) \['text'\] not in the data.*'sentence'"):
        load_task("text", files={"train": str(tmp_path / "t.csv")})


@pytest.fixture
def offline(monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_offline_without_files_says_where_to_put_them(monkeypatch, tmp_path, offline):
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(tmp_path))
    with pytest.raises(UserError) as err:
        load_task("sst2")
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "sst2" / "train.jsonl") in message and f"{tmp_path}/sst2/" in message
    assert "ATTNBENCH_DATA_DIR" in message and "data_dir" in message and "sentence, label" in message

    monkeypatch.delenv("ATTNBENCH_DATA_DIR")
    with pytest.raises(
        UserError,
        match=r"train\.jsonl, validation\.jsonl and test\.jsonl .* in DIR/qqp/ .*"
        r"ATTNBENCH_DATA_DIR=DIR",
    ):
        load_task("qqp")


def test_explicit_data_dir_without_files_fails_before_the_hub(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("must not reach the hub"))
    with pytest.raises(UserError, match="rotten_tomatoes/train.jsonl does not exist"):
        load_task("rotten_tomatoes", data_dir=str(tmp_path))


def test_text_task_missing_file_names_the_absolute_path(tmp_path):
    with pytest.raises(UserError, match=f"file '{tmp_path}/nope.csv' does not exist"):
        load_task("text", files={"train": "nope.csv"}, data_dir=str(tmp_path))


def test_hub_branch_maps_columns_and_replaces_an_unlabelled_test_split(tmp_path, monkeypatch, cache_dir):
    import datasets

    calls = []

    def fake_hub(path, config=None, **kwargs):
        calls.append((path, config))

        def rows(n, offset, label):
            return {
                "sentence": [f"movie number {i + offset} was {'good' if i % 2 else 'bad'}" for i in range(n)],
                "label": [label(i) for i in range(n)],
                "idx": list(range(n)),
            }

        return datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict(rows(50, 0, lambda i: i % 2)),
                "validation": datasets.Dataset.from_dict(rows(8, 100, lambda i: i % 2)),
                "test": datasets.Dataset.from_dict(rows(9, 200, lambda i: -1)),
            }
        )

    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(tmp_path))  # no sst2/ inside: the hub is asked
    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    data = load_task("sst2", cache_dir=cache_dir, max_length=12, vocab_size=100)
    assert calls == [("nyu-mll/glue", "sst2")] and data.info["source"] == "hub nyu-mll/glue/sst2"
    assert {s: len(data[s]) for s in ("train", "validation", "test")} == {"train": 45, "validation": 5, "test": 8}
    assert data["test"].labels.tolist() == [i % 2 for i in range(8)]


def test_bad_rows_are_counted_per_split_and_can_fail_the_task(tmp_path, cache_dir):
    texts = [f"row {i} was {'good' if i % 2 else 'bad'}" for i in range(60)]
    labels = ["pos" if i % 2 else "neg" for i in range(60)]
    for i in range(0, 12):  # 4 null texts, 4 blank texts, 4 null labels
        texts[i] = None if i < 4 else ("   " if i < 8 else texts[i])
        labels[i] = None if i >= 8 else labels[i]
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "t.csv", index=False)
    data = load_task(
        "text", files={"train": str(tmp_path / "t.csv")}, cache_dir=cache_dir, max_length=12, vocab_size=100
    )
    counted = data.info["data_problems"]["train"]
    assert counted == {"rows": 60, "kept": 48, "null_text": 4, "empty_text": 4, "null_label": 4, "unlabelled": 0}
    assert sum(len(data[s]) for s in ("train", "validation", "test")) == 48
    assert data.info["label_names"] == ["neg", "pos"]
    with pytest.raises(
        UserError,
        match=r"the train split has 12 bad rows of 60 \(4 null text, 4 empty text, "
        r"4 null label\); fix the data or set bad_rows: drop",
    ):
        load_task(
            "text",
            files={"train": str(tmp_path / "t.csv")},
            bad_rows="fail",
            cache_dir=cache_dir,
            max_length=12,
            vocab_size=100,
        )


def test_unlabelled_hub_test_rows_are_counted_apart_from_bad_rows(tmp_path, cache_dir):
    _write_jsonl(tmp_path / "qqp" / "train.jsonl", _questions(40) + [{"question1": None, "question2": "x", "label": 1}])
    _write_jsonl(tmp_path / "qqp" / "test.jsonl", [{**r, "label": -1} for r in _questions(10)])
    data = load_task("qqp", data_dir=str(tmp_path), cache_dir=cache_dir, max_length=16, vocab_size=100)
    assert data.info["data_problems"]["train"]["null_text"] == 1
    assert data.info["data_problems"]["test"] == {
        "rows": 10,
        "kept": 0,
        "null_text": 0,
        "empty_text": 0,
        "null_label": 0,
        "unlabelled": 10,
    }


def _suite(tmp_path: Path, task: dict) -> Path:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "description": "d",
                "attentions": ["softmax"],
                "tasks": [task],
                "seeds": [0],
                "measurements": ["accuracy"],
            }
        )
    )
    return path


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_validation_reads_headers_for_missing_columns_and_files(tmp_path, fmt):
    from attnbench.suite import load_suite

    frame = pd.DataFrame({"sentence": ["a b", "c d"], "stars": [0, 1]})
    path = tmp_path / f"t.{fmt}"
    {
        "csv": lambda: frame.to_csv(path, index=False),
        "tsv": lambda: frame.to_csv(path, sep="\t", index=False),
        "jsonl": lambda: frame.to_json(path, orient="records", lines=True),
        "parquet": lambda: frame.to_parquet(path),
    }[fmt]()
    ok = {
        "name": "text",
        "options": {"files": {"train": str(path)}, "text_columns": ["sentence"], "label_column": "stars"},
    }
    assert load_suite(str(_suite(tmp_path, ok))).tasks[0]["name"] == "text"
    with pytest.raises(
        UserError,
        match=r"s\.yaml: tasks\[0\]\.options: text task file .*column\(s\) \['label'\] "
        r"not in the data; its columns are \['sentence', 'stars'\]",
    ):
        load_suite(
            str(
                _suite(
                    tmp_path, {"name": "text", "options": {"files": {"train": str(path)}, "text_columns": ["sentence"]}}
                )
            )
        )
    with pytest.raises(UserError, match=r"tasks\[0\]\.options: text task: file .*nope\.csv' does not exist"):
        load_suite(str(_suite(tmp_path, {"name": "text", "options": {"files": {"train": str(tmp_path / "nope.csv")}}})))


def test_hub_task_without_data_is_refused_at_validation_when_offline(tmp_path, monkeypatch):
    from attnbench.suite import load_suite

    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        UserError,
        match=r"tasks\[0\]\.options: task 'sst2': .*sst2/train\.jsonl does not exist and "
        r"the Hugging Face Hub is offline",
    ):
        load_suite(str(_suite(tmp_path, {"name": "sst2"})))
    _write_jsonl(tmp_path / "sst2" / "train.jsonl", [{"text": "wrong column", "label": 0}])
    with pytest.raises(UserError, match=r"column\(s\) \['sentence'\] not in the data"):
        load_suite(str(_suite(tmp_path, {"name": "sst2"})))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(tmp_path / "empty"))
    assert load_suite(str(_suite(tmp_path, {"name": "sst2"}))).tasks == [{"name": "sst2", "options": {}}]


def test_labels_are_normalised_by_one_rule_across_splits(tmp_path, cache_dir):
    rows = "".join(f"film number {i} was {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(40))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    (tmp_path / "test.jsonl").write_text(
        "".join(json.dumps({"text": f"film {i}", "label": str(i % 2)}) + "\n" for i in range(10))
    )
    data = load_task(
        "text",
        files={"train": str(tmp_path / "train.csv"), "test": str(tmp_path / "test.jsonl")},
        cache_dir=cache_dir,
        max_length=12,
        vocab_size=100,
    )  # ints 0/1 in train, strings '0'/'1' in test
    assert data.num_classes == 2 and data.info["label_names"] == [0, 1]
    assert data["test"].labels.tolist() == [i % 2 for i in range(10)]


def test_labels_mixing_numbers_and_names_are_refused_with_the_mix_named(tmp_path, cache_dir):
    rows = "".join(f"film {i},{('0', '1', 'pos', 'neg')[i % 4]}\n" for i in range(40))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    with pytest.raises(
        UserError,
        match=r"the labels mix numbers \(0, 1 in train\) with names \('neg', 'pos' in "
        r"train\); use one kind of label in every split",
    ):
        load_task(
            "text", files={"train": str(tmp_path / "train.csv")}, cache_dir=cache_dir, max_length=12, vocab_size=100
        )


def test_a_latin1_byte_names_the_file_the_byte_and_the_encoding_option(tmp_path, cache_dir):
    rows = "".join(f"film {i} was good,{i % 2}\n" for i in range(40)) + "caf\xe9 scene,1\n"
    path = tmp_path / "train.csv"
    path.write_bytes(("text,label\n" + rows).encode("latin-1"))
    offset = path.read_bytes().index(b"\xe9")
    with pytest.raises(
        UserError,
        match=rf"train.csv': byte {offset} \(line 42, b'\\xe9'\) is not utf-8 .*"
        r"set the task option encoding .* e.g. encoding: latin-1",
    ):
        load_task("text", files={"train": str(path)}, cache_dir=cache_dir, max_length=12, vocab_size=100)
    data = load_task(
        "text", files={"train": str(path)}, encoding="latin-1", cache_dir=cache_dir, max_length=12, vocab_size=100
    )
    assert sum(len(data[s]) for s in ("train", "validation", "test")) == 41


def test_a_malformed_csv_names_the_file_and_what_the_reader_said(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,label\n"unclosed quote,1\n' + "fine,0\n" * 5)
    with pytest.raises(UserError, match=r"train.csv': cannot be read as csv \(.*\); check the file"):
        load_task("text", files={"train": str(path)}, max_length=12, vocab_size=100)


def _cut_files(folder: Path) -> dict[str, Path]:
    """train.jsonl whose line 14 is cut short and train.csv whose line 9 holds a third field."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"sentence": f"film {i} was fine", "text": f"film {i}", "label": i % 2}) for i in range(20)]
    rows[13] = rows[13][:12]
    (folder / "train.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "train.csv").write_text("text,label\n" + "".join(f"film {i},{i % 2}\n" for i in range(20)))
    (folder / "train.csv").write_text((folder / "train.csv").read_text().replace("film 7,1\n", "film 7,1,extra\n"))
    return {"jsonl": folder / "train.jsonl", "csv": folder / "train.csv"}


@pytest.mark.parametrize(
    "task, kind, line",
    [("byte_text", "jsonl", 14), ("byte_text", "csv", 9), ("sst2", "jsonl", 14), ("text", "jsonl", 14)],
)
def test_every_task_file_reader_names_the_file_and_line_it_cannot_read(tmp_path, cache_dir, task, kind, line):
    """byte_text on a JSONL with a cut line said only 'DatasetGenerationError' (sst2's local files the same; the
    text task named the file but not the line): each now names both."""
    path = _cut_files(tmp_path / "sst2")[kind]
    files = {"files": {"train": str(path)}}
    options = {
        "byte_text": {**files, "max_length": 64},
        "sst2": {"data_dir": str(tmp_path), "cache_dir": cache_dir, "max_length": 16},
        "text": {**files, "cache_dir": cache_dir, "max_length": 16, "vocab_size": 100},
    }[task]
    with pytest.raises(UserError, match=rf"{path}': (line {line} is not JSON|cannot be read as csv .* line {line},)"):
        load_task(task, **options)


def test_a_tokenizer_file_that_does_not_parse_names_the_file_and_line(tmp_path):
    """A cut tokenizer.json stopped with a bare 'Exception: EOF while parsing a value at line 2 column 0'."""
    from attnbench.tasks.tokenizer import pretrained_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": \n')
    with pytest.raises(UserError, match=rf"tokenizer file '{path}' cannot be read \(EOF while parsing .* line 2"):
        pretrained_tokenizer(str(path))
