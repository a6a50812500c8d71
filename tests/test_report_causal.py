"""The causal report sections: the decoding crossover read off measured points."""

import math

import pandas as pd

from attnbench.report.causal import crossover


def _points(softmax, linear):
    rows = [
        {"label": "softmax", "attention": "softmax", "context_length": n, "decode_ms_per_token": ms}
        for n, ms in softmax.items()
    ]
    rows += [
        {"label": "elu", "attention": "elu-linear", "context_length": n, "decode_ms_per_token": ms}
        for n, ms in linear.items()
    ]
    return pd.DataFrame(rows)


def test_crossover_is_where_the_linear_step_stays_faster():
    points = _points({256: 1.0, 1024: 1.5, 4096: 3.0, 16384: 9.0}, {256: 0.9, 1024: 1.6, 4096: 1.6, 16384: 1.6})
    assert crossover(points, "elu") == 4096  # faster at 256 by noise, slower at 1024, faster from 4096 on


def test_no_crossover_when_slower_at_the_longest_context():
    points = _points({256: 1.0, 1024: 1.2}, {256: 2.0, 1024: 2.0})
    assert math.isnan(crossover(points, "elu"))
