"""The causal report sections: the decoding crossover read off the timing check of measured points."""

import math

import numpy as np
import pandas as pd
import pytest

from attnbench.measurements.decode import sign_test
from attnbench.report.causal import crossover


def _points(verdicts: dict[int, str], checked: bool = True) -> pd.DataFrame:
    """A label's decode points with the verdicts of its timing check against softmax."""
    return pd.DataFrame(
        [
            {
                "label": "elu",
                "attention": "elu-linear",
                "context_length": n,
                "checked": checked,
                "faster": verdict == "faster",
                "slower": verdict == "slower",
            }
            for n, verdict in verdicts.items()
        ]
    )


def test_crossover_is_where_the_linear_step_stays_detectably_faster():
    points = _points({256: "faster", 1024: "no detectable difference", 4096: "faster", 16384: "faster"})
    assert crossover(points, "elu") == 4096  # faster at 256, not detectably at 1024, faster from 4096 on


def test_no_crossover_when_not_faster_at_the_longest_context_or_without_a_check():
    assert math.isnan(crossover(_points({256: "faster", 1024: "slower"}), "elu"))
    assert math.isnan(crossover(_points({256: "faster", 1024: "faster"}, checked=False), "elu"))


def test_sign_test_against_the_binomial_by_hand():
    found = sign_test(np.array([1.5] * 10))  # this step faster in all 10 pairs: p = 2 / 2**10
    assert found["pairs_faster"] == 10 and found["sign_p"] == pytest.approx(2 / 2**10)
    assert found["verdict"] == "faster"
    found = sign_test(np.array([1.2] * 6 + [0.8] * 4))  # 6 of 10: p = 2 * P(X >= 6) = 2 * 386 / 1024
    assert found["sign_p"] == pytest.approx(2 * 386 / 1024) and found["verdict"] == "no detectable difference"
    found = sign_test(np.array([0.5] * 9 + [1.0]))  # the tie is dropped: 0 of 9 faster
    assert found["pairs_faster"] == 0 and found["sign_p"] == pytest.approx(2 / 2**9)
    assert found["verdict"] == "slower"
