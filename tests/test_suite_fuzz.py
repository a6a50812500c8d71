"""Property: any suite file, however mangled (keys, types, values, YAML syntax), either validates or
ends in one UserError line (the CLI's exit 2), never another exception."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbench.errors import UserError
from attnbench.suite import load_suite

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

BASE = {
    "name": "fuzz",
    "description": "a suite to mangle",
    "attentions": [
        "softmax",
        {"name": "performer", "label": "p8", "options": {"num_features": 8}, "model": {"tie_qk": False}},
    ],
    "tasks": [{"name": "fake_cells:tiny_task", "options": {"rows": 8, "label_noise": 0.1}}],
    "seeds": [0, 1],
    "model": {"d_model": 16, "num_heads": 2, "dropout": 0.0},
    "training": {"epochs": 1, "batch_size": 8, "lr": 1e-3, "phase_a": {"epochs": 0.5}},
    "measurements": ["fake_cells:echo", {"name": "fake_cells:tiny_train", "options": {"examples": 16}}],
    "cell_timeout": 60,
    "exclude": ["*/p8/s1/*"],
}
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["softmax", "performer", "accuracy", "fake_cells:echo", "num_features", "1e-3", "", "*", "a/b", "none", "-1"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a nested structure of dicts and lists (the root included)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += paths(value, (*prefix, i))
    return found


@st.composite
def mutated_suites(draw: st.DrawFn) -> Any:
    """BASE with a few random edits: a value replaced, a key removed or added, an item appended."""
    suite = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(suite)))
        parent, key = (None, None) if not path else (_at(suite, path[:-1]), path[-1])
        action = draw(st.sampled_from(["replace", "delete", "add", "append"]))
        target = _at(suite, path)
        if action == "replace" and parent is not None:
            parent[key] = draw(values)
        elif action == "delete" and parent is not None:
            del parent[key]
        elif action == "add" and isinstance(target, dict):
            target[draw(st.text(max_size=10) | st.sampled_from(["num_features", "seed", "label", "options"]))] = draw(
                values
            )
        elif action == "append" and isinstance(target, list):
            target.append(draw(values))
        elif parent is None and action == "replace":
            suite = draw(values)
    return suite


def _at(node: Any, path: tuple) -> Any:
    for key in path:
        node = node[key]
    return node


def validates_or_one_line(path: Path) -> None:
    """load_suite either succeeds (and the suite expands) or raises one single-line UserError."""
    try:
        suite = load_suite(str(path))
    except UserError as err:
        message = str(err)
        assert message and "\n" not in message, repr(message)
        assert err.exit_code == 2
        return
    assert suite.cells()


@SETTINGS
@given(suite=mutated_suites())
def test_mutated_suites_validate_or_fail_in_one_line(tmp_path, suite):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False, allow_unicode=True))
    validates_or_one_line(path)


@SETTINGS
@given(
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.integers(0, 3),
            st.sampled_from(list(":-[]{}#&*!|>'\"%@`,? \n\t") + ["  ", "- ", ": ", "\x00", "\u00e9", "<<: *a"]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_yaml_with_broken_syntax_validates_or_fails_in_one_line(tmp_path, edits):
    text = yaml.safe_dump(BASE, sort_keys=False)
    for where, removed, inserted in edits:  # cut `removed` characters at a position, insert a YAML-ish token
        at = int(where * len(text))
        text = text[:at] + inserted + text[at + removed :]
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    validates_or_one_line(path)
