"""Test-session settings: offline Hugging Face, one torch thread per test (pytest -n 2 on 2 cores)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from processes import Children  # noqa: E402


@pytest.fixture
def children():
    """Start child processes with `children.start(args, ...)`: each is killed with its process group when the
    test ends, pass or fail."""
    started = Children()
    yield started
    started.end_all()


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one intra-op thread is faster, and two xdist workers then fit two cores;
    restored after each test, so a test that fixes its own thread count cannot leak it."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    """One tokenizer cache per test session (per worker), shared by the modules that train on real data."""
    path = tmp_path_factory.getbasetemp() / "attnbench-cache"
    path.mkdir(exist_ok=True)
    return str(path)
