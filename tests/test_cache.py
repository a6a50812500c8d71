"""The cache (attnbench.cache): one root, entries written atomically with a digest, a bad entry rebuilt, never fatal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.cache import cache_root, store_entry, verified_entry
from attnbench.kernels import native
from attnbench.tasks.tokenizer import SPECIAL_TOKENS, cached_wordpiece

TEXTS = [f"a short film review number {i} that was good or bad" for i in range(50)]


def test_one_root_from_the_option_else_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env" and cache_root(str(tmp_path / "opt")) == tmp_path / "opt"
    assert native.toolchain.cache_dir() == tmp_path / "env" / "native"  # the kernels share the root
    monkeypatch.delenv("ATTNBENCH_CACHE")
    assert cache_root() == Path.home() / ".cache" / "attnbench"


def test_an_entry_whose_bytes_differ_from_its_digest_is_set_aside_not_trusted(tmp_path):
    entry = tmp_path / "e.json"
    store_entry(entry, b"{}")
    assert verified_entry(entry)
    entry.write_bytes(b"{")  # altered after it was written
    assert not verified_entry(entry)
    assert not entry.exists() and len(list(tmp_path.glob("e.json.bad-*"))) == 1  # kept aside, never deleted


@pytest.mark.parametrize("bad", [b"", b'{"version": "1.0", "trunc'], ids=["empty", "truncated"])
def test_a_bad_tokenizer_cache_entry_is_rebuilt_and_the_cell_goes_on(tmp_path, bad):
    tok, path, trained = cached_wordpiece(TEXTS, 120, str(tmp_path))
    assert trained
    path.write_bytes(bad)  # e.g. a disk that filled while another process wrote it
    again, path_again, trained_again = cached_wordpiece(TEXTS, 120, str(tmp_path))
    assert path_again == path and trained_again  # rebuilt, not "EOF while parsing"
    assert again.get_vocab_size() == tok.get_vocab_size()
    assert [again.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    _, _, third = cached_wordpiece(TEXTS, 120, str(tmp_path))
    assert not third  # the rebuilt entry is trusted again


def test_a_tokenizer_entry_written_before_digests_is_kept(tmp_path):
    _, path, _ = cached_wordpiece(TEXTS, 120, str(tmp_path))
    path.with_name(path.name + ".sha256").unlink()
    _, _, trained = cached_wordpiece(TEXTS, 120, str(tmp_path))
    assert not trained and path.with_name(path.name + ".sha256").is_file()


@pytest.mark.skipif(native.library() is None, reason=f"native kernels {native.status()}")
def test_an_empty_cached_kernel_library_is_rebuilt_not_turned_off_for_good(tmp_path):
    compiler = native.toolchain.compiler()
    built = native.toolchain.build(compiler)
    cached = tmp_path / "native" / built.name
    cached.parent.mkdir()
    cached.write_bytes(b"")
    # The rebuild goes through the real build step; its compiler hands back the library this session already
    # compiled from the same source and flags (the compile itself is what every native test exercises), so the
    # test costs no minute-long compile. Its --version is the real one, so the cache key is the same.
    fake = tmp_path / "fake-cxx"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) exec {shutil.which(compiler)} --version;; esac\n'
        'while [ "$1" != "-o" ]; do shift; done\n'
        f'cp {built} "$2"\n'
    )
    fake.chmod(0o755)
    code = "from attnbench.kernels import native; print(native.status())"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ATTNBENCH_CACHE": str(tmp_path), "CXX": str(fake)},
    )
    assert result.stdout.startswith("on ("), result.stdout
    assert cached.stat().st_size > 0 and list(cached.parent.glob(f"{built.name}.bad-*"))
