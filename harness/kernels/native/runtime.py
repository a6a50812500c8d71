"""The loaded library and its switch: `library()` builds and loads it on first use (None where unavailable,
`status()` says why), `turned_off()` makes every attention take its PyTorch path, `takes` / `supports` say whether
a call can run natively, and `call` runs an entry point after its checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from attnbench.cache import set_aside
from attnbench.kernels.native.abi import ABI, KINDS, VALUE_WIDTHS, declare
from attnbench.kernels.native.spec import NativeSpec
from attnbench.kernels.native.toolchain import FLAGS, build, compiler

_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None
_REASON: str | None = None  # why the native kernels are off, once tried
_OFF = False  # within `turned_off`
_ASKED = 0  # calls of `library()`: an attention that never asks has no native path (`times_asked`)


def library() -> ctypes.CDLL | None:
    """The compiled kernels, building them on first use; None (with `status()` saying why) where unavailable."""
    global _LIB, _REASON, _ASKED
    _ASKED += 1
    if _OFF:
        return None
    if _LIB is not None or _REASON is not None:
        return _LIB
    with _LOCK:
        if _LIB is not None or _REASON is not None:
            return _LIB
        if os.environ.get("ATTNBENCH_NATIVE", "1") == "0":
            _REASON = "disabled by ATTNBENCH_NATIVE=0"
            return None
        cxx = compiler()
        if cxx is None:
            _REASON = "no C++ compiler found (set CXX)"
            return None
        try:
            try:
                lib = ctypes.CDLL(str(build(cxx)))
            except OSError:  # a cached library that does not load (written by another machine's compiler): once more
                set_aside(build(cxx))
                lib = ctypes.CDLL(str(build(cxx)))
            declare(lib)
            if lib.attnbench_abi() != ABI:
                raise RuntimeError(f"ABI {lib.attnbench_abi()} != {ABI}")
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            _REASON = f"build failed: {error}"
            return None
        _LIB = lib
        return _LIB


@contextlib.contextmanager
def turned_off(off: bool = True) -> Iterator[None]:
    """Within (when `off`): `library()` answers None, so every attention takes its PyTorch path, as with
    ATTNBENCH_NATIVE=0; for comparing the two paths in one process."""
    global _OFF
    before, _OFF = _OFF, _OFF or off
    try:
        yield
    finally:
        _OFF = before


def times_asked() -> int:
    """How often anything asked for the kernels (`library()`) in this process; `attnbench check` compares it
    around a call to learn whether an attention has a native path at all."""
    return _ASKED


def status() -> str:
    """'on (...)' or 'off: reason': recorded with efficiency results."""
    lib = library()
    if lib is None:
        return f"off: {'turned off (native.turned_off)' if _OFF else _REASON}"
    return f"on ({compiler()} {' '.join(FLAGS[:2])}, thread pool)"


def takes(*tensors: Tensor, value_width: int) -> bool:
    """Whether the kernels can run on these tensors at all: float32 on CPU, a value width they are built for, and
    the library built."""
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return False
    return value_width in VALUE_WIDTHS and library() is not None


def supports(spec: NativeSpec | None, q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the fused kernel can run this call (else the PyTorch path does)."""
    if spec is None or spec.kind not in KINDS:
        return False
    d, w = q.shape[-1], spec.weights
    if w is None:
        if spec.kind != "elu" or d % 16:
            return False
    elif w.shape[-1] % 16 or w.shape[-2] != d or not w.is_contiguous():
        return False
    if spec.kind == "cos2" and (
        spec.phase is None or not spec.phase.is_contiguous() or tuple(spec.phase.shape) != (w.shape[0], w.shape[-1])
    ):
        return False
    return takes(q, k, v, *([] if w is None else [w]), value_width=v.shape[-1])


def real_rows(key_padding_mask: Tensor | None) -> Tensor | None:
    """A (B, N) mask of real tokens as the kernels read it (uint8, contiguous), or None."""
    return None if key_padding_mask is None else key_padding_mask.to(torch.uint8).contiguous()


def ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def call(name: str, *args: Any) -> None:
    """The kernel `name` on args; a nonzero return (a width it is not built for) raises."""
    code = getattr(library(), name)(*args)
    if code != 0:
        raise RuntimeError(f"{name} returned {code}")


def pointers(tensors: list[Tensor | None]) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*(ptr(t) for t in tensors))
