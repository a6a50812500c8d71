"""fla-core's reference code as a test oracle: `fla/ops/<op>/naive.py` loaded by file path, run in float64.

fla-core (PyPI, MIT; pinned in the dev extra) ships a naive PyTorch form beside each Triton kernel. Its
packages' `__init__` import Triton, so the file is loaded on its own (`importlib.util.spec_from_file_location`);
it imports only torch and einops. Several naive files cast their inputs to float32 (`.float()`, `.to(torch.float32)`);
`in_float64` runs them with those casts keeping float64, so that a comparison measures the difference of the two
computations, not float32 rounding.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

FLA_CORE = "fla-core"


def fla_version() -> str:
    """The installed fla-core version (skips the test where it is not installed)."""
    try:
        return importlib.metadata.version(FLA_CORE)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("fla-core is not installed (pip install -e '.[dev]')")


def naive_path(op: str) -> Path:
    """fla/ops/<op>/naive.py of the installed fla-core, found without importing fla."""
    fla_version()
    files = importlib.metadata.files(FLA_CORE) or []
    wanted = f"fla/ops/{op}/naive.py"
    for file in files:
        if file.as_posix() == wanted:
            return Path(file.locate())
    raise FileNotFoundError(f"fla-core {fla_version()} has no {wanted}")


@functools.cache
def load_naive(op: str) -> ModuleType:
    """The module fla/ops/<op>/naive.py, loaded by file path."""
    path = naive_path(op)
    spec = importlib.util.spec_from_file_location(f"fla_naive_{op.replace('/', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oracle_name(op: str) -> str:
    """'fla-core 0.6.0 fla/ops/<op>/naive.py', for test ids and messages."""
    return f"{FLA_CORE} {fla_version()} fla/ops/{op}/naive.py"


class _KeepsFloat64(torch.Tensor):
    """A tensor whose casts to float32 (`.float()`, `.to(torch.float32)`, `dtype=torch.float32`) keep float64 (every
    other operation as usual, the result of the same kind)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.float:
            return args[0]
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        kwargs = {name: torch.float64 if a is torch.float32 else a for name, a in (kwargs or {}).items()}
        return super().__torch_function__(func, types, args, kwargs)


def in_float64(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) with every tensor argument float64 and its `.float()` casts kept at float64; tensors
    come back as plain tensors (a tuple of them where fn returns one)."""

    def wrap(x: Any) -> Any:
        return x.double().as_subclass(_KeepsFloat64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def unwrap(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(unwrap(y) for y in x)
        return x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x

    out = fn(*(wrap(a) for a in args), **{name: wrap(a) for name, a in kwargs.items()})
    result = unwrap(out)
    for t in result if isinstance(result, tuple) else (result,):
        assert not isinstance(t, torch.Tensor) or t.dtype == torch.float64, f"the oracle returned {t.dtype}"
    return result
