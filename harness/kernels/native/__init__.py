"""Fused CPU kernels for non-causal linear attention, forward and backward, compiled on first use.

`fused_linear.cpp` computes, for a range of rows of every (batch, head), the features of a block of rows in
registers and caches (projection, favor's exp, elu + 1, sin/cos) and at once either accumulates the key sums
phi^T [v, 1] or writes phi S / phi s for the queries: one pass over q, k and v where the PyTorch rendering
makes five to seven passes over the (N, M) features. A whole attention is one call each way: `attention` (key
sums, the state finished with the map's scale and offset, the query rows) and, for training, the autograd
Function `Attention`, whose backward runs the query pass's, the finished state's and the key pass's gradients
in one call as well (at 1024 tokens the dozen small torch operations between two calls had taken a fifth of
Performer's forward). Nystromformer's passes are the same kernels: `softmax_columns` and `write_queries` in
inference, the Functions `LandmarkValues` and `LandmarkQueries` in training, with `PinvSteps` for the
pseudo-inverse and `sequence_conv` (and its gradients) for the skip over V.

It is plain C++ with GCC vector extensions and no PyTorch headers, built by the system compiler (`$CXX`,
else g++ or c++) with -O3 -march=native in about a second, cached under `$ATTNBENCH_CACHE/native` (default
~/.cache/attnbench; attnbench.cache) by a hash of the source, the compiler and the CPU, and called through ctypes (which
releases the GIL, so the kernel's threads run in parallel).

Threads: the kernels' parallel passes run on a pool of their own (`Pool` in the source), whose calling thread
claims units of work from a shared counter beside the helpers and waits only for units already running, never for
a helper the scheduler has not yet given a core: with other jobs sharing the cores, the OpenMP team barrier they had
used waited a time slice of those jobs for such a thread (30-100 ms for a call of 0.05-1 ms).

Without a compiler, on other devices or dtypes, with gradients through the projection (RFA's learned scale,
Coulomb particles in phase A), or with ATTNBENCH_NATIVE=0, the PyTorch path runs instead; `status()` says
which, and runs record it in their provenance. Both paths compute the same function (tests compare them to
rounding).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnbench.cache import cache_root, seal_entry, set_aside, verified_entry

SOURCE = Path(__file__).with_name("fused_linear.cpp")
# The one table of the feature kinds the kernels know: the Python name a NativeSpec carries -> the C++ enumerator.
# A kind's id is its position; the C++ enum Kind and attnbench_abi() are generated from this table and ABI as
# compiler definitions (ATTNBENCH_KIND_ENUM, ATTNBENCH_ABI), so the two languages cannot drift.
KIND_TABLE = (
    ("favor", "FAVOR"),
    ("elu", "ELU"),
    ("trig", "TRIG"),
    ("softmaxfeat", "SOFTMAX"),
    ("elu-paper", "PELU"),
    ("softplus", "SOFTPLUS"),
    ("sigmoid2", "SIGMOID2"),
    ("cos2", "COS2"),
)
KINDS = {name: index for index, (name, _) in enumerate(KIND_TABLE)}
PAPER_KINDS = ("softmaxfeat", "elu-paper", "softplus", "sigmoid2", "cos2")  # keys l1-renormalised to sqrt(M)
VALUE_WIDTHS = (16, 32, 64, 128)
ABI = 23


def generated_definitions() -> tuple[str, ...]:
    """The compiler definitions that give the C++ source its kind ids and ABI version, from KIND_TABLE and ABI."""
    enum = ",".join(f"{cpp}={index}" for index, (_, cpp) in enumerate(KIND_TABLE))
    return (f"-DATTNBENCH_KIND_ENUM={enum}", f"-DATTNBENCH_ABI={ABI}")


FLAGS = (
    "-O3",
    "-march=native",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-pthread",
    "-ffp-contract=fast",
    *generated_definitions(),
)

_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None
_REASON: str | None = None  # why the native kernels are off, once tried
_OFF = False  # within `turned_off`
_ASKED = 0  # calls of `library()`: an attention that never asks has no native path (`times_asked`)


@dataclasses.dataclass
class NativeSpec:
    """What the fused kernel needs of a feature map: phi = scale * (f(x' w) * row weights + offset).

    kind: "favor" (f = exp(u - max), key row weights exp(row max - norm_coef |x|^2 - L)), "elu" (elu + 1),
    "trig" ([sin, cos], 2M features), or one of the paper's renormalised maps (PAPER_KINDS, feature_maps' paper
    form): "softmaxfeat" (exp(u - max)), "elu-paper" (max(elu(u + bias) + 1, floor)), "softplus" (softplus(u) +
    floor), "sigmoid2" (sigmoid(u)^2), "cos2" (cos(u + phase)^2), whose key row weights are sqrt(M) / max(sum f,
    floor) and whose queries keep f (their normaliser cancels in the attention's ratio). weights: (heads or 1, d, M)
    float32 contiguous, or None for no projection (M = d); unit_eps: normalise x to x / (|x| + unit_eps) first (RFA),
    None for no normalising; phase: cos2's (heads or 1, M), as many heads as weights.
    """

    kind: str
    weights: Tensor | None
    scale: float = 1.0
    offset: float = 0.0
    norm_coef: float = 0.0
    unit_eps: float | None = None
    floor: float = 0.0
    bias: float = 0.0
    phase: Tensor | None = None

    @property
    def num_features(self) -> int:
        m = self.weights.shape[-1] if self.weights is not None else -1
        return 2 * m if self.kind == "trig" else m


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _cpu_signature() -> str:
    """The CPU's model and flags (-march=native code is only valid on the CPU it was built for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [line for line in lines if line.startswith(("model name", "flags", "Features", "CPU part"))]
    return "\n".join(dict.fromkeys(keep))


def _cache_dir() -> Path:
    return cache_root() / "native"


def _build(compiler: str) -> Path:
    """The cached library, built on first use."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, " ".join(FLAGS), platform.machine(), _cpu_signature()]).encode()
    ).hexdigest()[:16]
    target = _cache_dir() / f"fused_linear-{key}.so"
    if verified_entry(target, lambda p: True):  # a bad entry (empty, altered) is set aside and built again
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # build aside, then one atomic rename
        built = Path(tmp) / target.name
        result = subprocess.run([compiler, *FLAGS, "-o", str(built), str(SOURCE)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} {' '.join(FLAGS)} failed: {result.stderr.strip()[-500:]}")
        os.replace(built, target)
    seal_entry(target)
    return target


def _declare(lib: ctypes.CDLL) -> None:
    """The ctypes signature (argument and return types) of every entry point of the library. Long: one declaration per
    kernel, in the source's order; the table is the content."""
    p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
    lib.attnbench_abi.restype = i32
    lib.attnbench_attention.restype = i32
    lib.attnbench_attention.argtypes = [
        i32,
        p,
        p,
        p,
        p,
        i64,
        i64,
        i64,
        i32,
        i32,
        i32,
        p,
        i64,
        f32,
        i32,
        f32,
        f32,
        f32,
        f32,
        i32,
        p,
        p,
        f32,
        f32,
        p,
        i32,
    ]
    lib.attnbench_attention_backward.restype = i32
    lib.attnbench_attention_backward.argtypes = [
        i32,
        p,
        p,
        p,
        p,
        i64,
        i64,
        i64,
        i32,
        i32,
        i32,
        p,
        i64,
        f32,
        f32,
        f32,
        f32,
        i32,
        p,
        p,
        p,
        p,
        p,
        p,
        f32,
        f32,
        p,
        i32,
        p,
    ]
    lib.attnbench_queries.restype = i32
    lib.attnbench_queries.argtypes = [
        i32,
        p,
        p,
        p,
        p,
        p,
        i64,
        i64,
        i32,
        i32,
        i32,
        p,
        i64,
        i32,
        f32,
        i32,
        f32,
        p,
        p,
        p,
        i32,
        i64,
    ]
    lib.attnbench_pinv.restype = i32
    lib.attnbench_pinv.argtypes = [p, i64, i32, i32, i32, p, p]
    lib.attnbench_pinv_backward.restype = i32
    lib.attnbench_pinv_backward.argtypes = [p, p, p, i64, i32, i32, i32, p, p]
    lib.attnbench_segment_means.restype = i32
    lib.attnbench_segment_means.argtypes = [p, p, i64, i64, i32, i64, i32, p, p]
    lib.attnbench_sequence_conv.restype = i32
    lib.attnbench_sequence_conv.argtypes = [p, p, i64, i64, i64, i32, i32, i32, p]
    lib.attnbench_sequence_conv_weight_grad.restype = i32
    lib.attnbench_sequence_conv_weight_grad.argtypes = [p, p, i64, i64, i32, i32, i32, p]
    lib.attnbench_landmark_values_backward.restype = i32
    lib.attnbench_landmark_values_backward.argtypes = [p, p, p, p, p, p, p, p, i64, i64, i64, i32, i32, i32, p, p, p]
    lib.attnbench_landmark_queries_backward.restype = i32
    lib.attnbench_landmark_queries_backward.argtypes = [p, p, p, p, p, p, i64, i64, i32, i32, i32, f32, p, p, p]
    lib.attnbench_exp.restype = None
    lib.attnbench_dropout.restype = i32
    lib.attnbench_dropout.argtypes = [p, i64, ctypes.c_uint32, f32, ctypes.c_uint64, i32, p]
    lib.attnbench_exp.argtypes = [p, i64, p]
    lib.attnbench_softmax_columns.restype = i32
    lib.attnbench_softmax_columns.argtypes = [p, p, p, i64, i64, i64, i32, i32, i32, p, i64, i32, p, p, p]


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
        compiler = _compiler()
        if compiler is None:
            _REASON = "no C++ compiler found (set CXX)"
            return None
        try:
            try:
                lib = ctypes.CDLL(str(_build(compiler)))
            except OSError:  # a cached library that does not load (written by another machine's compiler): once more
                set_aside(_build(compiler))
                lib = ctypes.CDLL(str(_build(compiler)))
            _declare(lib)
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
    return f"on ({_compiler()} {' '.join(FLAGS[:2])}, thread pool)"


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


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


# The boundary: the kernels read and write through raw pointers with the sizes they are given, so every call checks
# the tensors it passes (device, dtype, a dense row-major layout, exact shape) and the widths the kernels assume,
# raising ValueError before anything runs: no Python call can make them read or write out of bounds.


class NativeShapeError(ValueError):
    """A call into the native kernels with a tensor or size they cannot take."""


def _expect(
    kernel: str,
    name: str,
    t: Tensor | None,
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    optional: bool = False,
) -> None:
    """Raise unless t is a contiguous CPU tensor of `dtype` and exactly `shape` (None allowed when `optional`)."""
    if t is None:
        if optional:
            return
        raise NativeShapeError(f"native.{kernel}: {name} is missing; it must be a {dtype} tensor of shape {shape}")
    if t.device.type != "cpu" or t.dtype != dtype or tuple(t.shape) != tuple(shape) or not t.is_contiguous():
        layout = "contiguous" if t.is_contiguous() else f"strides {t.stride()}"
        raise NativeShapeError(
            f"native.{kernel}: {name} must be a contiguous {dtype} CPU tensor of shape "
            f"{tuple(shape)}; got {tuple(t.shape)} {t.dtype} on {t.device} ({layout})"
        )


def _expect_size(
    kernel: str, what: str, value: int, *, multiple: int = 1, allowed: tuple[int, ...] = (), at_least: int = 1
) -> None:
    """Raise unless the size `value` is at least `at_least`, a multiple of `multiple` and (if given) in `allowed`."""
    if value < at_least or value % multiple or (allowed and value not in allowed):
        rule = f"one of {allowed}" if allowed else f"a multiple of {multiple}" if multiple > 1 else f">= {at_least}"
        raise NativeShapeError(f"native.{kernel}: {what} = {value} is not {rule}")


def _expect_projection(kernel: str, w: Tensor | None, d: int, heads: int, h: int) -> tuple[int, int]:
    """Check a projection (heads_w, d, m) whose head bh reads w[bh % heads_w]: heads_w 1 (shared), h (per head) or
    heads (per batch row and head), m a multiple of 16 -> (m, heads_w); without one (m = d): (d, 1)."""
    if w is None:
        return d, 1
    if w.dim() != 3 or w.shape[0] not in (1, h, heads):
        raise NativeShapeError(
            f"native.{kernel}: the projection must be (1, {d}, M), ({h}, {d}, M) or ({heads}, {d}, "
            f"M) for {h} heads; got {tuple(w.shape)}: build the attention with num_heads={h}, "
            f"or num_heads=1 to share one head's parameters"
        )
    _expect(kernel, "the projection", w, (w.shape[0], d, w.shape[2]))
    _expect_size(kernel, "its feature count M", w.shape[2], multiple=16)
    return w.shape[2], w.shape[0]


def _expect_rows(kernel: str, q: Tensor, *others: tuple[str, Tensor, int | None]) -> tuple[int, int, int, int]:
    """Check q (B, H, N, d), d a multiple of 16, and each (name, tensor, width) as (B, H, N, width or d), widths
    among VALUE_WIDTHS -> (B, H, N, d)."""
    if q.dim() != 4:
        raise NativeShapeError(f"native.{kernel}: queries must be (B, H, N, d); got shape {tuple(q.shape)}")
    b, h, n, d = q.shape
    _expect(kernel, "q", q, (b, h, n, d))
    _expect_size(kernel, "the head width d", d, multiple=16)
    for name, t, width in others:
        if width is not None:
            _expect_size(kernel, f"the width of {name}", width, allowed=VALUE_WIDTHS)
        _expect(kernel, name, t, (b, h, n, d if width is None else width))
    return b, h, n, d


def _expect_threads(kernel: str, threads: int) -> None:
    _expect_size(kernel, "threads", threads)


def attention(
    spec: NativeSpec,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    real: Tensor | None,
    eps: float,
    threads: int = 1,
    saved: list[Tensor | None] | None = None,
    skip_queries: bool = False,
) -> Tensor:
    """The whole non-causal attention in one call: the key sums, the state finished with the map's scale and
    offset, the query rows; q, k (B, H, N, d), v (B, H, N, Dv) contiguous, `real` (B, N) uint8 or None
    -> (B, H, N, Dv). `saved`: `Attention`'s buffers for the backward (training), or None. Key rows past each
    sequence's last real key are skipped (they contribute nothing); with `skip_queries` query rows there too,
    their outputs written as 0, for callers that never read them (`kernels.linear.fused.padded_queries_unread`)."""
    b, h, n, d = _expect_call("attention", spec, q, k, v, real, threads)
    if saved is not None:
        _expect_saved("attention", spec, saved, b * h, n, d, v.shape[-1])
    w = spec.weights
    out = torch.empty(b, h, n, v.shape[-1])
    _call(
        "attnbench_attention",
        KINDS[spec.kind],
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        _ptr(real),
        b * h,
        h,
        n,
        d,
        v.shape[-1],
        w.shape[-1] if w is not None else d,
        _ptr(w),
        w.shape[0] if w is not None else 1,
        spec.norm_coef,
        int(spec.unit_eps is not None),
        spec.unit_eps or 0.0,
        spec.scale,
        spec.offset,
        eps,
        threads,
        out.data_ptr(),
        None if saved is None else _pointers(saved),
        spec.floor,
        spec.bias,
        _ptr(spec.phase),
        int(skip_queries),
    )
    return out


def _expect_call(
    kernel: str, spec: NativeSpec, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None, threads: int
) -> tuple[int, int, int, int]:
    """The checks of a whole-attention call: q, k (B, H, N, d), v (B, H, N, Dv), the map's kind and projection,
    `real` (B, N) uint8 or None, threads >= 1 -> (B, H, N, d)."""
    if spec.kind not in KINDS:
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} is not one of {sorted(KINDS)}")
    b, h, n, d = _expect_rows(kernel, q, ("k", k, None), ("v", v, v.shape[-1]))
    if spec.weights is None and spec.kind != "elu":
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    _expect_projection(kernel, spec.weights, d, b * h, h)
    if spec.kind in PAPER_KINDS and spec.weights is None:
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    if spec.kind == "cos2":
        _expect(kernel, "the cos2 phases", spec.phase, (spec.weights.shape[0], spec.weights.shape[-1]))
    _expect(kernel, "the key mask", real, (b, n), torch.uint8, optional=True)
    _expect_threads(kernel, threads)
    return b, h, n, d


def _expect_saved(
    kernel: str, spec: NativeSpec, saved: list[Tensor | None], heads: int, n: int, d: int, dv: int
) -> None:
    """`Attention`'s buffers in struct Saved's order: the state (heads, F, Dv), (heads, F), its offsets (heads, Dv),
    (heads,), favor's log max (heads,), then the kept features (heads, N, F) twice and the keys' row maxima
    (heads, N), those three all given or all None."""
    f = spec.num_features if spec.weights is not None else d
    if len(saved) != 8:
        raise NativeShapeError(f"native.{kernel}: saved must hold 8 buffers (struct Saved); got {len(saved)}")
    for name, t, shape in (
        ("s_kv", saved[0], (heads, f, dv)),
        ("s_ksum", saved[1], (heads, f)),
        ("off_kv", saved[2], (heads, dv)),
        ("off_den", saved[3], (heads,)),
    ):
        _expect(kernel, f"saved {name}", t, shape)
    _expect(kernel, "saved log_max", saved[4], (heads,), optional=spec.kind != "favor")
    kept = saved[5] is not None
    for name, t, shape in (
        ("phi_q", saved[5], (heads, n, f)),
        ("phi_k", saved[6], (heads, n, f)),
        ("row_max_k", saved[7], (heads, n)),
    ):
        if kept:
            _expect(kernel, f"saved {name}", t, shape)
        elif t is not None:
            raise NativeShapeError(f"native.{kernel}: saved {name} given without saved phi_q; give all three or none")


def _call(name: str, *args: Any) -> None:
    """The kernel `name` on args; a nonzero return (a width it is not built for) raises."""
    code = getattr(library(), name)(*args)
    if code != 0:
        raise RuntimeError(f"{name} returned {code}")


def _pointers(tensors: list[Tensor | None]) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*(_ptr(t) for t in tensors))


def write_queries(
    spec: NativeSpec,
    q: Tensor,
    kv: Tensor,
    ksum: Tensor,
    offsets: tuple[Tensor, Tensor] | None,
    eps: float,
    out: Tensor,
    conv: tuple[Tensor, Tensor] | None = None,
    threads: int = 1,
) -> None:
    """out = (phi_q kv + offset) / guard(phi_q ksum + offset, eps); kv (B*H, F, Dv), ksum
    (B*H, F, 1), offsets (B*H, 1, Dv) and (B*H, 1, 1) or None, all contiguous; out (B, H, N, Dv) contiguous.
    conv: (values (B, H, N, Dv), weight (H, K)), contiguous, whose centred depthwise convolution along the
    sequence is added (Nystromformer's skip), or None.
    Long: the shape checks of every argument, then the call with its 22 arguments in the C++ order."""
    kernel = "write_queries"
    if spec.kind not in ("favor", "elu", "trig"):  # attnbench_queries takes no paper map
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} is not one of favor, elu, trig")
    dv = out.shape[-1]
    b, h, n, d = _expect_rows(kernel, q, ("out", out, dv))
    w = spec.weights
    if w is None and spec.kind != "elu":
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    _expect_projection(kernel, w, d, b * h, h)
    f = spec.num_features if w is not None else d
    _expect(kernel, "kv", kv, (b * h, f, dv))
    _expect(kernel, "ksum", ksum, (b * h, f, 1))
    off_kv, off_den = (None, None) if offsets is None else (offsets[0].contiguous(), offsets[1].contiguous())
    _expect(kernel, "the value offset", off_kv, (b * h, 1, dv), optional=offsets is None)
    _expect(kernel, "the normaliser offset", off_den, (b * h, 1, 1), optional=offsets is None)
    conv_v, conv_w = (None, None) if conv is None else conv
    if conv is not None:
        _expect(kernel, "the convolved values", conv_v, (b, h, n, dv))
        if conv_w.dim() != 2 or conv_w.shape[0] != h:
            raise NativeShapeError(
                f"native.{kernel}: the convolution weight must be ({h}, K) for {h} heads; got "
                f"{tuple(conv_w.shape)}: build the attention with num_heads={h}"
            )
        _expect(kernel, "the convolution weight", conv_w, (h, conv_w.shape[1]))
    _expect_threads(kernel, threads)
    _call(
        "attnbench_queries",
        KINDS[spec.kind],
        q.data_ptr(),
        kv.data_ptr(),
        ksum.data_ptr(),
        _ptr(off_kv),
        _ptr(off_den),
        b * h,
        n,
        d,
        out.shape[-1],
        w.shape[-1] if w is not None else d,
        _ptr(w),
        w.shape[0] if w is not None else 1,
        int(spec.unit_eps is not None),
        spec.unit_eps or 0.0,
        threads,
        eps,
        out.data_ptr(),
        _ptr(conv_v),
        _ptr(conv_w),
        0 if conv_w is None else conv_w.shape[-1],
        h,
    )


def softmax_columns(k: Tensor, weights: Tensor, v: Tensor, real: Tensor | None, threads: int = 1) -> list[Tensor]:
    """Over the rows of k, v (B, H, N, .), contiguous float32, on `threads` threads: for each column l of u = k w
    (weights (B*H, d, L)), [sum_j e_jl v_j (B*H, L, Dv), sum_j e_jl (B*H, L, 1), max_l (B*H, L, 1)] with
    e_jl = exp(u_jl - max_l) and max_l the column's maximum over real rows (`real` (B, N) uint8 or None):
    softmax(w^T k^T) v = first / second."""
    b, h, n, d = _expect_rows("softmax_columns", k, ("v", v, v.shape[-1]))
    m, _ = _expect_projection("softmax_columns", weights, d, b * h, h)
    _expect("softmax_columns", "the key mask", real, (b, n), torch.uint8, optional=True)
    _expect_threads("softmax_columns", threads)
    dv = v.shape[-1]
    acc, total, top = torch.empty(b * h, m, dv), torch.empty(b * h, m, 1), torch.empty(b * h, m, 1)
    _call(
        "attnbench_softmax_columns",
        k.data_ptr(),
        v.data_ptr(),
        _ptr(real),
        b * h,
        h,
        n,
        d,
        dv,
        m,
        weights.data_ptr(),
        weights.shape[0],
        threads,
        acc.data_ptr(),
        total.data_ptr(),
        top.data_ptr(),
    )
    return [acc, total, top]


def segment_means(q: Tensor, k: Tensor, segments: int, threads: int = 1) -> tuple[Tensor, Tensor]:
    """Means of `segments` equal consecutive segments of q and k (B, H, N, d), contiguous float32, N a multiple of
    segments and d of 16 -> two (B, H, segments, d), in one pass on `threads` threads."""
    b, h, n, d = _expect_rows("segment_means", q, ("k", k, None))
    _expect_size("segment_means", "segments", segments)
    if n % segments:
        raise NativeShapeError(f"native.segment_means: {segments} segments do not divide the length {n}")
    _expect_threads("segment_means", threads)
    q_means, k_means = torch.empty(b, h, segments, d), torch.empty(b, h, segments, d)
    library().attnbench_segment_means(
        q.data_ptr(), k.data_ptr(), b * h, n, d, segments, threads, q_means.data_ptr(), k_means.data_ptr()
    )
    return q_means, k_means


def sequence_conv(v: Tensor, weight: Tensor, threads: int = 1) -> Tensor:
    """The depthwise convolution along the sequence, zero-padded and centred, as nn.Conv2d(H, H, (K, 1), groups=H):
    v (B, H, N, Dv) contiguous float32, Dv in VALUE_WIDTHS; weight (H, K) contiguous float32 -> (B, H, N, Dv)."""
    b, h, n, dv = _expect_conv("sequence_conv", v, weight.shape[-1] if weight.dim() == 2 else -1, threads)
    _expect("sequence_conv", "the weight", weight, (h, weight.shape[-1] if weight.dim() == 2 else -1))
    out = torch.empty_like(v)
    _call(
        "attnbench_sequence_conv",
        v.data_ptr(),
        weight.data_ptr(),
        b * h,
        h,
        n,
        dv,
        weight.shape[-1],
        threads,
        out.data_ptr(),
    )
    return out


def _expect_conv(kernel: str, v: Tensor, size: int, threads: int) -> tuple[int, int, int, int]:
    """v (B, H, N, Dv) contiguous float32, Dv in VALUE_WIDTHS, a kernel size >= 1, threads >= 1 -> v's shape."""
    if v.dim() != 4:
        raise NativeShapeError(f"native.{kernel}: values must be (B, H, N, Dv); got shape {tuple(v.shape)}")
    _expect_size(kernel, "the value width", v.shape[-1], allowed=VALUE_WIDTHS)
    _expect(kernel, "the values", v, tuple(v.shape))
    _expect_size(kernel, "the kernel size", size)
    _expect_threads(kernel, threads)
    return tuple(v.shape)


def sequence_conv_weight_grad(g: Tensor, v: Tensor, size: int, threads: int = 1) -> Tensor:
    """d/dweight of sum(g * sequence_conv(v, weight)) for weight (H, size): g, v (B, H, N, Dv) contiguous float32
    -> (H, size), each tap's sum over the rows in order, then over the batch."""
    b, h, n, dv = _expect_conv("sequence_conv_weight_grad", v, size, threads)
    _expect("sequence_conv_weight_grad", "the output gradient", g, (b, h, n, dv))
    dw = torch.empty(b, h, size)
    _call("attnbench_sequence_conv_weight_grad", g.data_ptr(), v.data_ptr(), b * h, n, dv, size, threads, dw.data_ptr())
    return dw.sum(dim=0)


def dropout(x: Tensor, threshold: int, scale: float, seed: int, threads: int = 1) -> Tensor:
    """The kernels' hashed dropout (attnbench.dropout) of a contiguous float32 CPU tensor: 0 where the draw of
    (seed, element index) lies below threshold (of 2^32), else x * scale."""
    _expect("dropout", "x", x, tuple(x.shape))
    out = torch.empty_like(x)
    _call("attnbench_dropout", x.data_ptr(), x.numel(), threshold, scale, seed, threads, out.data_ptr())
    return out


def exp(x: Tensor) -> Tensor:
    """The kernels' exp of a contiguous float32 tensor whose size is a multiple of 16 (for its accuracy test)."""
    _expect("exp", "x", x, tuple(x.shape))
    _expect_size("exp", "the element count", x.numel(), multiple=16, at_least=0)
    out = torch.empty_like(x)
    library().attnbench_exp(x.data_ptr(), x.numel(), out.data_ptr())
    return out


class PinvSteps(torch.autograd.Function):
    """(a, z0) -> the iterative pseudo-inverse's `iterations` steps from z0 (the start stays a torch operation,
    so its max-based scale takes autograd's gradient), a (..., L, L) float32 with L a multiple of 16; the backward
    goes through the steps in reverse from what the forward stored of each (its input and its three products:
    STEP_PARTS matrices, recomputed they had taken a fifth of the backward), only when a gradient is wanted."""

    STEP_PARTS = 5

    @staticmethod
    def forward(ctx, a: Tensor, z0: Tensor, iterations: int, threads: int):
        size = a.shape[-1]
        if a.dim() < 2 or a.shape[-2] != size:
            raise NativeShapeError(f"native.PinvSteps: a must be (..., L, L); got {tuple(a.shape)}")
        _expect_size("PinvSteps", "L", size, multiple=16)
        _expect_size("PinvSteps", "iterations", iterations)
        _expect_threads("PinvSteps", threads)
        heads = a.numel() // (size * size)
        a, z = a.contiguous(), z0.contiguous().clone()
        _expect("PinvSteps", "a", a, tuple(a.shape))
        _expect("PinvSteps", "z0", z, tuple(a.shape))
        store = torch.empty(heads, iterations, PinvSteps.STEP_PARTS, size, size) if any(ctx.needs_input_grad) else None
        library().attnbench_pinv(a.data_ptr(), heads, size, iterations, threads, z.data_ptr(), _ptr(store))
        ctx.save_for_backward(a, store)
        ctx.iterations, ctx.threads = iterations, threads
        return z

    @staticmethod
    def backward(ctx, g: Tensor):
        a, store = ctx.saved_tensors
        size = a.shape[-1]
        g = g.contiguous()
        _expect("PinvSteps.backward", "the output gradient", g, tuple(a.shape))
        da, dz0 = torch.empty_like(a), torch.empty_like(a)
        library().attnbench_pinv_backward(
            a.data_ptr(),
            store.data_ptr(),
            g.data_ptr(),
            a.numel() // (size * size),
            size,
            ctx.iterations,
            ctx.threads,
            da.data_ptr(),
            dz0.data_ptr(),
        )
        return da, dz0, None, None


# Nystromformer's landmark passes: `landmark_values` and `landmark_queries` in inference, the same in the forwards of
# the Functions `LandmarkValues` and `LandmarkQueries` in training

LANDMARK_EPS = 1e-6  # the query pass's guard (its sums are at least 1, so it never acts)


def _expect_landmarks(
    kernel: str, x: Tensor, land: Tensor, name: str, width: int | None = None, count: int | None = None
) -> None:
    """land (B, H, L, width or d) beside x (B, H, N, d): the same batch and heads, L (or `count`) a multiple of 16."""
    if x.dim() != 4 or land.dim() != 4:
        raise NativeShapeError(
            f"native.{kernel}: {name} and the rows must be 4-d (B, H, ., d); got "
            f"{tuple(land.shape)} and {tuple(x.shape)}"
        )
    b, h, _, d = x.shape
    size = land.shape[2] if count is None else count
    _expect_size(kernel, f"the number of landmarks in {name}", size, multiple=16)
    if tuple(land.shape) != (b, h, size, d if width is None else width):
        raise NativeShapeError(
            f"native.{kernel}: {name} must be ({b}, {h}, {size}, {d if width is None else width}) "
            f"beside rows {tuple(x.shape)}; got {tuple(land.shape)}"
        )


def _landmark_layout(land: Tensor) -> tuple[Tensor, Tensor]:
    """Landmarks (B, H, L, d) as the kernels take them: (B*H, L, d) and, as a projection, (B*H, d, L), contiguous."""
    b, h, size, d = land.shape
    rows = land.reshape(b * h, size, d).contiguous()
    return rows, rows.transpose(1, 2).contiguous()


def landmark_values(
    k: Tensor, v: Tensor, q_land: Tensor, real: Tensor | None, threads: int = 1
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """softmax(q_land k^T) v over the real keys by `softmax_columns` (no (L, N) matrix): k, v (B, H, N, d)
    contiguous float32, q_land (B, H, L, d) already scaled, `real` (B, N) uint8 or None (every sequence with a real
    key) -> the values (B*H, L, Dv), q_land laid out (`_landmark_layout`) and each column's max + log of its total
    (B*H, L), from which the backward recomputes the softmax weights."""
    _expect_landmarks("landmark_values", k, q_land, "q_land")
    wt, w = _landmark_layout(q_land)
    acc, total, top = softmax_columns(k, w, v, real, threads)
    return acc / total, wt, w, (top + total.log()).squeeze(-1)


def landmark_queries(
    q: Tensor, k_land: Tensor, mixed: Tensor, threads: int = 1, conv: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """softmax(q k_land^T) mixed by `write_queries` (the favor features of q with k_land as the projection, sums all
    ones), plus `conv`'s convolution where given: q (B, H, N, d) contiguous float32, k_land (B, H, L, d) already
    scaled, mixed (B, H, L, Dv) -> the output (B, H, N, Dv), k_land laid out (`_landmark_layout`) and mixed as
    (B*H, L, Dv)."""
    b, h, n, _ = q.shape
    _expect_landmarks("landmark_queries", q, k_land, "k_land")
    _expect_landmarks("landmark_queries", q, mixed, "mixed", width=mixed.shape[-1], count=k_land.shape[2])
    wt, w = _landmark_layout(k_land)
    kv = mixed.reshape(b * h, wt.shape[1], -1).contiguous()
    out = torch.empty(b, h, n, kv.shape[-1])
    write_queries(
        NativeSpec("favor", w), q, kv, torch.ones(b * h, wt.shape[1], 1), None, LANDMARK_EPS, out, conv, threads
    )
    return out, wt, w, kv


class LandmarkValues(torch.autograd.Function):
    """`landmark_values` with gradients -> (B, H, L, d) (d == Dv): the backward recomputes each block's softmax
    weights from the columns' maxima and totals (attnbench_landmark_values_backward) and writes dk, dv (0 on
    padding) and the landmarks' gradient in one call."""

    @staticmethod
    def forward(ctx, k: Tensor, v: Tensor, q_land: Tensor, real: Tensor | None, threads: int):
        if k.shape[-1] != v.shape[-1]:
            raise NativeShapeError(f"native.LandmarkValues: needs d == Dv; got {k.shape[-1]} and {v.shape[-1]}")
        values, wt, w, offset = landmark_values(k, v, q_land, real, threads)
        ctx.save_for_backward(k, v, w, wt, offset, values)
        ctx.real, ctx.threads = real, threads
        return values.view(*q_land.shape[:3], -1)

    @staticmethod
    def backward(ctx, g: Tensor):
        k, v, w, wt, offset, values = ctx.saved_tensors
        b, h, n, d = k.shape
        _expect("LandmarkValues.backward", "the output gradient", g.contiguous(), (b, h, values.shape[1], d))
        g = g.reshape(values.shape).contiguous()  # held: read through a raw pointer
        c = (g * values).sum(-1).contiguous()
        dk, dv, d_land = torch.empty_like(k), torch.empty_like(v), torch.empty_like(wt)
        _call(
            "attnbench_landmark_values_backward",
            k.data_ptr(),
            v.data_ptr(),
            _ptr(ctx.real),
            w.data_ptr(),
            wt.data_ptr(),
            offset.data_ptr(),
            g.data_ptr(),
            c.data_ptr(),
            b * h,
            h,
            n,
            d,
            wt.shape[1],
            ctx.threads,
            dk.data_ptr(),
            dv.data_ptr(),
            d_land.data_ptr(),
        )
        return dk, dv, d_land.view(b, h, -1, d), None, None


class LandmarkQueries(torch.autograd.Function):
    """`landmark_queries` (without the convolution) with gradients, d == Dv: the backward is
    attnbench_landmark_queries_backward: dq, and the gradients of k_land and mixed, in one call."""

    @staticmethod
    def forward(ctx, q: Tensor, k_land: Tensor, mixed: Tensor, threads: int):
        if q.shape[-1] != mixed.shape[-1]:
            raise NativeShapeError(f"native.LandmarkQueries: needs d == Dv; got {q.shape[-1]} and {mixed.shape[-1]}")
        out, wt, w, kv = landmark_queries(q, k_land, mixed, threads)
        ctx.save_for_backward(q, w, wt, kv, out)
        ctx.threads = threads
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        q, w, wt, kv, out = ctx.saved_tensors
        b, h, n, d = q.shape
        g = g.contiguous()  # held: read through a raw pointer
        _expect("LandmarkQueries.backward", "the output gradient", g, tuple(out.shape))
        dq, d_mixed, d_land = torch.empty_like(q), torch.empty_like(kv), torch.empty_like(wt)
        _call(
            "attnbench_landmark_queries_backward",
            q.data_ptr(),
            w.data_ptr(),
            wt.data_ptr(),
            kv.data_ptr(),
            out.data_ptr(),
            g.data_ptr(),
            b * h,
            n,
            d,
            wt.shape[1],
            ctx.threads,
            LANDMARK_EPS,
            dq.data_ptr(),
            d_mixed.data_ptr(),
            d_land.data_ptr(),
        )
        return dq, d_land.view(b, h, -1, d), d_mixed.view(b, h, -1, d), None


def supports_backward(spec: NativeSpec | None, q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the fused path with gradients (`fused_linear_attention`) can run: the forward's conditions, no input
    normalising and d == Dv. A projection that takes gradients (Coulomb particles in phase A) gets them from the
    kernels' backward too (`Attention`'s weights input)."""
    return supports(spec, q, k, v) and spec.unit_eps is None and q.shape[-1] == v.shape[-1]


# the backward reads the features the forward kept, instead of recomputing them (a projection and an exp per
# element), where both tensors of them take at most this many bytes: 8 MiB at 1024 tokens and 32 MiB at 4096 with
# 4 heads of 256 features, where it saved 4-6% of a training step (A/B in one process). At 16384 (128 MiB) it saved
# nothing measurable, so longer sequences recompute them and keep the memory small
KEEP_FEATURES_BYTES = 64 << 20


class Attention(torch.autograd.Function):
    """(q, k, v, weights) -> `attention` with its fused backward (`attnbench_attention_backward`): the query pass's,
    the finished state's and the key pass's gradients in one call, dq, dk and dv each written once, and the
    projection's (spec.weights, passed again as `weights` so autograd sees it) where it takes one; the features
    kept from the forward where they fit in KEEP_FEATURES_BYTES, else recomputed block by block."""

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        weights: Tensor | None,
        spec: NativeSpec,
        real: Tensor | None,
        eps: float,
        threads: int,
        skip_queries: bool = False,
    ):
        b, h, n, _ = q.shape
        heads, f, dv = b * h, spec.num_features if spec.weights is not None else q.shape[-1], v.shape[-1]
        keep = 2 * heads * n * f * 4 <= KEEP_FEATURES_BYTES and spec.kind != "cos2"  # cos2's slope needs u
        # struct Saved's order: s_kv, s_ksum, off_kv, off_den, log_max; phi_q, phi_k, the keys' row maxima
        saved = [
            torch.empty(heads, f, dv),
            torch.empty(heads, f),
            torch.empty(heads, dv),
            torch.empty(heads),
            torch.empty(heads) if spec.kind == "favor" else None,
            torch.empty(heads, n, f) if keep else None,
            torch.empty(heads, n, f) if keep else None,
            torch.empty(heads, n) if keep else None,
        ]
        out = attention(spec, q, k, v, real, eps, threads, saved, skip_queries)
        ctx.spec, ctx.real, ctx.eps, ctx.threads, ctx.saved = spec, real, eps, threads, saved
        ctx.skip_queries = skip_queries
        ctx.save_for_backward(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        q, k, v, out = ctx.saved_tensors
        spec, (b, h, n, d), w = ctx.spec, q.shape, ctx.spec.weights
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g_wt = torch.empty(b * h, w.shape[-1], d) if w is not None and ctx.needs_input_grad[3] else None
        g = g.contiguous()  # held here: the kernel reads it through a raw pointer
        _expect("Attention.backward", "the output gradient", g, tuple(out.shape))
        _expect_saved("Attention.backward", spec, ctx.saved, b * h, n, d, v.shape[-1])
        _call(
            "attnbench_attention_backward",
            KINDS[spec.kind],
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            _ptr(ctx.real),
            b * h,
            h,
            n,
            d,
            v.shape[-1],
            w.shape[-1] if w is not None else d,
            _ptr(w),
            w.shape[0] if w is not None else 1,
            spec.norm_coef,
            spec.scale,
            spec.offset,
            ctx.eps,
            ctx.threads,
            out.data_ptr(),
            g.data_ptr(),
            _pointers(ctx.saved),
            dq.data_ptr(),
            dk.data_ptr(),
            dv.data_ptr(),
            spec.floor,
            spec.bias,
            _ptr(spec.phase),
            int(ctx.skip_queries),
            _ptr(g_wt),
        )
        return dq, dk, dv, None if g_wt is None else _projection_grad(g_wt, w.shape[0], h), None, None, None, None, None


def _projection_grad(g_wt: Tensor, heads_w: int, h: int) -> Tensor:
    """The kernels' per (batch, head) gradient of w^T (B*H, M, d) -> the projection's (heads_w, d, M): summed over
    the rows that share each projection (the batch, and the heads for one shared head's)."""
    bh, m, d = g_wt.shape
    if heads_w == bh:
        total = g_wt
    elif heads_w == h:
        total = g_wt.view(bh // h, h, m, d).sum(dim=0)
    else:
        total = g_wt.sum(dim=0, keepdim=True)
    return total.transpose(1, 2)
