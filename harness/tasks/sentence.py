"""Sentence classification through `datasets`: sst2, rotten_tomatoes, qqp (pairs) and local `text` files.

Hub tasks read local files in the hub's column layout when a data directory holds them
($ATTNBENCH_DATA_DIR or option data_dir: DIR/<task>/{train,validation,test}.jsonl), else the hub.
Splits without labels (GLUE's test, label -1) are replaced: the hub's labelled validation split
becomes the test split and a validation split is carved from train (seeded by split_seed; recorded
in TaskData.info). Texts are tokenised by `attnbench.tasks.tokenizer`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from attnbench.errors import UserError
from attnbench.options import option, require
from attnbench.tasks import TaskConfig, register_task
from attnbench.tasks.base import SPLITS, TaskData
from attnbench.tasks.tokenizer import LOCAL, build_encoder

DATA_ENV = "ATTNBENCH_DATA_DIR"


@dataclasses.dataclass
class TextTaskConfig(TaskConfig):
    """Tokenisation and split options shared by every sentence task."""

    max_length: int = option(128, "tokens per row incl. [CLS]/[SEP]; longer texts are truncated", maximum=65536)
    tokenizer: str = option(
        LOCAL,
        "'wordpiece' (trained on the training split, cached), a hub name such as "
        "'bert-base-uncased' (needs the network), or a tokenizer.json path",
    )
    vocab_size: int = option(8000, "vocabulary size of the locally trained WordPiece tokenizer", maximum=1_000_000)
    cache_dir: str | None = option(None, "tokenizer cache folder (default $ATTNBENCH_CACHE or ~/.cache/attnbench)")
    data_dir: str | None = option(None, f"folder of local data files (default ${DATA_ENV})")
    max_train_examples: int | None = option(None, "keep this many training rows (seeded sample; None = all)")
    max_eval_examples: int | None = option(None, "keep this many validation and test rows each (None = all)")
    validation_fraction: float = option(0.1, "share of train carved out as validation when it is missing")
    test_fraction: float = option(0.1, "share of train carved out as test when it is missing (text task)")
    split_seed: int = option(
        0, "seed of carving and sampling rows (kept fixed across training seeds)", minimum=0, maximum=2**32 - 1
    )
    bad_rows: Literal["drop", "fail"] = option(
        "drop",
        "rows with a null or empty text or a null label: drop them (counted in the cell's provenance) or fail the cell",
    )

    path_options: ClassVar[tuple[str, ...]] = ("data_dir", "cache_dir")

    def inputs(self) -> dict[str, Path | str]:
        """A tokenizer.json file given as `tokenizer` (the trained WordPiece derives from the training split)."""
        path = Path(self.tokenizer).expanduser()
        return {"tokenizer": path} if self.tokenizer.endswith(".json") and path.is_file() else {}

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.max_length >= 8, f"max_length={self.max_length} must be at least 8")
        require(self.vocab_size >= 100, f"vocab_size={self.vocab_size} must be at least 100")
        for name in ("validation_fraction", "test_fraction"):
            value = getattr(self, name)
            require(0.0 < value < 0.5, f"{name}={value} must lie in (0, 0.5)")
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            require(value is None or value >= 1, f"{name}={value} must be at least 1 or null")


@dataclasses.dataclass
class TextFilesConfig(TextTaskConfig):
    """Options of the generic local text task (csv / jsonl / parquet / tsv files)."""

    files: dict = option(
        {},
        "files by split, e.g. {train: data/train.csv, test: data/test.csv}; train is "
        "required; relative paths are taken from data_dir, else the suite file's folder",
    )
    text_columns: list[str] = option(["text"], "one text column, or two for sentence pairs")
    label_column: str = option("label", "label column (integers or strings; ids follow their sorted order)")
    format: Literal["auto", "csv", "tsv", "json", "parquet"] = option("auto", "file format; auto = by suffix")
    encoding: str = option("utf-8", "text encoding of csv / tsv / json files, e.g. latin-1 or cp1252")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            "train" in self.files,
            f"files={self.files!r} has no 'train' entry; give at least files: {{train: path/to/train.csv}}",
        )
        unknown = sorted(set(self.files) - set(SPLITS))
        require(not unknown, f"files has unknown split(s) {unknown}; use train, validation, test")
        require(
            len(self.text_columns) in (1, 2),
            f"text_columns={self.text_columns} must name one column, or two for sentence pairs",
        )

    path_options: ClassVar[tuple[str, ...]] = ("data_dir", "cache_dir", "files")

    @classmethod
    def resolve_paths(cls, options: dict[str, Any], base: Path) -> dict[str, Any]:
        """As TaskConfig's, except that relative `files` stay relative to a given data_dir."""
        resolved = super().resolve_paths(options, base)
        if options.get("data_dir") and "files" in options:
            resolved["files"] = options["files"]
        return resolved

    def inputs(self) -> dict[str, Path | str]:
        """The files by split ('files.train', ...) and a tokenizer file."""
        files = {f"files.{split}": _resolve(str(given), self) for split, given in sorted(self.files.items())}
        return {**super().inputs(), **files}

    def check_inputs(self) -> None:
        """Every file exists, its format is known and its header holds the text and label columns."""
        for _split, given in self.files.items():
            path = _resolve(str(given), self)
            fmt = _format(path, self.format)
            if fmt != "parquet":
                check_encoding(path, self.encoding)
            check_columns(
                f"text task file {str(path)!r}",
                (*self.text_columns, self.label_column),
                file_columns(path, fmt, self.encoding),
            )


@dataclasses.dataclass(frozen=True)
class HubDataset:
    """Where a named data set lives on the hub and which columns hold texts and labels."""

    name: str
    hub_path: str
    hub_config: str | None
    text_columns: tuple[str, ...]
    num_classes: int = 2
    label_column: str = "label"


HUB_DATASETS = {
    "sst2": HubDataset("sst2", "nyu-mll/glue", "sst2", ("sentence",)),
    "rotten_tomatoes": HubDataset("rotten_tomatoes", "cornell-movie-review-data/rotten_tomatoes", None, ("text",)),
    "qqp": HubDataset("qqp", "nyu-mll/glue", "qqp", ("question1", "question2")),
}


@dataclasses.dataclass
class HubTaskConfig(TextTaskConfig):
    """Options of one named data set of HUB_DATASETS (the class attribute `dataset` says which)."""

    dataset: ClassVar[str] = ""

    def inputs(self) -> dict[str, Path | str]:
        """The local files by split ('files.train', ...) in DATA_DIR/<data set>/, and a tokenizer file; nothing
        for the hub's copy (read only where the network is, by its name)."""
        folder = local_folder(HUB_DATASETS[self.dataset], self)
        files = {} if folder is None else dict(_local_files(folder))
        return {**super().inputs(), **{f"files.{split}": Path(path) for split, path in files.items()}}

    def check_inputs(self) -> None:
        """Local files have the data set's columns; without them the hub must be reachable (not offline)."""
        spec = HUB_DATASETS[self.dataset]
        folder = local_folder(spec, self)
        if folder is None and (self.data_dir is not None or hub_offline()):
            raise missing_local_files(
                spec,
                self,
                "the Hugging Face Hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)"
                if self.data_dir is None
                else None,
            )
        for split in SPLITS if folder is not None else ():
            if (folder / f"{split}.jsonl").is_file():
                check_columns(
                    f"task {spec.name!r} file {str(folder / f'{split}.jsonl')!r}",
                    (*spec.text_columns, spec.label_column),
                    file_columns(folder / f"{split}.jsonl", "json"),
                )


@dataclasses.dataclass
class TextRows:
    """One split before tokenisation: texts (and second texts of pairs) with raw labels."""

    texts: list[str]
    pairs: list[str] | None
    labels: list[Any]

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> "TextRows":
        return TextRows(
            [self.texts[i] for i in index],
            None if self.pairs is None else [self.pairs[i] for i in index],
            [self.labels[i] for i in index],
        )


@contextlib.contextmanager
def quiet_datasets() -> Iterator[Any]:
    """The `datasets` module with its progress bars off (restored afterwards): loading stays silent."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield datasets
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def data_directory(cfg: TextTaskConfig) -> Path | None:
    """The data folder from the option, else the environment variable, else None."""
    chosen = cfg.data_dir or os.environ.get(DATA_ENV)
    return Path(chosen).expanduser() if chosen else None


def expected_files_hint(spec: HubDataset, directory: Path | None) -> str:
    """'put train.jsonl, ... in DIR/sst2/ ... and set ATTNBENCH_DATA_DIR=DIR (or option data_dir)'."""
    folder = f"{directory}/{spec.name}/" if directory else f"DIR/{spec.name}/ (DIR a folder of your choice)"
    columns = ", ".join((*spec.text_columns, spec.label_column))
    where = directory if directory else "DIR"
    return (
        f"put train.jsonl, validation.jsonl and test.jsonl (JSON lines with columns {columns}) in {folder} "
        f"and set {DATA_ENV}={where} (or the task option data_dir: {where})"
    )


def hub_offline() -> bool:
    """Whether the environment tells Hugging Face libraries not to reach the hub."""
    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def local_folder(spec: HubDataset, cfg: TextTaskConfig) -> Path | None:
    """DATA_DIR/<task> when it holds train.jsonl, else None."""
    directory = data_directory(cfg)
    folder = directory / spec.name if directory else None
    return folder if folder is not None and (folder / "train.jsonl").is_file() else None


def _local_files(folder: Path) -> dict[str, str]:
    """The split files a local copy of a hub data set holds: {split: path of <split>.jsonl}."""
    return {s: str(folder / f"{s}.jsonl") for s in SPLITS if (folder / f"{s}.jsonl").is_file()}


def missing_local_files(spec: HubDataset, cfg: TextTaskConfig, hub_failure: str | None) -> UserError:
    """The error for a hub task without local files (hub_failure: why the hub cannot serve it, if tried)."""
    directory = data_directory(cfg)
    train = f"{directory / spec.name / 'train.jsonl'} does not exist" if directory else "no local files"
    hub = f" and {hub_failure}" if hub_failure else ""
    return UserError(f"task {spec.name!r}: {train}{hub}; " + expected_files_hint(spec, directory))


def load_hub_rows(spec: HubDataset, cfg: TextTaskConfig) -> tuple[dict[str, TextRows], dict]:
    """Rows per split from local files in the hub's layout if present, else from the hub."""
    folder = local_folder(spec, cfg)
    if folder is not None:
        files = _local_files(folder)
        loaded = {s: read_data_file(Path(f), "json", s, f"task {spec.name!r} file") for s, f in files.items()}
        source = {"source": f"local files {folder}", "files": files}
    elif cfg.data_dir is not None:
        raise missing_local_files(spec, cfg, None)
    else:
        try:
            with quiet_datasets() as datasets:
                loaded = datasets.load_dataset(spec.hub_path, spec.hub_config)
        except Exception as err:  # offline, hub unreachable, or dataset moved
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise missing_local_files(
                spec, cfg, f"loading {spec.hub_path} from the Hugging Face Hub failed ({reason})"
            ) from None
        source = {"source": f"hub {spec.hub_path}" + (f"/{spec.hub_config}" if spec.hub_config else "")}
    rows, problems = {}, {}
    for split in SPLITS:
        if split in loaded:
            rows[split], problems[split] = dataset_rows(
                loaded[split], spec.text_columns, spec.label_column, f"task {spec.name!r}", unlabelled=(None, -1)
            )
    return rows, {**source, "data_problems": problems}


def check_columns(what: str, wanted: tuple[str, ...], columns: list[str] | None) -> None:
    """Raise a UserError naming the wanted columns that `columns` lacks (None: columns unknown, no check)."""
    missing = [c for c in wanted if columns is not None and c not in columns]
    if missing:
        raise UserError(
            f"{what}: column(s) {missing} not in the data; its columns are {columns}; "
            f"name the right ones with text_columns / label_column"
        )


def check_encoding(path: Path, encoding: str) -> None:
    """A UserError naming the file, the byte offset and line of the first byte that is not `encoding`, and the fix."""
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise UserError(
            f"text task: encoding {encoding!r} is not a known text encoding; give e.g. utf-8, latin-1 or cp1252"
        ) from None
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"text task: cannot read {str(path)!r} ({err.strerror or err})") from None
    try:
        data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"text task file {str(path)!r}: byte {err.start} (line {line}, {data[err.start : err.start + 1]!r}) "
            f"is not {encoding} ({err.reason}); set the task option encoding to the file's encoding, "
            f"e.g. encoding: latin-1"
        ) from None


def file_columns(path: Path, fmt: str, encoding: str = "utf-8") -> list[str] | None:
    """The column names of a data file read from its header only (csv/tsv first line, the first JSON line,
    the parquet schema); None when the header does not say (e.g. a JSON array)."""
    import csv
    import json

    try:
        if fmt == "parquet":
            import pyarrow.parquet

            return list(pyarrow.parquet.read_schema(path).names)
        with open(path, newline="", encoding=encoding) as f:
            if fmt in ("csv", "tsv"):
                return next(csv.reader(f, delimiter="\t" if fmt == "tsv" else ","), [])
            first = next((line for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as err:
        raise UserError(
            f"cannot read the header of {str(path)!r} ({type(err).__name__}: {err}); check the file and its format"
        ) from None
    try:
        row = json.loads(first)
    except ValueError:
        return None
    return list(row) if isinstance(row, dict) else None


ROW_PROBLEMS = ("null_text", "empty_text", "null_label")  # dropped rows; "unlabelled" rows are expected (GLUE test)


def dataset_rows(
    dataset: Any,
    text_columns: tuple[str, ...] | list[str],
    label_column: str,
    what: str,
    unlabelled: tuple[Any, ...] = (None,),
) -> tuple[TextRows, dict[str, int]]:
    """Texts and labels of one `datasets.Dataset` without the rows that have a null or empty text, a null
    label or a label in `unlabelled`; and how many rows were dropped for each reason."""
    check_columns(what, (*text_columns, label_column), list(dataset.column_names))
    table = dataset.with_format("arrow")[:]
    columns = [table.column(c).to_pylist() for c in (*text_columns, label_column)]
    counts = dict.fromkeys(("rows", "kept", *ROW_PROBLEMS, "unlabelled"), 0)
    keep = []
    for i, row in enumerate(zip(*columns)):
        texts, label = row[:-1], row[-1]
        problem = (
            "null_text"
            if any(t is None for t in texts)
            else "empty_text"
            if any(not str(t).strip() for t in texts)
            else "null_label"
            if label is None
            else "unlabelled"
            if label in unlabelled
            else None
        )
        counts[problem or "kept"] += 1
        if problem is None:
            keep.append(i)
    counts["rows"] = len(columns[0])
    texts = [str(columns[0][i]) for i in keep]
    pairs = [str(columns[1][i]) for i in keep] if len(text_columns) == 2 else None
    return TextRows(texts, pairs, [columns[-1][i] for i in keep]), counts


def refuse_bad_rows(name: str, problems: dict[str, dict[str, int]], cfg: TextTaskConfig) -> None:
    """With bad_rows: fail, raise a UserError saying how many rows of which split are bad and why."""
    bad = {split: {k: c[k] for k in ROW_PROBLEMS if c[k]} for split, c in problems.items()}
    bad = {split: kinds for split, kinds in bad.items() if kinds}
    if cfg.bad_rows == "fail" and bad:
        split, kinds = next(iter(bad.items()))
        listed = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in kinds.items())
        raise UserError(
            f"task {name!r}: the {split} split has {sum(kinds.values())} bad rows of "
            f"{problems[split]['rows']} ({listed}); fix the data or set bad_rows: drop"
        )


def complete_splits(
    rows: dict[str, TextRows], cfg: TextTaskConfig, validation_as_test: bool
) -> tuple[dict[str, TextRows], dict]:
    """Fill missing or unlabelled splits deterministically; cap sizes; say what was done.

    validation_as_test: a missing test split is the validation split (hub tasks), else carved from train.
    """
    rows = {s: r for s, r in rows.items() if len(r) > 0}
    if "train" not in rows:
        raise UserError("the training split has no labelled rows; check the label column and the train file")
    rng = np.random.default_rng(cfg.split_seed)
    notes: dict[str, str] = {}
    if validation_as_test and "test" not in rows and "validation" in rows:
        rows["test"] = rows.pop("validation")
        notes["test"] = "the labelled validation split (the test split has no labels)"
    original = len(rows["train"])
    for split, fraction in (("test", cfg.test_fraction), ("validation", cfg.validation_fraction)):
        if split in rows:
            continue
        order = rng.permutation(len(rows["train"]))
        count = max(1, round(fraction * original))
        rows[split] = rows["train"].take(order[:count])
        rows["train"] = rows["train"].take(np.sort(order[count:]))
        notes[split] = f"carved from train: {count} rows (fraction {fraction}, split_seed {cfg.split_seed})"
    for split, cap in (
        ("train", cfg.max_train_examples),
        ("validation", cfg.max_eval_examples),
        ("test", cfg.max_eval_examples),
    ):
        if cap is not None and cap < len(rows[split]):
            rows[split] = rows[split].take(np.sort(rng.permutation(len(rows[split]))[:cap]))
            notes[split] = "; ".join(filter(None, [notes.get(split), f"sampled {cap} rows"]))
    return rows, notes


def label_ids(rows: dict[str, TextRows], names: list[Any] | None) -> tuple[dict[str, list[int]], list[Any]]:
    """Map raw labels to ids 0..C-1 (given names, else the sorted distinct training labels)."""
    if names is None:
        names = sorted(set(rows["train"].labels), key=lambda v: (str(type(v)), v))
    index = {name: i for i, name in enumerate(names)}
    out = {}
    for split, r in rows.items():
        unknown = sorted({str(v) for v in r.labels if v not in index})
        if unknown:
            raise UserError(
                f"{split} split has label(s) {unknown[:5]} that are not among the classes {names[:20]}; "
                f"every label must also occur in train"
            )
        out[split] = [index[v] for v in r.labels]
    return out, names


def build_text_task(
    name: str, rows: dict[str, TextRows], cfg: TextTaskConfig, label_names: list[Any] | None, info: dict
) -> TaskData:
    """Tokenise completed splits into a TaskData (tokenizer trained on train texts).

    label_names None: a local `text` task (classes from the training labels, missing splits carved
    from train); else a hub task (a test split without labels is replaced by validation).
    """
    refuse_bad_rows(name, info.get("data_problems", {}), cfg)
    rows, notes = complete_splits(rows, cfg, validation_as_test=label_names is not None)
    labels, names = label_ids(rows, label_names)
    if len(names) < 2:
        raise UserError(f"task {name!r}: the training labels hold only {names}; a classification task needs 2+ classes")
    train = rows["train"]
    encoder = build_encoder(cfg.tokenizer, train.texts + (train.pairs or []), cfg.vocab_size, cfg.cache_dir)
    splits = {s: encoder.encode(rows[s].texts, labels[s], cfg.max_length, rows[s].pairs) for s in SPLITS}
    pair = train.pairs is not None
    info = {
        **info,
        "label_names": names,
        "carved": notes,
        "tokenizer": encoder.description,
        "splits": {
            s: {"size": len(sp), "class_counts": np.bincount(sp.labels.numpy(), minlength=len(names)).tolist()}
            for s, sp in splits.items()
        },
    }
    return TaskData(
        name,
        splits,
        num_classes=len(names),
        vocab_size=encoder.vocab_size,
        max_length=cfg.max_length,
        pad_id=encoder.pad_id,
        pair=pair,
        info=info,
        special_ids=encoder.special_ids,
        texts={
            s: rows[s].texts if rows[s].pairs is None else [f"{a}\n{b}" for a, b in zip(rows[s].texts, rows[s].pairs)]
            for s in SPLITS
        },
    )


def _hub_task(name: str) -> Callable[[TextTaskConfig], TaskData]:
    """The loader of the hub data set `name` (local files in its layout first)."""
    spec = HUB_DATASETS[name]

    def load(cfg: TextTaskConfig) -> TaskData:
        rows, info = load_hub_rows(spec, cfg)
        info["columns"] = {"text": list(spec.text_columns), "label": spec.label_column}
        return build_text_task(spec.name, rows, cfg, list(range(spec.num_classes)), info)

    load.__name__ = name
    return load


def _hub_config(name: str) -> type:
    """The options dataclass of hub data set `name` (HubTaskConfig with its `dataset` set)."""
    return dataclasses.make_dataclass(
        f"HubTaskConfig_{name}",
        [],
        bases=(HubTaskConfig,),
        namespace={"dataset": name, "__doc__": HubTaskConfig.__doc__},
    )


register_task(
    "sst2",
    config=_hub_config("sst2"),
    description="SST-2 sentence sentiment (2 classes); hub glue/sst2 or local sst2/*.jsonl",
)(_hub_task("sst2"))
register_task(
    "rotten_tomatoes",
    config=_hub_config("rotten_tomatoes"),
    description="Rotten Tomatoes review-sentence sentiment (2 classes); hub or local rotten_tomatoes/*.jsonl",
)(_hub_task("rotten_tomatoes"))
register_task(
    "qqp",
    config=_hub_config("qqp"),
    description="Quora Question Pairs duplicate detection (sentence pairs, 2 classes); hub glue/qqp "
    "or local qqp/*.jsonl",
)(_hub_task("qqp"))


def _resolve(path: str, cfg: TextFilesConfig) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.is_absolute() and cfg.data_dir:
        candidate = Path(cfg.data_dir).expanduser() / candidate
    if not candidate.is_file():
        raise UserError(
            f"text task: file {str(candidate.absolute())!r} does not exist; fix the path in files "
            f"(relative paths are taken from data_dir, else the suite file's folder)"
        )
    return candidate


def _format(path: Path, chosen: str) -> str:
    if chosen != "auto":
        return chosen
    by_suffix = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
    found = by_suffix.get(path.suffix.lower())
    if found is None:
        raise UserError(
            f"text task: cannot tell the format of {str(path)!r} from its suffix; "
            f"set format to csv, tsv, json or parquet"
        )
    return found


@register_task("text", config=TextFilesConfig)
def text_files(cfg: TextFilesConfig) -> TaskData:
    """Your own text classification files (csv/tsv/jsonl/parquet), single texts or pairs, any classes."""
    rows, problems = {}, {}
    for split, given in cfg.files.items():
        path = _resolve(str(given), cfg)
        rows[split], problems[split] = dataset_rows(
            read_text_file(path, split, cfg), cfg.text_columns, cfg.label_column, f"text task file {str(path)!r}"
        )
    rows = normalise_labels(rows)
    info = {
        "source": "local files",
        "files": {s: str(_resolve(str(p), cfg)) for s, p in cfg.files.items()},
        "columns": {"text": list(cfg.text_columns), "label": cfg.label_column},
        "data_problems": problems,
    }
    return build_text_task("text", rows, cfg, None, info)


def read_text_file(path: Path, split: str, cfg: TextFilesConfig) -> Any:
    """One split's file of the `text` task as a `datasets.Dataset` (read_data_file, in the task's format and
    encoding)."""
    fmt = _format(path, cfg.format)
    if fmt != "parquet":
        check_encoding(path, cfg.encoding)
    return read_data_file(path, fmt, split, "text task file", cfg.encoding)


def read_data_file(path: Path, fmt: str, split: str, what: str, encoding: str = "utf-8") -> Any:
    """One split's data file (csv, tsv, json lines or array, parquet) as a `datasets.Dataset`, for every task that
    reads one; a file that cannot be read is a UserError naming `what` and the file, the line where the reader or
    a look at the file can tell it, and the fix."""
    extra: dict[str, Any] = {"delimiter": "\t"} if fmt == "tsv" else {}
    if fmt != "parquet":
        extra["encoding"] = encoding
    try:
        with quiet_datasets() as datasets:
            return datasets.load_dataset("csv" if fmt == "tsv" else fmt, data_files={split: str(path)}, **extra)[split]
    except Exception as err:  # datasets wraps the reader's error (pandas, pyarrow) in DatasetGenerationError
        line = bad_json_line(path, encoding) if fmt == "json" else None
        if line is not None:
            raise UserError(f"{what} {str(path)!r}: {line}; fix or remove that line") from None
        cause = err
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise UserError(
            f"{what} {str(path)!r}: cannot be read as {fmt} ({type(cause).__name__}: {text}); check the file, or "
            f"its format (csv, tsv, json, parquet) and encoding"
        ) from None


def bad_json_line(path: Path, encoding: str) -> str | None:
    """Where a JSON file first fails to parse ('line N is not ...'), read as JSON lines (one object a line) or,
    where it opens with '[', as one document; None when it parses (the reader failed for another reason)."""
    import json

    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return f"line {line} is not {encoding} ({err.reason})"
    lines = text.split("\n")
    documents = [(1, text)] if text.lstrip().startswith("[") else enumerate(lines, 1)
    for first, document in documents:
        if not document.strip():
            continue
        try:
            json.loads(document)
        except json.JSONDecodeError as err:
            at = first + err.lineno - 1
            return f"line {at} is not JSON ({err.msg}, column {err.colno}): {lines[at - 1][:60]!r}"
    return None


def normalise_labels(rows: dict[str, TextRows]) -> dict[str, TextRows]:
    """One rule for the labels of every split: all integers (1, '1', 1.0) become ints, all names become stripped
    strings; a mix of the two (0/1 beside 'pos'/'neg') is a UserError naming both kinds and where they are."""

    def as_int(label: Any) -> int | None:
        if isinstance(label, bool):
            return None
        if isinstance(label, int):
            return label
        if isinstance(label, float) and label.is_integer():
            return int(label)
        text = str(label).strip()
        return int(text) if text.lstrip("+-").isdigit() else None

    numbers = {split: sorted({str(v) for v in r.labels if as_int(v) is not None}) for split, r in rows.items()}
    names = {split: sorted({str(v).strip() for v in r.labels if as_int(v) is None}) for split, r in rows.items()}
    if any(numbers.values()) and any(names.values()):
        where_numbers = next(s for s, v in numbers.items() if v)
        where_names = next(s for s, v in names.items() if v)
        raise UserError(
            f"text task: the labels mix numbers ({', '.join(numbers[where_numbers][:5])} in "
            f"{where_numbers}) with names ({', '.join(repr(n) for n in names[where_names][:5])} in "
            f"{where_names}); use one kind of label in every split"
        )
    convert = (lambda v: as_int(v)) if any(numbers.values()) else (lambda v: str(v).strip())
    return {split: TextRows(r.texts, r.pairs, [convert(v) for v in r.labels]) for split, r in rows.items()}
