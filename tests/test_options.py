"""Typed options: bounds declared with the option are enforced wherever options are made."""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.errors import ConfigError
from attnbench.options import make_options, option, option_table


@dataclasses.dataclass
class Bounded:
    """A config with bounded options."""

    width: int = option(8, "a width", minimum=1, maximum=64)
    sizes: list[int] = option([4], "sizes", maximum=100)
    rate: float | None = option(None, "a rate", minimum=0.0)


def test_values_inside_the_bounds_pass_and_outside_are_refused_with_the_bounds():
    assert make_options(Bounded, {"width": 64, "sizes": [1, 100], "rate": 0.0}, what="x") == Bounded(64, [1, 100], 0.0)
    with pytest.raises(ConfigError, match=r"option 'width' of x is 65, outside its bounds \(1\.\.64\)"):
        make_options(Bounded, {"width": 65}, what="x")
    with pytest.raises(ConfigError, match=r"is 0, outside its bounds \(1\.\.64\)"):
        make_options(Bounded, {"width": 0}, what="x")
    with pytest.raises(ConfigError, match=r"is \[3, 101\] \(its value 101\), outside its bounds \(at most 100\)"):
        make_options(Bounded, {"sizes": [3, 101]}, what="x")
    with pytest.raises(ConfigError, match=r"at least 0"):
        make_options(Bounded, {"rate": -0.5}, what="x")


def test_the_option_table_shows_the_bounds():
    rows = {row["name"]: row["help"] for row in option_table(Bounded)}
    assert rows == {"width": "a width [1..64]", "sizes": "sizes [at most 100]", "rate": "a rate [at least 0]"}


def test_a_huge_feature_count_is_refused_when_the_attention_is_built():
    from attnbench.registry import build_attention

    with pytest.raises(ConfigError, match="'num_features' of attention 'performer' is 1000000000, outside"):
        build_attention("performer", head_dim=8, num_heads=2, num_features=1_000_000_000)


def test_nan_is_refused_and_infinity_only_where_the_bounds_allow_it():
    for value in (float("nan"), "nan"):
        with pytest.raises(ConfigError, match="is nan, expected a number|is 'nan', expected a number"):
            make_options(Bounded, {"rate": value}, what="x")
    assert make_options(Bounded, {"rate": 10**400}, what="x").rate == float("inf")
    with pytest.raises(ConfigError, match=r"outside its bounds \(at least 0\)"):
        make_options(Bounded, {"rate": "-inf"}, what="x")
