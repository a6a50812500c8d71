"""The built distribution: every package of the tree, the shipped suites and the kernel source go in it."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_of_the_tree_is_listed_for_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    package_of = {"harness": "attnbench", "baselines": "attnbench.baselines"}
    found = {
        ".".join((package_of[top], *p.parent.relative_to(ROOT / top).parts))
        for top in package_of
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found | {"attnbench.suites"} == listed


def test_the_wheel_installs_exactly_one_top_level_package(tmp_path):
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {name.split(".")[0] for name in listed} == {"attnbench"}


@pytest.mark.slow
def test_the_wheel_carries_the_suites_and_finds_them_installed(tmp_path):
    pytest.importorskip("build")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    wheel = next(tmp_path.glob("attnbench-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (ROOT / "suites").glob("*.yaml"))
    assert sorted(Path(n).name for n in names if n.startswith("attnbench/suites/")) == shipped
    assert "attnbench/kernels/native/fused_linear.cpp" in names
    assert {n.split("/")[0] for n in names if not n.startswith("attnbench-")} == {"attnbench"}
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a wheel is installed by unpacking it
    listing = subprocess.run(
        [sys.executable, "-c", "import attnbench.suite as s; print(s.suites_dir(), *s.suite_names())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site)},
    )
    where, *names_found = listing.stdout.split()
    assert Path(where) == site / "attnbench" / "suites" and names_found == sorted(Path(n).stem for n in shipped)
