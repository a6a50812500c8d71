"""Metric records (`attnbench.metrics.MetricInfo`): one per metric, declared beside its measurement, carried
through JSON, their declarations checked."""

from __future__ import annotations

import json

import pytest

from attnbench.measurements import measurement_names
from attnbench.metrics import (
    METRICS,
    MetricInfo,
    declared_records,
    metric_info,
    records_predate_fields,
    register_metric,
)


def test_the_headline_metrics_carry_range_margin_and_format() -> None:
    measurement_names()
    accuracy, bits = metric_info("accuracy"), metric_info("bits_per_byte")
    assert (accuracy.bounds, accuracy.margin, accuracy.headline, accuracy.paired) == ((0.0, 1.0), 0.01, True, True)
    assert (bits.direction, bits.margin, bits.headline) == ("min", 0.01, True)
    ratio = metric_info("forward_paired_ratio@4096")
    assert (ratio.margin, ratio.margin_relative) == (0.1, False)  # a time ratio: 10% in ratio units
    timed = metric_info("forward_ms@4096")
    assert (timed.margin, timed.margin_relative, timed.timed) == (0.1, True, True)  # within 10% of the other
    assert metric_info("fixed-rff@64/accuracy").bounds == (0.0, 1.0)  # a plug-in's record (the Coulomb package)
    assert metric_info("params_total").margin is None  # not ranked, not judged
    assert metric_info("state_bytes@1024").exact and not metric_info("state_bytes@1024").margin  # counted: no margin
    assert format(0.12345, accuracy.format) == "0.123"


def test_every_declared_record_survives_json() -> None:
    measurement_names()
    for info in METRICS.values():
        assert MetricInfo.from_dict(json.loads(json.dumps(info.as_dict()))) == info
    with pytest.raises(ValueError, match="unknown keys"):
        MetricInfo.from_dict({**metric_info("accuracy").as_dict(), "colour": "red"})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"bounds": (1.0, 0.0)}, "must be (low, high) with low < high"),
        ({"margin": -0.1}, "must be a non-negative number"),
        ({"format": "%d"}, "is not a format() spec"),
        ({"exact": True, "timed": True}, "cannot be both timed (measured) and exact (counted)"),
    ],
)
def test_a_bad_record_is_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        register_metric("record_under_test", "max", "a test metric", **options)
    assert "record_under_test" not in METRICS


def test_a_record_stored_before_the_exact_field_still_loads_and_is_known_as_older() -> None:
    measurement_names()
    stored = {p: {k: v for k, v in r.items() if k != "exact"} for p, r in declared_records().items()}
    assert MetricInfo.from_dict(stored["state_bytes*"]).exact is False  # as stored: the field's default
    assert records_predate_fields(stored)
    assert not records_predate_fields(declared_records()) and not records_predate_fields(None)


def test_the_existing_signature_still_declares() -> None:
    register_metric("record_plain", "min", "declared as before", timed=True)
    try:
        info = metric_info("record_plain")
        assert (info.direction, info.timed, info.bounds, info.margin, info.format) == (
            "min",
            True,
            (None, None),
            None,
            ".3f",
        )
    finally:
        METRICS.pop("record_plain")
