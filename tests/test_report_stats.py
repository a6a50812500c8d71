"""The report's descriptive statistics, its default pairs and the stored predictions, against numpy or by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnbench.predictions import Predictions, decode_predictions, encode_predictions
from attnbench.report.paired import default_pairs, resolve_pairs
from attnbench.report.stats import summarize


def test_summarize_is_numpys_mean_and_sample_std_and_draws_no_interval() -> None:
    x = [0.8, 0.82, float("nan"), 0.84]
    s = summarize(x)
    assert s == {
        "mean": pytest.approx(np.mean([0.8, 0.82, 0.84])),
        "std": pytest.approx(np.std([0.8, 0.82, 0.84], ddof=1)),
        "n": 3,
    }
    assert summarize([])["n"] == 0 and math.isnan(summarize([0.3])["std"])


def test_default_pairs() -> None:
    labels = ["kernel-elu", "vanilla-elu", "kernel-cos2", "softmax", "performer", "majority"]
    assert default_pairs(labels) == [
        ("kernel-elu", "vanilla-elu"),
        ("kernel-cos2", "softmax"),
        ("kernel-elu", "softmax"),
        ("majority", "softmax"),
        ("performer", "softmax"),
        ("vanilla-elu", "softmax"),
    ]
    assert default_pairs(["a", "b"]) == []
    assert resolve_pairs(["default", ["softmax", "kernel-elu"]], labels)[:1] == [("kernel-elu", "vanilla-elu")]
    assert ("softmax", "kernel-elu") not in resolve_pairs(["default", ["softmax", "kernel-elu"]], labels)  # once


def test_predictions_round_trip_compactly() -> None:
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, size=1066)
    logits = rng.normal(size=(1066, 3))
    logits[np.arange(1066), labels] += 1.0
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    pred = Predictions(probs, probs.argmax(axis=1), labels)
    stored = encode_predictions(pred.probs, labels)
    back = decode_predictions(stored)
    assert np.array_equal(back.labels, labels) and np.array_equal(back.predicted, pred.probs.argmax(axis=1))
    assert np.allclose(back.probs, pred.probs, rtol=1e-3, atol=1e-4)
    assert len(stored["probs"]) + len(stored["predicted"]) + len(stored["labels"]) <= (3 * 2 + 2) * 1066 * 4 / 3 + 12
    with pytest.raises(ValueError, match="encoding"):
        decode_predictions({"encoding": "json"})
