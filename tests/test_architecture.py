"""The docs that map the house stay true: every file docs/architecture.md names exists, and docs/suites.md has a row
for every shipped suite and for no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("harness/", "baselines/", "suites/", "tests/", "docs/")


def named_paths(text: str) -> list[str]:
    """Every `path` in backticks that starts with one of the repository's folders."""
    return [p for p in re.findall(r"`([^`\s]+)`", text) if p.startswith(FOLDERS)]


def test_every_file_the_architecture_page_names_exists():
    paths = named_paths((ROOT / "docs" / "architecture.md").read_text())
    assert len(paths) > 40  # the page names the files of each layer and of each route
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == []


def test_the_architecture_page_names_every_top_level_folder_of_the_harness():
    paths = set(named_paths((ROOT / "docs" / "architecture.md").read_text()))
    folders = {f"harness/{p.name}/" for p in (ROOT / "harness").iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert folders - paths == set()


def test_the_suites_page_has_a_row_for_every_shipped_suite_and_no_other():
    rows = re.findall(r"^\| `([^`]+)` \|", (ROOT / "docs" / "suites.md").read_text(), flags=re.M)
    shipped = sorted(p.stem for p in (ROOT / "suites").glob("*.yaml"))
    suites_table = [r for r in rows if not r.startswith("attnbench ")]
    assert sorted(suites_table) == shipped
