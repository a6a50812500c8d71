"""The published numbers the suites carry are their sources': every `published:` value of every shipped suite against
Tables 1-3 as docs/paper.md restates them (parsed here from its text, not copied), or LRA's against the table that
docs/tasks-and-measurements.md restates, and the paper suites carry
every accuracy those tables give. Every section and label the code cites in docs/paper.md exists there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "docs" / "paper.md"
UPPER = {
    "softmax": "softmax",
    "vanilla-favor-WqWk": "vanilla-favor-untied",
    "Performer": "performer",
    "Linformer": "linformer",
}
UPPER_METRICS = ("accuracy", "mcc", "nll", "brier", "ece", "train_seconds")  # Table 3's columns, in order
NUMBER = r"\(?\d*\.\d+\)?"


def paper_tables(text: str) -> dict[str, dict[str, dict[str, float]]]:
    """task -> label -> metric -> value from docs/paper.md's "Sentence tasks: reported numbers" section. A value in
    parentheses (Linformer's LogLoss, a repeat of its accuracy) is left out, as the suites leave it."""
    section = text.split("## Sentence tasks: reported numbers", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"\n(?=Rotten Tomatoes \(Table 3\)|SST-2 \(Table 1|QQP \(Table 2\))", section)
    tables: dict[str, dict[str, dict[str, float]]] = {}
    for part in parts:
        task = {"Rotten": "rotten_tomatoes", "SST-2 ": "sst2", "QQP (T": "qqp"}.get(part[:6])
        if task is None:
            continue
        rows = tables.setdefault(task, {})
        if task == "qqp":
            for name, value in re.findall(r"(softmax|Linformer) (\.\d+)", part):
                rows[UPPER[name]] = {"accuracy": float(value)}
            kernel = re.search(r"kernel-([a-z0-9-]+) (\.\d+) \(vanilla (\.\d+)\)", part)
            rows[f"kernel-{kernel[1]}"] = {"accuracy": float(kernel[2])}
            rows[f"vanilla-{kernel[1]}"] = {"accuracy": float(kernel[3])}
            continue
        for name, values in re.findall(rf"({'|'.join(UPPER)}) ({NUMBER}(?:/{NUMBER})*)", part):
            rows[UPPER[name]] = {
                metric: float(v) for metric, v in zip(UPPER_METRICS, values.split("/")) if not v.startswith("(")
            }
        for kind, vanilla, kernel in re.findall(r"([a-z0-9-]+) (\.\d+) \| (\.\d+)", part):
            rows[f"vanilla-{kind}"] = {"accuracy": float(vanilla)}
            rows[f"kernel-{kind}"] = {"accuracy": float(kernel)}
    return tables


def suite_published(path: Path) -> list[tuple[str, str, str, float]]:
    """(task, label, metric, value) of a suite's `published:` blocks (one block or a list)."""
    suite = yaml.safe_load(path.read_text())
    blocks = suite.get("published") or []
    blocks = [blocks] if isinstance(blocks, dict) else blocks
    tasks = [t["name"] if isinstance(t, dict) else t for t in suite.get("tasks", [])]
    out = []
    for block in blocks:
        task = block.get("task") or (tasks[0] if len(tasks) == 1 else None)
        for label, metrics in block["values"].items():
            out += [(task, label, metric, float(value)) for metric, value in metrics.items()]
    return out


def test_the_parser_reads_every_row_of_tables_1_to_3():
    tables = paper_tables(PAPER.read_text())
    assert {task: len(rows) for task, rows in tables.items()} == {"rotten_tomatoes": 18, "sst2": 18, "qqp": 4}
    assert tables["rotten_tomatoes"]["linformer"] == {
        "accuracy": 0.6614,
        "mcc": 0.3230,
        "brier": 0.2260,
        "ece": 0.2509,
        "train_seconds": 13.7,
    }
    assert tables["sst2"]["kernel-porf-softplus"] == {"accuracy": 0.8188}
    assert tables["qqp"]["vanilla-softmaxfeat"] == {"accuracy": 0.7801}


LRA_DOC = ROOT / "docs" / "tasks-and-measurements.md"
LRA_COLUMNS = ("listops", "byte_text", "byte_retrieval", "pixels", "pathfinder")


def lra_table(text: str) -> dict[str, dict[str, dict[str, float]]]:
    """task -> label -> {accuracy} from the published LRA table of docs/tasks-and-measurements.md (in %)."""
    tables: dict[str, dict[str, dict[str, float]]] = {}
    for label, numbers in re.findall(r"^\| ([a-z]+)(?: \([A-Za-z]+\))? \| ([\d. |]+)\|$", text, re.MULTILINE):
        values = [float(v) for v in numbers.split("|")]
        assert len(values) == len(LRA_COLUMNS) + 1 and abs(sum(values[:-1]) / 5 - values[-1]) < 0.006, (label, values)
        for task, value in zip(LRA_COLUMNS, values, strict=False):
            tables.setdefault(task, {})[label] = {"accuracy": round(value / 100, 4)}
    return tables


def test_the_lra_table_has_its_four_rows():
    tables = lra_table(LRA_DOC.read_text())
    assert sorted(tables["listops"]) == ["linformer", "nystromformer", "performer", "softmax"]
    assert tables["byte_retrieval"]["nystromformer"] == {"accuracy": 0.7956}


@pytest.mark.parametrize("suite", sorted(p.name for p in (ROOT / "suites").glob("*.yaml")))
def test_every_published_value_is_its_sources(suite):
    """The Coulomb paper's numbers against docs/paper.md; LRA's (suites/lra.yaml) against its restated table."""
    tables = lra_table(LRA_DOC.read_text()) if suite == "lra.yaml" else paper_tables(PAPER.read_text())
    for task, label, metric, value in suite_published(ROOT / "suites" / suite):
        assert tables.get(task, {}).get(label, {}).get(metric) == value, (task, label, metric, value)


def test_the_paper_suite_carries_every_accuracy_of_tables_1_to_3():
    tables = paper_tables(PAPER.read_text())
    carried = {
        (task, label)
        for task, label, metric, _ in suite_published(ROOT / "suites" / "paper.yaml")
        if metric == "accuracy"
    }
    assert carried == {(task, label) for task, rows in tables.items() for label in rows}


NOT_CITING = ("tests", "results", "docs", "build", "dist")  # every other top-level folder may cite the paper
SECTION_CITATION = re.compile(r'(?:PAPER\.md|docs/paper\.md) "([^"]+)"')
LABEL = re.compile(
    r"\b(?:eq\. [0-9A-Z]\.\d+|appendix [A-Z](?:\.\d+)?|app\. [A-Z](?:\.\d+)?|sec\. \d+|section \d+"
    r"|algorithm \d+|table \d+|figure \d+)",
    re.IGNORECASE,
)


def citing_texts() -> dict[str, str]:
    """Path -> text of every file that may cite the paper: code, suites and scripts in any top-level folder
    (harness/, baselines/, suites/, benchmarks/, a plugin's), README.md and docs/."""
    folders = [
        p
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in NOT_CITING and not p.name.endswith(".egg-info")
    ]
    paths = [p for folder in folders for p in folder.rglob("*") if p.suffix in (".py", ".yaml", ".cpp")]
    paths += [ROOT / "README.md", *(p for p in (ROOT / "docs").glob("*.md") if p != PAPER)]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_every_section_the_code_cites_is_a_heading_of_the_paper_page():
    headings = [line.lstrip("#").strip().lower() for line in PAPER.read_text().splitlines() if line.startswith("#")]
    cited = {(path, title) for path, text in citing_texts().items() for title in SECTION_CITATION.findall(text)}
    assert cited, "no citation found: the pattern no longer matches the code"
    missing = sorted((path, title) for path, title in cited if not any(title.lower() in h for h in headings))
    assert not missing, missing


def test_every_equation_table_figure_and_appendix_the_code_names_is_on_the_paper_page():
    paper = PAPER.read_text().lower()
    cited = {(path, label.lower()) for path, text in citing_texts().items() for label in LABEL.findall(text)}
    assert ("baselines/coulomb/phase_a.py", "eq. 2.2") in cited
    missing = sorted((path, label) for path, label in cited if label not in paper)
    assert not missing, missing
