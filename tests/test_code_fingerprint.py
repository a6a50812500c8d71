"""Code is an input (issue 48, case 24): each cell records the code it ran; a rerun names the cells computed by
other code and reruns them on request; cells without a fingerprint read as unknown code; ids never move."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from attnbench.cell_spec import CellSpec
from attnbench.cli import main
from attnbench.code_fingerprint import cell_code, closure, code_changed
from attnbench.executor import RunOptions, run_suite
from attnbench.store import RunStore
from attnbench.suite import load_suite

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

RESULTS = Path(__file__).resolve().parents[1] / "results"

PLUGIN = '''
import torch
from torch import nn


class MeanAttention(nn.Module):
    """Every position gets the mean of the values (a plug-in the user edits)."""

    def __init__(self, head_dim=64, num_heads=1):
        super().__init__()

    def forward(self, q, k, v, key_padding_mask=None):
        return v.mean(dim=-2, keepdim=True).expand_as(v)
'''


def plugin_suite(folder: Path, module: str) -> Path:
    (folder / f"{module}.py").write_text(PLUGIN)
    path = folder / "code.yaml"
    suite = {
        "name": "code",
        "description": "a plug-in attention on echo cells",
        "attentions": [f"{module}:MeanAttention"],
        "tasks": [{"name": "fake_cells:tiny_task"}],
        "seeds": [1, 2],
        "measurements": [{"name": "fake_cells:echo"}],
    }
    path.write_text(yaml.safe_dump(suite))
    return path


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_an_edited_plugin_is_named_kept_by_default_and_rerun_on_request(plugin_dir, capsys):
    suite = plugin_suite(plugin_dir, "edited_plugin")
    run = plugin_dir / "run"
    assert main(["run", str(suite), "--out", str(run), "--workers", "1", "--quiet"]) == 0
    ids = sorted(p.name for p in (run / "cells").glob("*.json"))
    code = json.loads(next((run / "cells").glob("*.json")).read_text())["provenance"]["code"]
    assert code["modules"].keys() >= {"edited_plugin", "fake_cells"}
    capsys.readouterr()

    with (plugin_dir / "edited_plugin.py").open("a") as f:
        f.write("\nSCALE = 2.0  # an edit\n")
    assert main(["run", str(suite), "--out", str(run), "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr()
    assert "(2 kept from before, 0 run; 2 of those kept were computed by other code: --rerun-changed-code" in out.out
    assert "2 finished cells were computed by other code" in out.err and "(attention)" in out.err
    assert "modules that differ: edited_plugin;" in out.err

    assert main(["run", str(suite), "--out", str(run), "--workers", "1", "--quiet", "--rerun-changed-code"]) == 0
    out = capsys.readouterr()
    assert "(0 kept from before, 2 run, 2 of them again as their code changed)" in out.out
    assert sorted(p.name for p in (run / "cells").glob("*.json")) == ids  # the same cells, ids unchanged
    assert sorted(p.name for p in (run / "pruned").glob("*/cells/*.json")) == ids  # earlier results kept aside

    assert main(["run", str(suite), "--out", str(run), "--workers", "1", "--quiet"]) == 0
    assert "(2 kept from before, 0 run)" in capsys.readouterr().out


def test_cells_without_a_fingerprint_read_as_unknown_code_and_are_kept(plugin_dir):
    suite = load_suite(str(plugin_suite(plugin_dir, "unknown_plugin")))
    run = plugin_dir / "run"
    options = RunOptions(workers=1, show_progress=False, rerun_changed_code=True)
    run_suite(suite, run, options)
    store = RunStore(run)
    for record in store.records():  # as every committed run before fingerprints
        del record["provenance"]["code"]
        store.write_cell(record)
    summary = run_suite(suite, run, options)
    assert (summary.ran, summary.resumed, summary.code_changed) == (0, 2, 0)
    assert any("2 finished cells record no code fingerprint (unknown code" in note for note in summary.notes)
    assert summary.foreign == 0 and not (run / "pruned").exists()  # not stale, nothing moved


@pytest.mark.parametrize("run", ["lra-cpu", "recall"])
def test_committed_cells_read_as_unknown_code_under_their_own_ids(run):
    """Cells stored before code fingerprints existed (every lra-cpu cell, recall's first seeds) read as unknown
    code, not as changed; every committed cell, fingerprinted or not, keeps its id."""
    records = [json.loads(p.read_text()) for p in sorted((RESULTS / run / "cells").glob("*.json"))]
    older = [r for r in records if "code" not in (r.get("provenance") or {})][:20]
    assert older
    for record in older:
        assert code_changed((record.get("provenance") or {}).get("code"), {}) is None
    for record in records[:40]:
        assert CellSpec.from_json(record["cell"]).id == record["cell_id"]


def test_a_fingerprint_follows_the_attentions_imports_and_nothing_else():
    based = closure(["attnbench.baselines.based"], ("attnbench.baselines", "attnbench.kernels"))
    assert {"attnbench.baselines.based.recurrent", "attnbench.kernels.window", "attnbench.kernels.short_conv"} <= set(
        based
    )
    assert not any(
        m.startswith(("attnbench.tasks", "attnbench.measurements", "attnbench.baselines.gla")) for m in based
    )
    assert "attnbench.registry" not in based  # the harness's core is the git commit's to identify


def test_the_same_cell_has_one_fingerprint_and_parts_change_apart():
    cell = load_suite("smoke").cells()[0]
    first, again = cell_code(cell), cell_code(cell)
    assert first == again and code_changed(first, again) == []
    other = dict(first, task="0" * 16)
    assert code_changed(other, first) == ["task"]
