"""Byte-level text classification (LRA's "Text" task): raw UTF-8 bytes as tokens, no learned vocabulary.

Token ids: 0 [PAD], 1 [CLS], 2 + b for byte b (259 ids). A row is [CLS] followed by the text's first
`max_length - 1` bytes (a cut may split a multi-byte character). LRA ran IMDB at 4,000 bytes (`preset:
lra`); the CPU preset keeps 256. Sources: local csv/tsv/jsonl/parquet files by split (`files`,
relative paths taken from data_dir, else $ATTNBENCH_DATA_DIR, else the working directory), else the hub
data set `dataset` (default `imdb`) where the hub is reachable. Missing validation/test splits are carved
from train as in `attnbench.tasks.sentence`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Literal

from attnbench.errors import UserError
from attnbench.options import option, require
from attnbench.tasks import TaskConfig, register_task
from attnbench.tasks.base import SPLITS, Split, TaskData
from attnbench.tasks.sentence import (
    DATA_ENV,
    TextRows,
    check_columns,
    complete_splits,
    dataset_rows,
    file_columns,
    hub_offline,
    label_ids,
    quiet_datasets,
    read_data_file,
    refuse_bad_rows,
)

PAD_ID, CLS_ID = 0, 1
BYTE_OFFSET = 2
BYTE_VOCAB = BYTE_OFFSET + 256
PRESET_LENGTHS = {"cpu": 256, "lra": 4000}
FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def encode_bytes(text: str, max_length: int) -> list[int]:
    """[CLS] and the UTF-8 bytes of `text` as ids 2..257, cut to `max_length` ids in all."""
    return [CLS_ID] + [BYTE_OFFSET + b for b in text.encode("utf-8")[: max_length - 1]]


def decode_bytes(ids: list[int]) -> str:
    """The text of a row of byte ids (special ids dropped; a character cut by truncation becomes U+FFFD)."""
    return bytes(i - BYTE_OFFSET for i in ids if i >= BYTE_OFFSET).decode("utf-8", errors="replace")


@dataclasses.dataclass
class ByteTextConfig(TaskConfig):
    """Where the texts come from and how long a row may be (options shared by the byte-level tasks)."""

    preset: Literal["cpu", "lra"] = option(
        "cpu", f"sizes: cpu (max_length {PRESET_LENGTHS['cpu']}) or lra (LRA's {PRESET_LENGTHS['lra']} bytes)"
    )
    max_length: int | None = option(
        None, "bytes per row incl. [CLS] (None: the preset's); longer texts are cut", maximum=65536
    )
    files: dict = option({}, "local files by split, e.g. {train: rt/train.jsonl, test: rt/test.jsonl}; empty: the hub")
    dataset: str = option("imdb", "hub data set read when files is empty (needs the network)")
    text_columns: list[str] = option(["text"], "text column(s)")
    label_column: str = option("label", "label column (integers or strings; ids follow their sorted order)")
    data_dir: str | None = option(None, f"folder relative file paths are taken from (default ${DATA_ENV})")
    max_train_examples: int | None = option(None, "keep this many training rows (seeded sample; None = all)")
    max_eval_examples: int | None = option(None, "keep this many validation and test rows each (None = all)")
    validation_fraction: float = option(0.1, "share of train carved out as validation when it is missing")
    test_fraction: float = option(0.1, "share of train carved out as test when it is missing")
    split_seed: int = option(
        0, "seed of carving and sampling rows (fixed across training seeds)", minimum=0, maximum=2**32 - 1
    )
    bad_rows: Literal["drop", "fail"] = option("drop", "rows with a null or empty text or a null label: drop or fail")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.max_length is None or self.max_length >= 8, f"max_length={self.max_length} must be at least 8")
        unknown = sorted(set(self.files) - set(SPLITS))
        require(not unknown, f"files has unknown split(s) {unknown}; use train, validation, test")
        require(
            not self.files or "train" in self.files,
            f"files={self.files!r} has no 'train' entry; give at least files: {{train: path/to/train.csv}}",
        )
        for name in ("validation_fraction", "test_fraction"):
            require(0.0 < getattr(self, name) < 0.5, f"{name}={getattr(self, name)} must lie in (0, 0.5)")

    @property
    def length(self) -> int:
        """Row width in ids: max_length, else the preset's."""
        return self.max_length or PRESET_LENGTHS[self.preset]

    def path(self, given: str) -> Path:
        """A file named in `files`, relative to data_dir (else $ATTNBENCH_DATA_DIR); UserError if absent."""
        candidate = Path(given).expanduser()
        base = self.data_dir or os.environ.get(DATA_ENV)
        if not candidate.is_absolute() and base:
            candidate = Path(base).expanduser() / candidate
        if not candidate.is_file():
            raise UserError(
                f"byte task: file {str(candidate.absolute())!r} does not exist; fix the path in files "
                f"(relative paths are taken from data_dir, else ${DATA_ENV})"
            )
        return candidate

    def inputs(self) -> dict[str, Path | str]:
        """The files by split ('files.train', ...), wherever data_dir or $ATTNBENCH_DATA_DIR puts them."""
        return {f"files.{split}": self.path(str(given)) for split, given in sorted(self.files.items())}

    def check_inputs(self) -> None:
        """Every file exists and holds the named columns; without files the hub must be reachable."""
        if not self.files and hub_offline():
            raise UserError(
                f"byte task: no files given and the hub is offline, so {self.dataset!r} cannot be read; "
                f"give files: {{train: ..., test: ...}}"
            )
        for given in self.files.values():
            path = self.path(str(given))
            check_columns(
                f"byte task file {str(path)!r}",
                (*self.text_columns, self.label_column),
                file_columns(path, file_format(path)),
            )


def file_format(path: Path) -> str:
    """The `datasets` loader of a file, by suffix."""
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise UserError(
            f"byte task: cannot tell the format of {str(path)!r} from its suffix; use one of {sorted(FORMATS)}"
        )
    return found


def load_rows(cfg: ByteTextConfig, name: str) -> tuple[dict[str, TextRows], dict]:
    """Texts and raw labels per split from the local files, else the hub; and where they came from."""
    with quiet_datasets() as datasets:
        if cfg.files:
            paths = {split: cfg.path(str(given)) for split, given in cfg.files.items()}
            loaded = {s: read_data_file(p, file_format(p), s, f"task {name!r} file") for s, p in paths.items()}
            source: dict[str, Any] = {"source": "local files", "files": {s: str(p) for s, p in paths.items()}}
        else:
            try:
                loaded = dict(datasets.load_dataset(cfg.dataset))
            except Exception as err:  # offline, hub unreachable, or the data set moved
                reason = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise UserError(
                    f"task {name!r}: loading {cfg.dataset!r} from the hub failed ({reason}); give local "
                    f"files: {{train: ..., test: ...}}"
                ) from None
            source = {"source": f"hub {cfg.dataset}"}
    rows, problems = {}, {}
    for split in SPLITS:
        if split in loaded:
            rows[split], problems[split] = dataset_rows(
                loaded[split], cfg.text_columns, cfg.label_column, f"task {name!r}", unlabelled=(None, -1)
            )
    refuse_bad_rows(name, problems, cfg)
    return rows, {
        **source,
        "data_problems": problems,
        "columns": {"text": list(cfg.text_columns), "label": cfg.label_column},
    }


def labelled_splits(cfg: ByteTextConfig, name: str) -> tuple[dict[str, TextRows], dict[str, list[int]], dict]:
    """Completed splits (missing ones carved from train), label ids and the provenance of both."""
    rows, info = load_rows(cfg, name)
    rows, carved = complete_splits(rows, cfg, validation_as_test=False)
    labels, names = label_ids(rows, None)
    if len(names) < 2:
        raise UserError(f"task {name!r}: the training labels hold only {names}; a classification task needs 2+ classes")
    return rows, labels, {**info, "carved": carved, "label_names": names}


@register_task("byte_text", config=ByteTextConfig)
def byte_text(cfg: ByteTextConfig) -> TaskData:
    """Byte-level text classification (LRA Text: IMDB at 4,000 bytes); local files or the hub."""
    require(len(cfg.text_columns) == 1, f"text_columns={cfg.text_columns} must name one column for byte_text")
    rows, labels, info = labelled_splits(cfg, "byte_text")
    splits = {
        s: Split.from_rows([encode_bytes(t, cfg.length) for t in rows[s].texts], labels[s], cfg.length, PAD_ID)
        for s in SPLITS
    }
    truncated = {s: sum(len(t.encode("utf-8")) > cfg.length - 1 for t in rows[s].texts) for s in SPLITS}
    return TaskData(
        "byte_text",
        splits,
        num_classes=len(info["label_names"]),
        vocab_size=BYTE_VOCAB,
        max_length=cfg.length,
        pad_id=PAD_ID,
        info={
            **info,
            "preset": cfg.preset,
            "tokenizer": "bytes (0 [PAD], 1 [CLS], 2 + byte)",
            "truncated_rows": truncated,
        },
        special_ids=(PAD_ID, CLS_ID),
        texts={s: rows[s].texts for s in SPLITS},
    )
