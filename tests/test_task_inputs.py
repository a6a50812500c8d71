"""Every input a task reads is declared (`TaskConfig.inputs`) and so part of its cells' identity.

The list of tasks comes from the registry: each one is loaded, with a data folder of small copies of the shared
files, while an audit hook records every file it opens. Each file it reads that is not code, a cache or the
system's must be one its config declares: a new task that reads a file and forgets to say so fails here.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import datasets
import pytest

from attnbench.suite import load_suite
from attnbench.tasks import TASKS, load_task, task_names
from attnbench.tasks.byte_lm import default_corpus

SPLIT_ROWS = {"train": 120, "validation": 30, "test": 30}
FILES = {split: f"rotten_tomatoes/{split}.jsonl" for split in SPLIT_ROWS}
SMALL = {"num_train": 64, "num_validation": 16, "num_test": 16}
# options that make each task read what it can read, at a small size; a task not named here loads with its
# defaults, which must then work offline in seconds (or the task is added here)
READING = {
    "byte_text": {"files": FILES, "max_length": 32},
    "byte_retrieval": {"files": FILES, "layout": "corpus", "max_length": 32},
    "text": {"files": FILES, "data_dir": "DATA", "max_length": 16, "vocab_size": 200},
    "rotten_tomatoes": {"max_length": 16, "vocab_size": 200},
    "sst2": {"max_length": 16, "vocab_size": 200},
    "qqp": {"max_length": 16, "vocab_size": 200},
    "listops": SMALL,
    "mqar": SMALL,
    "nonlinear_tokens": SMALL,
    "associative_recall": SMALL,
    "pathfinder": SMALL,
}
SYSTEM = ("/proc/", "/sys/", "/dev/", "/etc/")


def _small_copy(source: Path, target: Path, rows: int, pairs: bool = False, column: str = "text") -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source) as f, open(target, "w") as out:
        for _, line in zip(range(rows), f, strict=False):
            row = json.loads(line)
            text = row.get("text", row.get("sentence"))
            if pairs:
                row = {"question1": text, "question2": text[::-1], "label": row["label"]}
            elif column != "text":
                row = {column: text, "label": row["label"]}
            out.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data folder in the shared layout: rotten_tomatoes, sst2 and qqp (pairs made from reviews)."""
    root = tmp_path_factory.mktemp("data")
    shared = Path(os.environ.get("ATTNBENCH_DATA_DIR", "/work/shared/data"))
    if not (shared / "rotten_tomatoes" / "train.jsonl").is_file():
        pytest.skip("the shared Rotten Tomatoes files are not in $ATTNBENCH_DATA_DIR")
    for split, rows in SPLIT_ROWS.items():
        source = shared / "rotten_tomatoes" / f"{split}.jsonl"
        _small_copy(source, root / "rotten_tomatoes" / f"{split}.jsonl", rows)
        _small_copy(source, root / "sst2" / f"{split}.jsonl", rows, column="sentence")
        _small_copy(source, root / "qqp" / f"{split}.jsonl", rows, pairs=True)
    return root


def _opened_while(action) -> set[Path]:
    """Files (not folders) opened while `action` runs: every `open` audit event, whatever opens it."""
    opened: list[str] = []
    recording = [True]

    def hook(event, args):
        if recording[0] and event == "open" and isinstance(args[0], (str, os.PathLike)):
            opened.append(os.fspath(args[0]))

    sys.addaudithook(hook)  # hooks cannot be removed: this one stops recording instead
    try:
        action()
    finally:
        recording[0] = False
    return {Path(p).resolve() for p in opened if Path(p).is_file()}


def _not_data(path: Path, caches: list[Path]) -> bool:
    """Code (imports, packages' metadata), the caches the test points at, the system's files."""
    text = str(path)
    return (
        path.suffix in (".py", ".pyc", ".so")
        or any(part == "__pycache__" or part.endswith((".dist-info", ".egg-info")) for part in path.parts)
        or text.startswith(SYSTEM)
        or any(path.is_relative_to(c) for c in caches)
    )


@pytest.mark.parametrize("name", [n for n in task_names() if not n.startswith("test-")])
def test_every_file_a_task_reads_is_declared(name, data_dir, tmp_path, monkeypatch):
    caches = [tmp_path / "hf", tmp_path / "attnbench"]
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(data_dir))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", caches[0])  # fresh: the files are read, not a copy
    monkeypatch.setenv("ATTNBENCH_CACHE", str(caches[1]))
    options = {k: str(data_dir) if v == "DATA" else v for k, v in READING.get(name, {}).items()}
    cfg = TASKS.make_config(name, **options)
    declared = {p.resolve() for p in cfg.inputs().values() if isinstance(p, Path)}
    read = _opened_while(lambda: load_task(name, **options))
    undeclared = sorted(str(p) for p in read - declared if not _not_data(p, caches))
    assert not undeclared, f"task {name!r} reads files its config's inputs() does not declare: {undeclared}"
    missing = sorted(str(p) for p in declared - read)
    assert not missing, f"task {name!r} declares inputs it did not read: {missing}"


def _suite(tmp_path: Path, task: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "name: inputs\ndescription: d\nattentions: [softmax]\nseeds: [0]\nmeasurements: [accuracy]\n"
        f"tasks:\n  - {task}\n"
    )
    return path


def test_an_edited_corpus_or_another_data_folder_makes_new_cells(tmp_path, data_dir, monkeypatch):
    """byte_lm's local corpus edited in place, and byte_text read from another data folder, move the cell ids."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text " * 200)
    suite = _suite(tmp_path, "{name: byte_lm, options: {path: corpus.txt, block_size: 16}}")
    [before] = load_suite(str(suite)).cells()
    assert before.inputs == {"path": f"sha256:{hashlib.sha256(corpus.read_bytes()).hexdigest()}"}
    corpus.write_text("other text " * 200)
    [after] = load_suite(str(suite)).cells()
    assert after.id != before.id

    suite = _suite(tmp_path, f"{{name: byte_text, options: {{files: {json.dumps(FILES)}}}}}")
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(data_dir))
    [here] = load_suite(str(suite)).cells()
    other = tmp_path / "other"
    for split in SPLIT_ROWS:
        _small_copy(data_dir / FILES[split], other / FILES[split], 10)
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", str(other))
    [there] = load_suite(str(suite)).cells()
    assert here.id != there.id and set(here.inputs) == {"files.train", "files.validation", "files.test"}


def test_the_default_corpus_is_declared_by_its_bytes():
    """pydoc_data's topics change with the Python version: their digest is part of the cell, as a preset's is."""
    declared = TASKS.make_config("byte_lm").inputs()
    assert declared == {"corpus": f"sha256:{hashlib.sha256(default_corpus()).hexdigest()}"}
    assert TASKS.make_config("byte_lm", corpus="pydoc").inputs() == declared


def test_a_task_declaring_under_an_old_name_is_refused():
    """Inputs declared under a name `task_inputs` does not read would be left out of the cell's identity."""
    import dataclasses

    from attnbench.tasks import TaskConfig

    with pytest.raises(TypeError, match="declare what a task reads in inputs"):

        @dataclasses.dataclass
        class Stale(TaskConfig):
            def input_digests(self) -> dict:
                return {}
