"""The attnbench command: listings, help, user errors (one line, exit 2, nothing written), show."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import build_parser, main
from harness.suite import suite_names

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # fake_cells plugins


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default run folders (runs/...) land here


def tiny_suite(tmp_path: Path, **changes) -> Path:
    suite = {"name": "tiny", "description": "cli test", "attentions": ["softmax"], "seeds": [0, 1],
             "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32},
             "training": {"epochs": 1, "batch_size": 32}, "measurements": ["fake_cells:tiny_train"], **changes}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_help_of_every_verb(capsys):
    for verb in ([], ["list"], ["run"], ["report"], ["leaderboard"], ["show"]):
        with pytest.raises(SystemExit) as info:
            main([*verb, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: attnbench")
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for flag in ("--out", "--workers", "--executor", "--address", "--device", "--fresh", "--filter", "--cell-timeout"):
        assert flag in run_help


def test_list_attention_shows_options_and_capabilities_and_filters_by_glob(capsys):
    assert main(["list", "attention", "soft*"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("softmax: ")
    assert "capabilities: padding_mask=yes" in out and "backend ('auto' | 'math'" in out
    assert "performer" not in out  # the glob filters


def test_list_kinds(capsys):
    assert main(["list", "suites"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in suite_names())
    assert main(["list", "metrics"]) == 0 and "expected_calibration_error" in capsys.readouterr().out
    assert main(["list", "measurements"]) == 0 and "accuracy:" in capsys.readouterr().out
    assert main(["list"]) == 0 and "attention: " in capsys.readouterr().out
    assert main(["list", "atention"]) == 2
    assert "did you mean 'attention'?" in capsys.readouterr().err


def test_unknown_suite_name_exits_2_with_a_suggestion(capsys):
    assert main(["run", "smok"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnbench: error: unknown suite 'smok'; did you mean 'smoke'?")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not Path("runs").exists()


def test_suite_typo_exits_2_names_the_key_and_writes_nothing(tmp_path, capsys):
    path = tiny_suite(tmp_path, attentions=[{"name": "performer", "options": {"num_featurs": 8}}])
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tiny.yaml: attentions[0].options.num_featurs: unknown option 'num_featurs'" in err
    assert "did you mean 'num_features'?" in err and err.count("\n") == 1
    assert not Path("runs").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_run_show_and_resume_through_the_cli(tmp_path, capsys):
    path = tiny_suite(tmp_path)
    assert main(["run", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "tiny: 2 cells: 2 ok, 0 failed, 0 skipped (0 kept from before, 2 run)" in out and "runs/tiny" in out
    cell_file = sorted(Path("runs/tiny/cells").glob("*.json"))[0]
    assert main(["show", cell_file.stem[:6], "--run", "runs/tiny"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("none/softmax/s") and cell_file.stem in shown and " ok" in shown and "accuracy" in shown
    assert main(["run", str(path), "--quiet", "--filter", "*/s1/*"]) == 0
    assert "1 cells: 1 ok, 0 failed, 0 skipped (1 kept from before, 0 run)" in capsys.readouterr().out
    assert main(["run", str(path), "--quiet", "--filter", "nothing*"]) == 2
    assert "matches none of the 2 cells" in capsys.readouterr().err
    assert main(["run", str(path), "--quiet", "--fresh", "--filter", "*/s0/*"]) == 0
    assert len(list(Path("runs").glob("tiny-*/cells/*.json"))) == 1 and len(list(Path("runs/tiny/cells").iterdir())) == 2
    changed = tiny_suite(tmp_path, seeds=[1])  # an edited suite resumes the same folder and says what is stale
    assert main(["run", str(changed), "--quiet"]) == 0
    assert "also holds 1 results of cells that are not in this version" in capsys.readouterr().err
    assert main(["show", "ffff", "--run", "runs/tiny"]) == 2
    assert main(["report", str(tmp_path / "not-a-run")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_console_script_exits_1_when_a_cell_fails(tmp_path):
    path = tiny_suite(tmp_path, attentions=[{"name": "fake_cells:Raises", "label": "raises"}], seeds=[0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    script = Path(sys.executable).parent / "attnbench"  # the installed console script
    result = subprocess.run([str(script), "run", str(path), "--out", str(tmp_path / "run")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "failed: none/raises/s0/fake_cells:tiny_train: RuntimeError: this attention always fails" in result.stderr
    assert "1 cells: 0 ok, 1 failed" in result.stdout
