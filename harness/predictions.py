"""Per-example test predictions (and per-example outcomes) stored compactly in a cell's details, for paired tests.

Layout (JSON-able): {"encoding": "float16-le-base64", "rows": N, "classes": C, "probs": base64 of the
(N, C) probabilities as little-endian float16 (row-major), "predicted": base64 of the (N,) arg-max
classes of the full-precision probabilities as little-endian uint16, "labels": the same for the labels}.
float16 keeps about 3 significant digits of every probability (so NLL per example to ~1e-3) at
2 bytes a value: about 8.5 KB for 1,066 binary rows.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import numpy as np

ENCODING = "float16-le-base64"


@dataclasses.dataclass
class Predictions:
    """Decoded predictions: probabilities (N, C) float64, predicted classes (N,) and labels (N,) int64."""

    probs: np.ndarray
    predicted: np.ndarray
    labels: np.ndarray

    @property
    def correct(self) -> np.ndarray:
        """(N,) bool: the predicted class is the label."""
        return self.predicted == self.labels


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def encode_predictions(probs: Any, labels: Any) -> dict[str, Any]:
    """The stored form of probabilities (N, C) and labels (N,) (numpy arrays or torch tensors)."""
    p = np.asarray(probs.detach().cpu().numpy() if hasattr(probs, "detach") else probs, dtype=np.float64)
    y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels, dtype=np.int64)
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"expected probs (N, C) and labels (N,), got shapes {p.shape} and {y.shape}")
    if p.shape[1] > np.iinfo(np.uint16).max:
        raise ValueError(f"{p.shape[1]} classes are more than the uint16 encoding holds")
    index = _index_dtype(p.shape[1])
    return {
        "encoding": ENCODING,
        "rows": int(p.shape[0]),
        "classes": int(p.shape[1]),
        "probs": _b64(p.astype("<f2")),
        "predicted": _b64(p.argmax(axis=1).astype(index)),
        "labels": _b64(y.astype(index)),
    }


def _index_dtype(num_classes: int) -> str:
    """One byte per class index up to 256 classes, else two."""
    return "<u1" if num_classes <= 256 else "<u2"


def decode_predictions(stored: dict[str, Any]) -> Predictions:
    """Predictions from their stored form; ValueError if the record is not one (wrong encoding, sizes)."""
    if not isinstance(stored, dict) or stored.get("encoding") != ENCODING:
        raise ValueError(f"stored predictions must have encoding {ENCODING!r}")
    n, c = int(stored["rows"]), int(stored["classes"])

    def array(key: str, dtype: str, count: int) -> np.ndarray:
        values = np.frombuffer(base64.b64decode(stored[key]), dtype=dtype)
        if values.size != count:
            raise ValueError(f"stored predictions: {key} holds {values.size} values, expected {count}")
        return values

    probs = array("probs", "<f2", n * c).astype(np.float64).reshape(n, c)
    index = _index_dtype(c)
    return Predictions(probs, array("predicted", index, n).astype(np.int64), array("labels", index, n).astype(np.int64))


OUTCOMES_ENCODING = "float32-le-base64"


def encode_outcomes(values: Any) -> dict[str, Any]:
    """The stored form of per-example outcomes (N,): one number per test example (a row's accuracy over its answers,
    a block's bits per byte, ...) whose mean is the cell's metric; a measurement keeps them in
    details["outcomes"][metric], where the inference engine (attnbench.decisions) reads them."""
    v = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"expected outcomes of shape (N,) with N > 0, got shape {v.shape}")
    return {"encoding": OUTCOMES_ENCODING, "rows": int(v.size), "values": _b64(v.astype("<f4"))}


def decode_outcomes(stored: dict[str, Any]) -> np.ndarray:
    """Per-example outcomes (N,) float64 from their stored form; ValueError if the record is not one."""
    if not isinstance(stored, dict) or stored.get("encoding") != OUTCOMES_ENCODING:
        raise ValueError(f"stored outcomes must have encoding {OUTCOMES_ENCODING!r}")
    values = np.frombuffer(base64.b64decode(stored["values"]), dtype="<f4")
    if values.size != int(stored["rows"]):
        raise ValueError(f"stored outcomes hold {values.size} values, expected {stored['rows']}")
    return values.astype(np.float64)
