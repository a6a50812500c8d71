"""The interface between Python and the C++ source: the feature kinds and their ids, the value widths, the ABI
version (generated into the source as compiler definitions, so the two languages cannot drift), and the ctypes
signature of every entry point.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

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


def declare(lib: ctypes.CDLL) -> None:
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
