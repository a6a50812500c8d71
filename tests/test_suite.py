"""Suite loading: every mistake names file, key path and the closest valid name; expansion into cells."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
import yaml

from attnbench.errors import UserError
from attnbench.names import NO_ATTENTION, NO_TASK
from attnbench.suite import find_suite, load_suite, suite_names, suites_dir

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

BASE = {
    "name": "tiny",
    "description": "a tiny suite for tests",
    "attentions": ["softmax", {"name": "softmax", "label": "softmax-math", "options": {"backend": "math"}}],
    "tasks": [{"name": "fake_cells:tiny_task", "options": {"rows": 8}}],
    "seeds": [0, 1, 2],
    "model": {"d_model": 16, "num_heads": 2},
    "training": {"epochs": 1},
    "measurements": [
        "fake_cells:echo",
        {"name": "fake_cells:tiny_train", "options": {"examples": 16}},
        "fake_cells:echo_once",
    ],
}


def write(tmp_path: Path, **changes) -> Path:
    suite = {**BASE, **changes}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_suite(str(path))
    return str(info.value)


def test_option_typo_names_key_path_and_suggestion(tmp_path):
    attentions = ["softmax", {"name": "softmax", "label": "m", "options": {"backnd": "math"}}]
    message = error_of(write(tmp_path, attentions=attentions))
    assert message.startswith(f"{tmp_path / 'tiny.yaml'}: attentions[1].options.backnd: unknown option 'backnd'")
    assert "did you mean 'backend'?" in message


@pytest.mark.parametrize(
    "changes, key_path, hint",
    [
        ({"seedz": [0]}, "seedz: unknown key", "did you mean 'seeds'?"),
        ({"attentions": ["sofmax"]}, "attentions[0].name: unknown attention 'sofmax'", "did you mean 'softmax'?"),
        (
            {"measurements": ["fake_cells:echo", {"name": "fake_cells:echo", "optons": {}}]},
            "measurements[1].optons: unknown key 'optons'",
            "did you mean 'options'?",
        ),
        (
            {"measurements": [{"name": "fake_cells:echo", "options": {"scale": "big"}}]},
            "measurements[0].options.scale: 'scale' is 'big'",
            "expected a number",
        ),
        ({"training": {"epoch": 1}}, "training.epoch: unknown option", "did you mean 'epochs'?"),
        ({"model": {"d_model": 16, "num_heads": 3}}, "model: model:", "not divisible"),
        ({"model": {"max_length": 16}}, "model.max_length:", "set from each task"),
        ({"tasks": [{"name": "fake_cells:tiny_task", "options": {"rowz": 3}}]}, "tasks[0].options.rowz", "'rows'"),
        ({"tasks": [{"name": "fake_cells:tiny_task", "options": {"seed": 3}}]}, "tasks[0].options.seed", "seeds:"),
        ({"attentions": [{"name": "softmax", "options": {"head_dim": 8}}]}, "attentions[0].options.head_dim", "model"),
        ({"attentions": [{"name": "softmax", "model": {"tie_q": False}}]}, "attentions[0].model.tie_q", "'tie_qk'"),
        ({"seeds": [0, "1"]}, "seeds[1]: is '1'", "integer"),
        ({"seeds": [0, 0]}, "seeds: [0, 0] repeats", "once"),
        ({"attentions": ["softmax", "softmax"]}, "attentions[1]: label 'softmax' is already used", "distinct label"),
        ({"attentions": "softmax"}, "attentions: is 'softmax'", "expected a list"),
        ({"cell_timeout": -1}, "cell_timeout: is -1", "positive"),
        ({"tasks": []}, "tasks: no tasks given", "fake_cells:echo"),
        ({"attentions": []}, "attentions: no attentions given", "fake_cells:echo"),
    ],
)
def test_mistakes_name_the_key_path(tmp_path, changes, key_path, hint):
    message = error_of(write(tmp_path, **changes))
    assert f"tiny.yaml: {key_path}" in message
    assert hint in message


def test_missing_key_and_bad_yaml(tmp_path):
    suite = dict(BASE)
    del suite["seeds"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert "s.yaml: seeds: missing required key 'seeds'" in error_of(path)
    path.write_text("name: [unclosed\n")
    assert "not valid YAML at line" in error_of(path)


def test_unknown_suite_name_suggests_the_closest(tmp_path):
    if not suite_names():
        pytest.skip("no shipped suites yet")
    name = suite_names()[0]
    with pytest.raises(UserError, match=f"did you mean '{name}'"):
        find_suite(name[:-1] + "x" if len(name) > 3 else name + "x")
    with pytest.raises(UserError, match="does not exist"):
        find_suite(str(tmp_path / "nope.yaml"))


def test_expansion_one_cell_per_task_attention_seed_measurement(tmp_path):
    suite = load_suite(str(write(tmp_path)))
    cells = suite.cells()
    labels, seeds = ["softmax", "softmax-math"], [0, 1, 2]
    per_task = {(c.task.name, c.attention.label, c.seed) for c in cells if c.measurement.name == "fake_cells:echo"}
    assert per_task == set(itertools.product(["fake_cells:tiny_task"], labels, seeds))
    task_free = [c for c in cells if c.measurement.name == "fake_cells:tiny_train"]
    assert {(c.attention.label, c.seed) for c in task_free} == set(itertools.product(labels, seeds))
    assert all(c.task.to_json() == NO_TASK for c in task_free)
    (once,) = [c for c in cells if c.measurement.name == "fake_cells:echo_once"]
    assert once.task.to_json() == NO_TASK and once.attention.to_json() == NO_ATTENTION and once.seed == 0
    assert len(cells) == 2 * 3 + 2 * 3 + 1
    assert set(cells[0].to_json()) == {"suite", "task", "attention", "seed", "model", "training", "measurement"}
    assert cells[0].to_json()["attention"].keys() == {"name", "label", "options"}
    assert len({c.name for c in cells}) == len(cells)
    math = next(c for c in cells if c.attention.label == "softmax-math")
    assert math.attention.options == {"backend": "math"} and math.model == {"d_model": 16, "num_heads": 2}
    assert suite.resolved["attentions"]["softmax-math"]["head_dim"] == 8  # filled in from the model


def test_cells_share_no_mapping(tmp_path):
    """Each cell owns its options and settings: a measurement that changes its own cannot reach another cell."""
    cells = load_suite(str(write(tmp_path))).cells()
    mappings = [id(m) for c in cells for m in (c.task.options, c.attention.options, c.model, c.training)]
    assert len(set(mappings)) == len(mappings)


def test_attention_model_overrides_merge_into_its_cells_only(tmp_path):
    attentions = ["softmax", {"name": "softmax", "label": "untied", "model": {"tie_qk": False, "d_model": 32}}]
    cells = load_suite(str(write(tmp_path, attentions=attentions))).cells()
    models = {c.attention.label: c.model for c in cells}
    assert models == {
        "softmax": {"d_model": 16, "num_heads": 2},
        "untied": {"d_model": 32, "num_heads": 2, "tie_qk": False},
        "none": {"d_model": 16, "num_heads": 2},
    }
    assert all(set(c.to_json()["attention"]) == {"name", "label", "options"} for c in cells)


def test_exclude_patterns_remove_cells(tmp_path):
    suite = load_suite(str(write(tmp_path, exclude=["*/softmax-math/*", "*/s2/*"])))
    names = [c.name for c in suite.cells()]
    assert len(names) == 2 * 2 + 1 and not any("softmax-math" in n or "/s2/" in n for n in names)
    with pytest.raises(UserError, match="leave no cells"):
        load_suite(str(write(tmp_path, exclude=["*"])))


@pytest.mark.parametrize("name", suite_names())
def test_every_shipped_suite_validates(name, monkeypatch):
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # hub tasks without local files may use the hub:
        monkeypatch.setenv(variable, "0")  # their data is checked where it runs (test_hub_task_without_data...)
    try:
        suite = load_suite(name)
    except UserError as err:  # e.g. peers after a [dev]-only install: skipped, saying which extra to install
        local_data = "does not exist" in str(err) and not os.environ.get("ATTNBENCH_DATA_DIR")
        if "needs the optional extra" not in str(err) and not local_data:
            raise
        pytest.skip(f"suite {name!r}: {err}")  # an extra to install, or local files without ATTNBENCH_DATA_DIR
    assert suite.name == name == Path(find_suite(name)).stem
    assert suite.description and "\n" not in suite.description
    assert suite.cells()
    assert find_suite(name).parent == suites_dir()


def test_a_key_given_twice_is_refused_with_its_key_path(tmp_path):
    path = tmp_path / "dup.yaml"
    text = yaml.safe_dump(BASE, sort_keys=False)
    path.write_text(text + "seeds: [5]\n")
    message = error_of(path)
    assert "dup.yaml: seeds: key 'seeds' is given twice (lines" in message and "\n" not in message
    path.write_text(text.replace("  num_heads: 2\n", "  num_heads: 2\n  num_heads: 4\n"))
    assert "dup.yaml: model.num_heads: key 'num_heads' is given twice" in error_of(path)
    nested = {**BASE, "attentions": [{"name": "performer", "options": {"num_features": 8}}]}
    path.write_text(
        yaml.safe_dump(nested, sort_keys=False).replace("num_features: 8", "num_features: 8\n    num_features: 9")
    )
    assert "attentions[0].options.num_features: key 'num_features' is given twice" in error_of(path)


def test_yaml_aliases_that_recurse_or_expand_without_bound_are_refused_in_one_line(tmp_path):
    """A recursive alias (a RecursionError traceback) and nested aliases (validation busy until killed): one line
    each, naming the line; an anchor used within bounds still works."""
    recursive = tmp_path / "recursive.yaml"
    recursive.write_text("name: r\ndescription: d\nattentions: &a [softmax, *a]\ntasks: [listops]\nseeds: [0]\n"
                         "measurements: [accuracy]\n")  # fmt: skip
    assert "line 3: an alias refers to the anchor it is inside" in error_of(recursive)
    lines = ["name: l", "description: d", "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text("\n".join(lines) + "\nattentions: [softmax]\n")
    assert "more than 100,000 (nested aliases, a 'billion laughs')" in error_of(laughs)
    shared = tmp_path / "shared.yaml"
    shared.write_text("name: s\ndescription: d\nattentions: [softmax]\ntasks: [listops]\nseeds: [0]\n"
                      "model: &m {d_model: 16}\nmeasurements: [accuracy]\ntraining: {epochs: 1}\n")  # fmt: skip
    assert load_suite(str(shared)).model == {"d_model": 16}


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_seeds_outside_numpys_range_are_refused(tmp_path, seed):
    assert f"seeds[1]: is {seed}; a seed must be an integer in 0..4294967295" in error_of(
        write(tmp_path, seeds=[0, seed])
    )


def test_option_bounds_are_checked_at_validation(tmp_path):
    message = error_of(write(tmp_path, attentions=[{"name": "performer", "options": {"num_features": 1_000_000_000}}]))
    assert message.endswith(
        "attentions[0].options.num_features: 'num_features' is 1000000000, outside its bounds "
        "(at most 65536); choose a value within them"
    )
    assert "training.epochs: 'epochs' is 1000000000, outside" in error_of(write(tmp_path, training={"epochs": 10**9}))
    assert "model.d_model: 'd_model' is 1048576, outside" in error_of(write(tmp_path, model={"d_model": 2**20}))
