"""The HTML report: self-contained (no network), and in a real headless Chromium the tables and images
show and clicking a header sorts its column numerically, missing values last."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from report_fixture import make_fake_run

from attnbench.report import write_report
from attnbench.report.html import table_html
from attnbench.report.load import load_runs
from attnbench.report.table import Table
from attnbench.report.tables import all_tables

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
LABELS = ("softmax", "kernel-favor", "elu")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = make_fake_run(tmp_path_factory.mktemp("run"), tasks=("sst2", "listops"), labels=LABELS)
    return write_report(run)


def test_page_is_self_contained(report: Path) -> None:
    page = (report / "index.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "page must not load from the network"
    assert "@import" not in page and "url(" not in page
    assert page.count("data:image/png;base64,") == len(list((report / "plots").glob("*.png"))) > 0
    assert page.count('<table class="sortable"') == len(list((report / "tables").glob("*.csv")))
    for key in (
        "git_commit",
        "0bf2ea5deadbeef",
        "torch",
        "2.13.0",
        "seeds",
        "not valid JSON",
        "1 unreadable",
        "1 not run",
    ):
        assert key in page, key
    assert {"index.html", "report.md", "provenance.json", "tables", "plots"} <= {p.name for p in report.iterdir()}


def test_report_folder_layout(report: Path) -> None:
    tables = {p.stem for p in (report / "tables").glob("*.csv")}
    assert {
        "leaderboard",
        "task_sst2",
        "task_listops",
        "paired",
        "robustness",
        "robustness_feature_budget",
        "efficiency",
        "fidelity",
        "coulomb",
        "kernel_experiment",
        "kernel_f1",
        "kernel_paper",
        "kernel_langevin",
        "kernel_ablation",
        "kernel_scaling",
        "cells_not_ok",
        "lra",  # listops is an LRA task: the LRA-style table and the pairs each task separates
        "lra_pairs",
        "phase_a_mechanism",  # the fixture's coulomb cells carry phase-A diagnostics
        "quality_cost",  # accuracy against training time and the attention's forward time, per task
        "separation",  # per task, the pairs of its labels it separates
    } == tables
    for stem in tables:
        assert (report / "tables" / f"{stem}.md").exists() and (report / "tables" / f"{stem}.tex").exists()
    for png in (report / "plots").glob("*.png"):
        assert png.with_suffix(".svg").exists()


def test_table_cells_are_html_escaped() -> None:
    text = pd.DataFrame({"label": ["<script>alert(1)</script>", "a&b"], "accuracy": ["0.5", "0.7"]})
    best = pd.DataFrame({"label": [False, False], "accuracy": [False, True]})
    page = table_html(Table("t", "T <1>", pd.DataFrame(), text, best, ["note & more"]))
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a&amp;b" in page
    assert "<strong>0.7</strong>" in page and "T &lt;1&gt;" in page and "note &amp; more" in page


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium / chromedriver not installed (Debian: apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (dev extra)")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="attnbench-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _column(driver, table_id: str, header: str) -> list[str]:
    return driver.execute_script(
        """const t = document.getElementById(arguments[0]);
           const col = Array.from(t.tHead.rows[0].cells).findIndex(h => h.textContent.trim() === arguments[1]);
           return Array.from(t.tBodies[0].rows).map(r => r.cells[col].textContent.trim());""",
        table_id,
        header,
    )


def _click(driver, table_id: str, header: str) -> None:
    from selenium.webdriver.common.by import By

    for th in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} thead th"):
        if th.text.strip() == header:
            driver.execute_script("arguments[0].scrollIntoView();", th)
            th.click()
            return
    raise AssertionError(f"no header {header!r} in {table_id}")


def _number(text: str) -> float:
    return float(re.match(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?", text).group(0).replace(",", ""))


def test_browser_shows_tables_images_and_sorts(report: Path, browser) -> None:
    browser.get((report / "index.html").resolve().as_uri())
    tables = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.sortable')).map(t => [t.id, t.tBodies[0].rows.length,"
        " t.getBoundingClientRect().height]);"
    )
    expected = {f"table-{t.name}": len(t.text) for t in all_tables(load_runs([report.parent]))}
    assert {t[0]: t[1] for t in tables} == expected
    assert all(height > 20 for _, _, height in tables)
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);"
    )
    assert len(images) == len(list((report / "plots").glob("*.png")))
    assert all(done and w > 100 and h > 100 for done, w, h in images), images

    # numeric-aware: tokens/s like "1,925,128" must sort after "579,484"
    _click(browser, "table-efficiency", "tokens/s")
    values = _column(browser, "table-efficiency", "tokens/s")
    present = [_number(v) for v in values if v != "—"]
    assert present == sorted(present) and len(present) > 3
    assert values[len(present) :] == ["—"] * (len(values) - len(present))  # missing (the OOM point) last
    _click(browser, "table-efficiency", "tokens/s")
    values = _column(browser, "table-efficiency", "tokens/s")
    present = [_number(v) for v in values if v != "—"]
    assert present == sorted(present, reverse=True) and values[-1] == "—"

    # the leaderboard: elu has no listops result, so its cell is a dash that stays last either way
    for _ in range(2):
        _click(browser, "table-leaderboard", "listops accuracy")
        values = _column(browser, "table-leaderboard", "listops accuracy")
        assert values[-1] == "—"
        nums = [_number(v) for v in values[:-1]]
        assert nums in (sorted(nums), sorted(nums, reverse=True))
    labels = _column(browser, "table-leaderboard", "label")
    _click(browser, "table-leaderboard", "label")
    assert _column(browser, "table-leaderboard", "label") == sorted(labels)


def test_report_out_never_deletes_a_users_files(tmp_path: Path, report: Path) -> None:
    """`--out DIR` where DIR holds the user's plots/figure3.pdf and tables/table1.tex: refused, both kept; a folder
    the report wrote is replaced, and refused again once the user adds a file of their own to it."""
    import shutil

    import pytest

    from attnbench.errors import UserError
    from attnbench.report import MARKER, write_report

    run = report.parent
    mine = tmp_path / "paper"
    (mine / "plots").mkdir(parents=True)
    (mine / "tables").mkdir()
    (mine / "plots" / "figure3.pdf").write_bytes(b"%PDF")
    (mine / "tables" / "table1.tex").write_text("\\begin{tabular}")
    with pytest.raises(UserError, match="was not written by `attnbench report`"):
        write_report(run, mine)
    assert (mine / "plots" / "figure3.pdf").read_bytes() == b"%PDF" and (mine / "tables" / "table1.tex").is_file()

    ours = tmp_path / "ours"
    shutil.copytree(report, ours)
    assert (ours / MARKER).is_file()
    write_report(run, ours)  # only what the report wrote: replaced
    (ours / "plots" / "figure3.pdf").write_bytes(b"%PDF")
    with pytest.raises(UserError, match=r"holds files its report did not write \(plots/figure3.pdf\)"):
        write_report(run, ours)
    assert (ours / "plots" / "figure3.pdf").is_file()


def test_labels_whose_names_differ_only_in_punctuation_get_a_file_and_an_id_each(tmp_path: Path) -> None:
    from report_fixture import write_cell

    from attnbench.report import write_report
    from attnbench.report.table import slug

    assert len({slug("rt.v1"), slug("rt_v1"), slug("RT_v1"), slug("rt v1")}) == 4 and slug("rt_v1") == "rt_v1"
    for task, accuracy in (("rt.v1", 0.6), ("rt_v1", 0.9)):
        for seed in (0, 1):
            write_cell(tmp_path, label="softmax", task=task, seed=seed, metrics={"accuracy": accuracy})
    out = write_report(tmp_path)
    files = sorted(p.name for p in (out / "tables").glob("task_rt*.csv"))
    assert len(files) == 2, files
    page = (out / "index.html").read_text()
    ids = [part.split('"')[0] for part in page.split(' id="')[1:]]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
