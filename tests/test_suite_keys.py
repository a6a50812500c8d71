"""The suite keys references / comparisons / published / sweep: validation with key paths, and expansion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from attnbench.errors import UserError
from attnbench.suite import load_suite

BASE: dict[str, Any] = {
    "name": "keys",
    "description": "suite keys under test",
    "attentions": [
        "softmax",
        {"name": "random-features", "label": "vanilla-elu", "options": {"feature_map": "elu"}},
        {"name": "coulomb", "label": "kernel-elu", "options": {"feature_map": "elu"}},
    ],
    "tasks": [{"name": "rotten_tomatoes", "options": {"max_length": 32}}],
    "seeds": [0, 1],
    "measurements": ["accuracy"],
}


@pytest.fixture(autouse=True)
def hub_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hub tasks without local files validate when the hub may be used (their data is checked where they run)."""
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(variable, "0")


def load(tmp_path: Path, **changes: Any):
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}, sort_keys=False))
    return load_suite(str(path))


def error_of(tmp_path: Path, **changes: Any) -> str:
    with pytest.raises(UserError) as info:
        load(tmp_path, **changes)
    return str(info.value)


def test_references_add_cells_on_text_tasks_only(tmp_path: Path) -> None:
    suite = load(tmp_path, references=["majority", {"name": "tfidf-logreg", "options": {"c_grid": [1.0]}}])
    names = [c.name for c in suite.cells()]
    assert len(names) == (3 + 2) * 2
    assert "rotten_tomatoes/tfidf-logreg/s1/accuracy" in names
    ref = next(c for c in suite.cells() if c.attention.label == "tfidf-logreg")
    assert ref.attention.to_json() == {
        "name": "reference",
        "label": "tfidf-logreg",
        "options": {"reference": "tfidf-logreg", "c_grid": [1.0]},
    }
    synthetic = load(
        tmp_path, references=["majority"], tasks=[{"name": "nonlinear_tokens", "options": {"num_train": 64}}]
    )
    assert all(c.attention.name != "reference" for c in synthetic.cells())
    assert suite.as_dict()["references"][0]["label"] == "majority"  # kept in run.json for the report


def test_sweep_gives_every_attention_the_same_trials(tmp_path: Path) -> None:
    suite = load(
        tmp_path,
        references=["majority"],
        sweep={"metric": "nll", "grid": {"lr": [1e-3, 3e-3, 1e-2], "dropout": [0.0, 0.2]}, "budget": 4},
    )
    trials: dict[str, set] = {}
    for cell in suite.cells():
        if cell.attention.name == "reference":
            assert cell.sweep is None  # references tune themselves
            continue
        values = cell.sweep.values
        assert cell.training["lr"] == values["lr"] and cell.model["dropout"] == values["dropout"]
        trials.setdefault(cell.attention.label, set()).add((cell.sweep.trial, tuple(values.items())))
    assert len({frozenset(t) for t in trials.values()}) == 1  # the same trials for every label
    assert all(len(t) == 4 for t in trials.values())
    assert next(c for c in suite.cells() if c.sweep is not None).name.endswith("/t0")


def test_published_and_comparisons_are_kept(tmp_path: Path) -> None:
    suite = load(
        tmp_path,
        references=["majority"],
        comparisons=["default", ["softmax", "majority"]],
        published={"source": "Table 3", "values": {"softmax": {"accuracy": 0.68, "nll": 0.64}}},
    )
    keys = suite.as_dict()
    assert keys["comparisons"] == ["default", ["softmax", "majority"]]
    assert keys["published"] == [
        {
            "source": "Table 3",
            "task": "rotten_tomatoes",
            "note": "",
            "values": {"softmax": {"accuracy": 0.68, "nll": 0.64}},
        }
    ]


def test_comparisons_as_a_mapping_keep_pairs_margins_and_correction(tmp_path: Path) -> None:
    from attnbench.decisions.settings import comparison_settings

    value = {"pairs": ["default", ["softmax", "kernel-elu"]], "margin": {"accuracy": 0.02}, "correction": "bh"}
    stored = load(tmp_path, comparisons=value).as_dict()["comparisons"]
    assert stored == value
    settings = comparison_settings(stored)
    assert settings.margin("accuracy") == 0.02 and settings.margin("nll") is None and settings.correction == "bh"
    assert comparison_settings(["default"]).pairs == ("default",)  # the list form reads as before
    assert comparison_settings({"margin": {"accuracy": 0.02}}).pairs == ("default",)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"comparisons": {"margins": {}}}, "comparisons.margins: unknown key 'margins'; did you mean 'margin'?"),
        ({"comparisons": {"margin": {"acc": 0.02}}}, "comparisons.margin.acc: 'acc' is not a declared, ranked metric"),
        ({"comparisons": {"margin": {"accuracy": -1}}}, "comparisons.margin.accuracy: is -1; give a non-negative"),
        ({"comparisons": {"correction": "sidak"}}, "comparisons.correction: is 'sidak'; use holm"),
        ({"comparisons": {"pairs": [["softmax"]]}}, "comparisons.pairs[0]: is ['softmax']; give a pair of labels"),
        ({"comparisons": [["softmax", "nope"]]}, "comparisons[0]: label 'nope' is not in the suite"),
        ({"comparisons": [["softmax"]]}, "comparisons[0]: is ['softmax']; give a pair of labels"),
        ({"comparisons": [["softmax", "softmax"]]}, "pairs 'softmax' with itself"),
        (
            {"published": {"source": "x", "values": {"softmax": {"acuracy": 0.7}}}},
            "published.values.softmax.acuracy: 'acuracy' is not a declared, ranked metric",
        ),
        ({"published": {"source": "x", "values": {"softmax": {"accuracy": "high"}}}}, "expected a finite number"),
        ({"published": {"values": {}}}, "published.source: missing required key 'source'"),
        (
            {"published": {"source": "x", "task": "sst2", "values": {}}},
            "published.task: task 'sst2' is not in the suite",
        ),
        (
            {"published": {"source": "x", "values": {"performer": {"accuracy": 0.7}}}},
            "label 'performer' is not in the suite",
        ),
        ({"sweep": {"metric": "accuracy", "grid": {"learning_rate": [1e-3]}}}, "unknown option(s) ['learning_rate']"),
        ({"sweep": {"metric": "accuracy", "grid": {"lr": [-1.0]}}}, "sweep.grid (point 0): {'lr': -1.0}"),
        ({"sweep": {"metric": "accuracy", "grid": {"lr": [1e-3]}, "budget": 2}}, "sweep.budget: is 2"),
        ({"sweep": {"metric": "params_total", "grid": {"lr": [1e-3]}}}, "sweep.metric: 'params_total' is not"),
        ({"sweep": {"metric": "accuracy", "grid": {"lr": []}}}, "sweep.grid.lr: is []"),
        (
            {"sweep": {"metric": "accuracy", "grid": {"lr": [1e-3]}, "select_seeds": [5]}},
            "sweep.select_seeds: [5] are not among the suite's seeds [0, 1]",
        ),
        ({"sweep": {"metric": "accuracy", "grid": {"lr": [1e-3]}, "select_seeds": []}}, "sweep.select_seeds: is []"),
        (
            {"sweep": {"metric": "accuracy", "grid": {"lr": [1e-3]}, "select_seeds": [0, 0]}},
            "give distinct integer seeds",
        ),
        ({"references": ["svm"]}, "references[0]: unknown reference 'svm'; valid references: majority, tfidf-logreg"),
        ({"references": [{"name": "tfidf-logreg", "options": {"c": 1}}]}, "unknown option 'c' for reference"),
        ({"references": ["softmax"]}, "references[0].name: reference 'softmax' has the label of an attention"),
        ({"referneces": ["majority"]}, "did you mean 'references'?"),
    ],
)
def test_mistakes_name_the_key_path(tmp_path: Path, changes: dict, expected: str) -> None:
    message = error_of(tmp_path, **changes)
    assert str(tmp_path / "keys.yaml") in message and expected in message, message


def test_select_seeds_runs_the_trials_at_those_seeds_and_the_chosen_one_at_the_others(tmp_path: Path) -> None:
    grid = {"metric": "accuracy", "grid": {"lr": [1e-3, 3e-3, 1e-2]}}
    full = load(tmp_path, sweep=grid)
    staged = load(tmp_path, sweep={**grid, "select_seeds": [1]})
    first = staged.cells()
    assert {c.seed for c in first} == {1} and len(first) == 3 * 3  # three labels, three trials, seed 1 only
    later = staged.cells({("rotten_tomatoes", "softmax"): 2, ("rotten_tomatoes", "kernel-elu"): 0})
    added = [c.name for c in later if c.seed == 0]
    assert added == ["rotten_tomatoes/softmax/s0/accuracy/t2", "rotten_tomatoes/kernel-elu/s0/accuracy/t0"]
    same = {c.id for c in full.cells()}  # the same cells as the unstaged sweep's: stored results carry over
    assert {c.id for c in later} <= same and len(same) == 3 * 3 * 2


@pytest.mark.parametrize("name, labels", [("paper-rt", 18), ("rt-tuned", 18)])
def test_table_3_suites(name: str, labels: int) -> None:
    suite = load_suite(name)
    assert len(suite.attentions) == labels and [t["name"] for t in suite.tasks] == ["rotten_tomatoes"]
    assert {r["label"] for r in suite.comparison_keys["references"]} == {"majority", "tfidf-logreg"}
    published = suite.comparison_keys["published"][0]["values"]
    assert set(published) == {a["label"] for a in suite.attentions}  # every row of Table 3 has its number
    assert suite.model["d_model"] == 128 and suite.training["epochs"] == 10
    if name == "rt-tuned":
        budgets = {c.attention.label: 0 for c in suite.cells()}
        for c in suite.cells():
            budgets[c.attention.label] += c.sweep is not None
        assert len({n for lab, n in budgets.items() if lab not in ("majority", "tfidf-logreg")}) == 1
        sweep = suite.comparison_keys["sweep"]
        for option, values in sweep["grid"].items():  # the drawn trials try every value of every option
            assert {t["values"][option] for t in sweep["trials"]} == set(values), option


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"published": {"source": "a paper", "values": {"softmax": {"accuracy": 68.01}}}},
            "published.values.softmax.accuracy: is 68.01, but accuracy is a fraction in [0, 1]; write 0.6801 for 68.01%",
        ),
        (
            {"published": {"source": "a paper", "values": {"softmax": {"nll": -0.3}}}},
            "published.values.softmax.nll: is -0.3, outside the range of nll, [0, inf]",
        ),
        (
            {"sweep": {"metric": "accuracy", "grid": {"lr": [1.0e-3]}, "seed": -1}},
            "sweep.seed: is -1; give an integer in 0..4294967295",
        ),
        (
            {
                "model": {"d_model": 16, "num_heads": 1},
                "attentions": [{"name": "softmax", "label": "two", "model": {"num_heads": 2}}],
                "sweep": {"metric": "accuracy", "grid": {"d_model": [15]}},
            },
            "keys.yaml: sweep.grid (point 0): {'d_model': 15} (sweep.grid.d_model) does not suit the model of attention "
            "'two' ({'d_model': 16, 'num_heads': 2})",
        ),
    ],
)
def test_published_ranges_and_sweep_seeds_and_grids_are_checked_at_the_door(
    tmp_path: Path, changes: dict, expected: str
) -> None:
    assert expected in error_of(tmp_path, **changes)


def test_a_sweep_grid_is_checked_against_the_suites_model_not_the_default(tmp_path: Path) -> None:
    suite = load(
        tmp_path,
        model={"d_model": 15, "num_heads": 1},
        attentions=["softmax"],
        sweep={"metric": "accuracy", "grid": {"d_model": [15, 30]}},
    )  # the default num_heads=2 refused 15
    assert [t["model"] for t in suite.comparison_keys["sweep"]["trials"]] == [{"d_model": 15}, {"d_model": 30}]


def test_a_sweep_over_a_plug_in_measurement_is_refused_unless_it_declares_it_takes_one(tmp_path, monkeypatch):
    """A sweep over `fake_cells:tiny_train` only was silently not applied (one untuned cell per label); now refused,
    and applied once the plug-in's options declare `swept = True`."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins
    from fake_cells import TinyTrainOptions

    sweep = {"metric": "accuracy", "grid": {"lr": [1e-3, 3e-3]}}
    tiny = {"measurements": ["fake_cells:tiny_train"], "sweep": sweep}
    assert "sweep: none of this suite's measurements (fake_cells:tiny_train) takes a sweep's trials" in error_of(
        tmp_path, **tiny
    )
    mixed = error_of(tmp_path, **{**tiny, "measurements": ["accuracy", "fake_cells:tiny_train"]})
    assert "measurements[1]: plug-in measurement 'fake_cells:tiny_train' does not say whether the sweep" in mixed
    monkeypatch.setattr(TinyTrainOptions, "swept", True, raising=False)
    assert {c.sweep.trial for c in load(tmp_path, **tiny).cells() if c.sweep is not None} == {0, 1}
