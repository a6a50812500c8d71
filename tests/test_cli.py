"""The attnbench command: listings, check, help, user errors (one line, exit 2, nothing written), show, progress."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from processes import HANG_GUARD

from attnbench.cli import build_parser, main
from attnbench.suite import suite_names

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # fake_cells plugins


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default run folders (runs/...) land here


def tiny_suite(tmp_path: Path, **changes) -> Path:
    suite = {
        "name": "tiny",
        "description": "cli test",
        "attentions": ["softmax"],
        "seeds": [0, 1],
        "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32},
        "training": {"epochs": 1, "batch_size": 32},
        "measurements": ["fake_cells:tiny_train"],
        **changes,
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_help_of_every_verb(capsys):
    for verb in ([], ["list"], ["check"], ["run"], ["report"], ["leaderboard"], ["show"]):
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
    assert main(["list", "metrics"]) == 0
    listed = capsys.readouterr().out
    assert "ece " in listed and "[lower is better; range [0, 1]; margin 0.01]" in listed
    assert "[higher is better; range [0, inf]; margin 10% of the other]" in listed  # throughput: relative margin
    assert main(["list", "metrics", "ece*"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["ece", "ece_equal_mass"]
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
    assert (
        len(list(Path("runs").glob("tiny-*/cells/*.json"))) == 1 and len(list(Path("runs/tiny/cells").iterdir())) == 2
    )
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
    result = subprocess.run(
        [str(script), "run", str(path), "--out", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert result.returncode == 1, result.stderr
    assert "failed: none/raises/s0/fake_cells:tiny_train: RuntimeError: this attention always fails" in result.stderr
    assert "1 cells: 0 ok, 1 failed" in result.stdout


def test_check_prints_each_verdict_and_exits_1_when_a_property_fails(capsys):
    assert main(["check", "softmax"]) == 0
    out = capsys.readouterr().out
    for prop in (
        "padding invariance",
        "finite at lengths 1 and 4096",
        "gradients",
        "determinism in evaluation",
        "causality",
        "one head's parameters shared by every head",
    ):
        assert f"holds  {prop} (PyTorch; no native path)" in out and "native off" not in out  # one pass
    assert out.rstrip().endswith("softmax: all properties hold")
    assert main(["check", "leaky_attention:LeakyAttention"]) == 1  # tests/leaky_attention.py lets padding in
    out = capsys.readouterr().out
    assert "FAILS  padding invariance (PyTorch; no native path): batch" in out and "n/a    causality" in out
    assert main(["check", "softmax", "-o", "backend=fast"]) == 2
    assert "backend" in capsys.readouterr().err
    assert main(["check", "softmax", "-o", "backend"]) == 2 and "KEY=VALUE" in capsys.readouterr().err


def test_list_attention_describes_a_module_class(capsys):
    assert main(["list", "attention", "leaky_attention:LeakyAttention"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("leaky_attention:LeakyAttention: Every query reads the mean") and "capabilities: " in out
    assert main(["list", "attention", "leaky_attention:Missing"]) == 2


def test_list_attention_flags_match_the_options(capsys):
    assert main(["list", "attention", "linformer"]) == 0
    out = capsys.readouterr().out
    assert "causal=no" in out and "causal (bool" not in out  # no causal form: the option is not offered
    assert main(["list", "attention", "coulomb"]) == 0
    assert "positive_features=yes*" in capsys.readouterr().out  # porf-softplus by default; trig is not positive


def test_show_takes_cell_names_and_globs(tmp_path, capsys):
    assert main(["run", str(tiny_suite(tmp_path)), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["show", "none/softmax/s1/fake_cells:tiny_train", "--run", "runs/tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("none/softmax/s1/fake_cells:tiny_train  (") and "/s0/" not in out
    assert main(["show", "none/softmax/*"]) == 0  # every folder under runs/
    out = capsys.readouterr().out
    assert out.count("fake_cells:tiny_train  (") == 2 and out.index("/s0/") < out.index("/s1/")
    assert main(["show", "none/softmax/s7/*", "--run", "runs/tiny"]) == 2
    assert "no cell named 'none/softmax/s7/*'" in capsys.readouterr().err


def test_tasks_take_labels_so_one_task_can_appear_twice(tmp_path, capsys):
    tasks = [
        {"name": "tiny-task", "label": "small", "options": {"rows": 16}},
        {"name": "tiny-task", "label": "large", "options": {"rows": 48}},
    ]
    path = tiny_suite(tmp_path, tasks=tasks, seeds=[0], measurements=["fake_cells:echo"])
    assert main(["run", str(path), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["show", "*/softmax/s0/fake_cells:echo", "--run", "runs/tiny"]) == 0
    out = capsys.readouterr().out
    assert "small/softmax/s0/fake_cells:echo" in out and "large/softmax/s0/fake_cells:echo" in out
    unlabelled = tiny_suite(tmp_path, tasks=["tiny-task", "tiny-task"], measurements=["fake_cells:echo"])
    assert main(["run", str(unlabelled), "--quiet"]) == 2
    assert "tasks[1]: label 'tiny-task' is already used by tasks[0]" in capsys.readouterr().err


def test_off_a_terminal_each_cell_and_epoch_prints_a_line_and_logs_it(tmp_path):
    path = tiny_suite(tmp_path, seeds=[0], training={"epochs": 2, "batch_size": 32})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(path), "--out", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )  # stdout is a pipe
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    name = "none/softmax/s0/fake_cells:tiny_train"
    assert f"start {name} (" in lines[0]
    epochs = [line for line in lines if f"{name} phase B" in line]
    assert [e.split("phase B ")[1][:4] for e in epochs] == ["1/2:", "2/2:"]
    assert all(" loss " in e and "val_accuracy" in e and e.endswith(" s") for e in epochs)
    assert f"end {name}: ok in " in lines[3] and lines[4].startswith("tiny: 1 cells: 1 ok")
    log = next((tmp_path / "run" / "logs").glob("*.log")).read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in log] == [line.split(" ", 1)[1] for line in lines[:4]]
