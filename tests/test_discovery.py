"""Built-in plugins found by walking their packages (attnbench.registry.discover): nothing in the harness names the
Coulomb package, so deleting it leaves a harness that runs the smoke suite's other attentions and reports them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from processes import HANG_GUARD

from attnbench.registry import discover

ROOT = Path(__file__).resolve().parents[1]


def test_discovery_walks_a_package_and_leaves_out_what_it_keeps_on_demand():
    families = discover("attnbench.baselines")
    assert {"attnbench.baselines.softmax", "attnbench.baselines.coulomb", "attnbench.baselines.gla"} <= set(families)
    assert "attnbench.baselines.peers" not in families  # ON_DEMAND: needs the optional extra
    assert discover("attnbench.baselines", "measurement") == ["attnbench.baselines.coulomb.measurement"]
    assert discover("attnbench.baselines", "report") == ["attnbench.baselines.coulomb.report"]


def test_a_family_package_is_looked_for_its_report_without_importing_the_others():
    code = (
        "import sys; from attnbench.registry import discover; discover('attnbench.baselines', 'report'); "
        "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('attnbench.baselines.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported = set(json.loads(out))
    assert "attnbench.baselines.coulomb.report" in imported
    assert not {"attnbench.baselines.gla", "attnbench.baselines.softmax", "attnbench.baselines.coulomb.attention"} & (
        imported
    )


def _package_without_coulomb(where: Path) -> Path:
    """A copy of the import package laid out as installed (harness/ as attnbench/, baselines/ and suites/ inside
    it), without baselines/coulomb."""
    package = where / "attnbench"
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    shutil.copytree(ROOT / "harness", package, ignore=ignore)
    shutil.copytree(ROOT / "baselines", package / "baselines", ignore=shutil.ignore_patterns("coulomb", "__pycache__"))
    shutil.copytree(ROOT / "suites", package / "suites", ignore=ignore)
    return where


def test_without_the_coulomb_package_the_smoke_suites_other_attentions_run_and_report(tmp_path, children):
    smoke = yaml.safe_load((ROOT / "suites" / "smoke.yaml").read_text())
    others = [a for a in smoke["attentions"] if not (isinstance(a, dict) and a["name"] == "coulomb")]
    assert len(others) == len(smoke["attentions"]) - 1
    suite = {
        **{k: smoke[k] for k in ("tasks", "seeds", "model")},
        "name": "smoke-without-coulomb",
        "description": "the smoke suite's attentions other than coulomb",
        "attentions": others,
        "training": {"epochs": 1, "batch_size": 32, "lr": 3.0e-3},
        "measurements": ["accuracy"],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    env = {**os.environ, "PYTHONPATH": str(_package_without_coulomb(tmp_path / "pkg")), "HF_HUB_OFFLINE": "1"}

    def attnbench(*args: str) -> str:
        process = children.start(
            [sys.executable, "-m", "attnbench", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = process.communicate(timeout=HANG_GUARD)
        assert process.returncode == 0, err
        return out

    probe = (
        "import json, attnbench, attnbench.report.sections as s; from attnbench.registry import attention_names; "
        "from attnbench.measurements import measurement_names; "
        "print(json.dumps([attnbench.__file__, attention_names(), measurement_names(), "
        "[x.name for x in s.report_sections()]]))"
    )
    process = children.start([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, text=True)
    where, attentions, measurements, sections = json.loads(process.communicate(timeout=HANG_GUARD)[0])
    assert where.startswith(str(tmp_path))
    assert "coulomb" not in attentions and {"softmax", "random-features", "performer"} <= set(attentions)
    assert "kernel" not in measurements and "accuracy" in measurements
    assert not {"coulomb-phase-a", "kernel-experiment"} & set(sections) and "accuracy" in sections

    run = tmp_path / "run"
    out = attnbench(
        "run", str(tmp_path / "suite.yaml"), "--out", str(run), "--workers", "1", "--threads", "1", "--quiet"
    )
    assert f"{len(others)} cells: {len(others)} ok" in out
    attnbench("report", str(run))
    table = (run / "report" / "tables" / "leaderboard.md").read_text()
    assert all((a if isinstance(a, str) else a.get("label", a["name"])) in table for a in others)
