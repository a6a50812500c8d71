"""Provenance: the git commit, inside a checkout and in a copied tree without .git."""

import subprocess

from attnbench import provenance


def test_commit_inside_the_checkout_matches_git():
    provenance.git_state.cache_clear()
    expected = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        cwd=provenance.Path(provenance.attnbench.__file__).parents[1],
    ).stdout.strip()
    commit, dirty = provenance.git_state()
    assert commit == expected and isinstance(dirty, bool)
    provenance.git_state.cache_clear()


def test_without_git_the_commit_comes_from_the_environment(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    monkeypatch.setenv("ATTNBENCH_GIT_COMMIT", "1e0f5f2")
    provenance.git_state.cache_clear()
    try:
        assert provenance.git_state() == ("1e0f5f2", None)
        monkeypatch.delenv("ATTNBENCH_GIT_COMMIT")
        provenance.git_state.cache_clear()
        assert provenance.git_state() == (None, None)
    finally:
        provenance.git_state.cache_clear()


def test_provenance_says_whether_the_fused_kernels_ran(monkeypatch):
    from attnbench.kernels import native

    assert provenance.machine_provenance("cpu")["native_kernels"] == native.status()
    monkeypatch.setattr(native.runtime, "_LIB", None)
    monkeypatch.setattr(native.runtime, "_REASON", "disabled by ATTNBENCH_NATIVE=0")
    assert provenance.machine_provenance("cpu")["native_kernels"] == "off: disabled by ATTNBENCH_NATIVE=0"
