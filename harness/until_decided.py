"""`attnbench run SUITE --until-decided`: add seeds to a task's labels while pairs of interest stay undecided and the
budget lasts.

Orchestration above the executor, one round at a time: run the cells of the suite as it stands (the executor), read
the run folder's results through the inference engine, and choose the next round's seeds. Data still flows one
way (suite -> cells -> executor -> store -> report); the loop only decides which cells the next round's suite
holds. A round adds one seed (the next unused integer) to every label of a pair worth more seeds, on that pair's
task and on both sides, so the pair stays paired. Which pairs are worth more seeds is the engine's
(`attnbench.decisions.budget`): undecided, under `max_seeds`, and decidable within it by the power figures; a pair
no number of seeds within the budget can decide gets none: the budget goes where it can decide.

The suite of a round is the written suite with its added seeds (`with_extra_seeds`): its seeds are the union, and
`exclude` leaves out every (task, label, added seed) the loop did not choose, so the run folder's plan (run.json)
holds exactly the cells that ran. Resuming reads the added seeds back from the stored cells
(`stored_extra_seeds`). The settings are recorded in run.json under `until_decided`, where the report's section
of the same name finds them and lists what stayed undecided, with the seeds it would need.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from attnbench.decisions.budget import WORTH, budget_states
from attnbench.decisions.cells import cells_frame
from attnbench.decisions.pairwise import compare_frame
from attnbench.decisions.settings import comparison_settings
from attnbench.errors import UserError
from attnbench.executor import RunOptions, RunSummary, run_suite
from attnbench.metrics import headline_metric
from attnbench.report.inference import ALPHA
from attnbench.results import load_runs, metric_names
from attnbench.suite import Suite

Pairs = Literal["reference", "all"]


@dataclasses.dataclass(frozen=True)
class UntilDecided:
    """The loop's budget and question: at most `max_seeds` seeds per label; the pairs of interest are each label
    against `reference` ("reference"; default: the suite's first softmax label) or every pair of a task ("all")."""

    max_seeds: int = 10
    pairs: Pairs = "reference"
    reference: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def reference_label(suite: Suite, given: str | None) -> str:
    """The label the 'reference' pairs compare against: `given` (checked), else the suite's first softmax label."""
    labels = [a["label"] for a in suite.attentions]
    if given is not None:
        if given not in labels:
            raise UserError(
                f"--reference {given!r} is not a label of suite {suite.name!r}; labels: {', '.join(labels)}"
            )
        return given
    softmax = [a["label"] for a in suite.attentions if a["name"] == "softmax"]
    if not softmax:
        raise UserError(
            f"suite {suite.name!r} has no softmax label to compare against; give --reference LABEL "
            f"(one of {', '.join(labels)}) or --pairs all"
        )
    return softmax[0]


def _glob_literal(text: str) -> str:
    """`text` as a glob that matches only itself (fnmatch's brackets escaped)."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)


def task_labels(suite: Suite) -> set[str]:
    """The task part of the suite's cell names ('none' for a measurement that takes no task)."""
    return {cell.task.label for cell in suite.cells()}


def with_extra_seeds(suite: Suite, extra: dict[tuple[str, str], set[int]], settings: UntilDecided) -> Suite:
    """The suite of a round: its seeds and every added one, the added seeds left out (exclude) wherever the loop
    did not add them, and the loop's settings under comparison key `until_decided` (stored in run.json)."""
    added = sorted({s for seeds in extra.values() for s in seeds} - set(suite.seeds))
    tasks = sorted(task_labels(suite))
    labels = [a["label"] for a in suite.attentions]
    exclude = [
        f"{_glob_literal(task)}/{_glob_literal(label)}/s{seed}/*"
        for seed in added
        for task in tasks
        for label in labels
        if seed not in extra.get((task, label), set())
    ]
    keys = {**suite.comparison_keys, "until_decided": settings.as_dict()}
    return dataclasses.replace(
        suite, seeds=[*suite.seeds, *added], exclude=[*suite.exclude, *exclude], comparison_keys=keys
    )


def stored_extra_seeds(suite: Suite, run_dir: Path) -> dict[tuple[str, str], set[int]]:
    """Per (task label, attention label): the seeds beyond the suite's that ok cells of this suite already hold in
    `run_dir` (a resumed --until-decided run's added seeds)."""
    extra: dict[tuple[str, str], set[int]] = {}
    cells = Path(run_dir) / "cells"
    if not cells.is_dir():
        return extra
    tasks = task_labels(suite)
    labels = {a["label"] for a in suite.attentions}
    for path in cells.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        cell = record.get("cell") or {}
        task = (cell.get("task") or {}).get("label") or (cell.get("task") or {}).get("name")  # as in CellSpec.name
        label = (cell.get("attention") or {}).get("label")
        seed = cell.get("seed")
        if (
            record.get("status") == "ok"
            and cell.get("suite") == suite.name
            and task in tasks
            and label in labels
            and isinstance(seed, int)
            and seed not in suite.seeds
        ):
            extra.setdefault((task, label), set()).add(seed)
    return extra


def pairs_of_interest(run_dir: Path, suite: Suite, settings: UntilDecided) -> pd.DataFrame:
    """The engine's rows (`attnbench.compare` columns, plus `measurement` and `budget`: decided, budget reached,
    beyond the budget or worth more seeds, `attnbench.decisions.budget`) of every pair of interest, per
    measurement's headline metric and task."""
    comparisons = comparison_settings(suite.comparison_keys.get("comparisons"))
    reference = reference_label(suite, settings.reference) if settings.pairs == "reference" else None
    results = load_runs([Path(run_dir)])
    found = []
    for measurement in dict.fromkeys(m["name"] for m in suite.measurements):
        cells = results.of(measurement)
        metric = headline_metric(metric_names(cells))
        if metric is None:
            continue
        frame = cells_frame(cells, metric)
        frame = frame[frame["metric"] == metric]
        if reference is not None:
            frame = frame[frame["task"].isin(set(frame.loc[frame["label"] == reference, "task"]))]
        if frame.empty:
            continue
        rows = compare_frame(
            frame,
            metric=metric,
            reference=reference,
            margin=comparisons.margin(metric),
            alpha=ALPHA,
            correction=comparisons.correction,
        )
        found.append(rows.assign(measurement=measurement))
    rows = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if rows.empty:
        return rows
    return rows.assign(budget=budget_states(rows, settings.max_seeds, ALPHA))


def admitted(task: str, label: str, seed: int, measurement: str, filters: tuple[str, ...]) -> bool:
    """Whether --filter's globs (none: every cell) admit the cell `task/label/s<seed>/measurement`."""
    name = f"{task}/{label}/s{seed}/{measurement}"
    return not filters or any(fnmatch.fnmatchcase(name, pattern) for pattern in filters)


def next_seeds(
    rows: pd.DataFrame, suite: Suite, extra: dict[tuple[str, str], set[int]], filters: tuple[str, ...] = ()
) -> dict[tuple[str, str], int]:
    """Per (task, label) of the pairs worth more seeds: the next seed to add (one past every seed the task holds).
    A pair one of whose next cells --filter leaves out gets none: the round could not run it, and a seed added
    without its cell would be chosen again every round."""
    if rows.empty:
        return {}
    worth = rows[rows["budget"] == WORTH]
    chosen: dict[tuple[str, str], int] = {}
    for task, part in worth.groupby("task", sort=True):
        held = set(suite.seeds) | {s for (t, _), seeds in extra.items() if t == task for s in seeds}
        seed = max(held) + 1
        runnable = [
            (a, b)
            for a, b, measurement in zip(part["label_a"], part["label_b"], part["measurement"], strict=True)
            if all(admitted(str(task), str(label), seed, str(measurement), filters) for label in (a, b))
        ]
        for label in sorted({label for pair in runnable for label in pair}):
            chosen[(str(task), str(label))] = seed
    return chosen


def run_until_decided(
    suite: Suite,
    run_dir: Path,
    options: RunOptions,
    settings: UntilDecided,
    announce: Callable[[str], None] | None = None,
) -> tuple[RunSummary, pd.DataFrame]:
    """Rounds of run, judge, add seeds (module docstring) until no pair of interest is worth more seeds; returns the
    last round's summary (its counts over the whole plan) and the pairs of interest as they stand."""
    if settings.max_seeds < 2:
        raise UserError(f"--max-seeds {settings.max_seeds} must be at least 2 (one seed decides nothing)")
    if settings.pairs == "reference":  # resolved (or refused) before anything runs; recorded in run.json
        settings = dataclasses.replace(settings, reference=reference_label(suite, settings.reference))
    extra = stored_extra_seeds(suite, run_dir)
    ran, seconds, round_number = 0, 0.0, 1
    while True:
        summary = run_suite(with_extra_seeds(suite, extra, settings), run_dir, options)
        ran, seconds = ran + summary.ran, seconds + summary.seconds
        if summary.failures:
            break  # a failed cell is the user's to look at, not a reason to add seeds
        rows = pairs_of_interest(run_dir, suite, settings)
        chosen = next_seeds(rows, suite, extra, options.filters)
        undecided = int((rows["verdict"] == "undecided").sum()) if len(rows) else 0
        worth = int((rows["budget"] == WORTH).sum()) if len(rows) else 0
        if announce is not None:
            announce(
                f"until-decided round {round_number}: {len(rows)} pairs of interest, {undecided} undecided, "
                f"{worth} worth more seeds within {settings.max_seeds}"
                + (
                    f"; adding seed {max(chosen.values())} to {len(chosen)} task-label pairs"
                    if chosen
                    else "; done: --filter leaves out their next cells (widen it to add their seeds)"
                    if worth
                    else "; done"
                )
            )
        if not chosen or (round_number > 1 and summary.ran == 0):
            break  # nothing worth a seed, or the last round's added seeds ran nothing (a safety net)
        for key, seed in chosen.items():
            extra.setdefault(key, set()).add(seed)
        round_number += 1
    return dataclasses.replace(summary, ran=ran, seconds=seconds), rows
