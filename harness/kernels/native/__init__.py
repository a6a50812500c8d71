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

By job: `abi` (the kinds, widths and entry points shared with the C++ source), `toolchain` (building it), `spec`
(NativeSpec), `runtime` (the loaded library and its switch), `shapes` (the checks at the boundary), `linear`,
`nystrom` and `elementwise` (the kernels' Python side); this package re-exports what callers use.
"""

from attnbench.kernels.native import abi, elementwise, linear, nystrom, runtime, shapes, spec, toolchain
from attnbench.kernels.native.abi import (
    ABI,
    KIND_TABLE,
    KINDS,
    PAPER_KINDS,
    SOURCE,
    VALUE_WIDTHS,
    generated_definitions,
)
from attnbench.kernels.native.elementwise import dropout, exp
from attnbench.kernels.native.linear import KEEP_FEATURES_BYTES, Attention, attention, supports_backward, write_queries
from attnbench.kernels.native.nystrom import (
    LANDMARK_EPS,
    LandmarkQueries,
    LandmarkValues,
    PinvSteps,
    landmark_queries,
    landmark_values,
    segment_means,
    sequence_conv,
    sequence_conv_weight_grad,
    softmax_columns,
)
from attnbench.kernels.native.runtime import library, real_rows, status, supports, takes, times_asked, turned_off
from attnbench.kernels.native.shapes import NativeShapeError
from attnbench.kernels.native.spec import NativeSpec
from attnbench.kernels.native.toolchain import FLAGS

__all__ = [
    "abi",
    "elementwise",
    "linear",
    "nystrom",
    "runtime",
    "shapes",
    "spec",
    "toolchain",
    "ABI",
    "Attention",
    "FLAGS",
    "KEEP_FEATURES_BYTES",
    "KINDS",
    "KIND_TABLE",
    "LANDMARK_EPS",
    "LandmarkQueries",
    "LandmarkValues",
    "NativeShapeError",
    "NativeSpec",
    "PAPER_KINDS",
    "PinvSteps",
    "SOURCE",
    "VALUE_WIDTHS",
    "attention",
    "dropout",
    "exp",
    "generated_definitions",
    "landmark_queries",
    "landmark_values",
    "library",
    "real_rows",
    "segment_means",
    "sequence_conv",
    "sequence_conv_weight_grad",
    "softmax_columns",
    "status",
    "supports",
    "supports_backward",
    "takes",
    "times_asked",
    "turned_off",
    "write_queries",
]
