"""The suite keys for trustworthy comparisons: references, comparisons, published, sweep.

Validated here, in one place, and kept in the normalised suite (run.json), where the report reads
them; `attnbench.suite` calls `validate_comparison_keys`; the plan (attnbench.plan) expands references and sweep
trials into cells, and the sweep's choice of trial at run time is attnbench.sweep.

    references: [majority, tfidf-logreg]   # attention-free references on every text task (accuracy cells)
    comparisons: [default, [softmax, tfidf-logreg]]   # pairs a - b; "default": every kernel-<map> with
                                           # vanilla-<map>, every other label with softmax (the default)
    comparisons:                           # or, with how the pairs are judged (attnbench.decisions.settings):
      pairs: [default]                     # optional, as the list form
      margin: {accuracy: 0.02}             # equivalence margins over the metrics' declared ones
      correction: holm                     # holm | bh | none
    published:                             # numbers from a paper beside ours (a mapping or a list of them)
      - source: "arXiv 2607.23869v1, Table 3"
        task: rotten_tomatoes              # the task's label (its name unless given); optional with one task
        note: "..."                        # optional, shown under the table
        seeds: 3                           # optional: the seeds each value is a mean over (unsaid: read as 1)
        values: {softmax: {accuracy: 0.6801, nll: 0.6396}}
    sweep:                                 # tuning on validation, the same trials for every attention
      metric: accuracy                     # a declared metric, read on the validation split
      grid: {lr: [2.0e-4, 1.0e-3], epochs: [10, 20], weight_decay: [0.01], dropout: [0.1, 0.3]}
      budget: 4                            # optional: that many grid points, drawn once with `seed`
      seed: 0
      select_seeds: [0]                    # optional: trials run at these seeds only; each label's chosen
                                           # trial then trains at the suite's other seeds (default: every
                                           # trial at every seed, chosen on the mean over all of them)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import math
from typing import Any, Protocol

import numpy as np

from attnbench.errors import ConfigError, UserError
from attnbench.measurements import MEASUREMENTS
from attnbench.metrics import metric_direction, metric_info
from attnbench.model import ModelConfig
from attnbench.names import TASK_SET_MODEL_OPTIONS
from attnbench.options import make_options
from attnbench.plan import swept
from attnbench.references import reference_attention
from attnbench.train import TrainConfig

COMPARISON_KEYS = ("references", "comparisons", "published", "sweep")
SWEEP_KEYS = ("metric", "grid", "budget", "seed", "select_seeds")
PUBLISHED_KEYS = ("source", "task", "note", "seeds", "values")


class Checker(Protocol):
    """What these checks use of attnbench.suite's validator: errors with the file and key path, type checks."""

    def error(self, key_path: str, message: str) -> UserError: ...
    def list(self, value: Any, path: str) -> list[Any]: ...
    def mapping(self, value: Any, path: str) -> dict[str, Any]: ...
    def string(self, value: Any, path: str) -> str: ...
    def keys(
        self, mapping: dict[str, Any], valid: tuple[str, ...], path: str, required: tuple[str, ...] = ()
    ) -> None: ...


def validate_comparison_keys(
    raw: dict[str, Any],
    v: Checker,
    labels: list[str],
    tasks: list[str],
    seeds: list[int],
    models: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The normalised references / comparisons / published / sweep of a raw suite (absent keys left out);
    `models`: each attention label's model settings (the suite's with its own overrides), which every sweep
    grid point must suit."""
    out: dict[str, Any] = {}
    if "references" in raw:
        out["references"] = _references(raw["references"], v, labels)
    known = labels + [r["label"] for r in out.get("references", [])]
    if "comparisons" in raw:
        out["comparisons"] = _comparisons(raw["comparisons"], v, known)
    if "published" in raw:
        out["published"] = _published(raw["published"], v, known, tasks)
    if "sweep" in raw:
        out["sweep"] = _sweep(raw["sweep"], v, seeds, models or {})
    return out


def _references(value: Any, v: Checker, labels: list[str]) -> list[dict[str, Any]]:

    out = []
    for i, item in enumerate(v.list(value, "references")):
        path = f"references[{i}]"
        item = {"name": item} if isinstance(item, str) else v.mapping(item, path)
        v.keys(item, ("name", "options"), path, ("name",))
        name = v.string(item["name"], f"{path}.name")
        if name in labels:
            raise v.error(f"{path}.name", f"reference {name!r} has the label of an attention; rename that attention")
        try:
            entry = reference_attention(name, v.mapping(item.get("options", {}), f"{path}.options"))
        except UserError as err:
            raise v.error(path, str(err)) from None
        if any(e["label"] == name for e in out):
            raise v.error(path, f"reference {name!r} is listed twice; list each once")
        out.append(entry)
    return out


COMPARISON_SETTINGS = ("pairs", "margin", "correction")


def _comparisons(value: Any, v: Checker, labels: list[str]) -> list[Any] | dict[str, Any]:
    """The list form (pairs) as it is; the mapping form with its pairs, margins and correction checked."""
    if not isinstance(value, dict):
        return _pairs(value, v, labels, "comparisons")
    v.keys(value, COMPARISON_SETTINGS, "comparisons")
    out: dict[str, Any] = {}
    if "pairs" in value:
        out["pairs"] = _pairs(value["pairs"], v, labels, "comparisons.pairs")
    if "margin" in value:
        out["margin"] = {
            metric: _margin(metric, margin, v)
            for metric, margin in v.mapping(value["margin"], "comparisons.margin").items()
        }
    if "correction" in value:
        correction = v.string(value["correction"], "comparisons.correction")
        if correction not in ("holm", "bh", "none"):
            raise v.error(
                "comparisons.correction",
                f"is {correction!r}; use holm (family-wise error), bh (false discovery rate) or none",
            )
        out["correction"] = correction
    return out


def _margin(metric: Any, margin: Any, v: Checker) -> float:
    path = f"comparisons.margin.{metric}"
    if metric_info(str(metric)) is None or metric_direction(str(metric)) is None:
        raise v.error(path, f"{metric!r} is not a declared, ranked metric (see `attnbench list metrics`)")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin < 0:
        raise v.error(path, f"is {margin!r}; give a non-negative number in the metric's units, e.g. 0.02")
    return float(margin)


def _pairs(value: Any, v: Checker, labels: list[str], where: str) -> list[Any]:
    out: list[Any] = []
    for i, item in enumerate(v.list(value, where)):
        path = f"{where}[{i}]"
        if item == "default":
            out.append("default")
            continue
        if not isinstance(item, list) or len(item) != 2 or not all(isinstance(x, str) for x in item):
            raise v.error(path, f"is {item!r}; give a pair of labels [a, b] (the difference is a - b) or 'default'")
        for x in item:
            if x not in labels:
                raise v.error(path, f"label {x!r} is not in the suite; labels: {', '.join(labels)}")
        if item[0] == item[1]:
            raise v.error(path, f"pairs {item[0]!r} with itself; name two different labels")
        out.append(list(item))
    return out


def _published(value: Any, v: Checker, labels: list[str], tasks: list[str]) -> list[dict[str, Any]]:

    blocks = value if isinstance(value, list) else [value]
    out = []
    for i, block in enumerate(blocks):
        path = f"published[{i}]" if isinstance(value, list) else "published"
        block = v.mapping(block, path)
        v.keys(block, PUBLISHED_KEYS, path, ("source", "values"))
        source = v.string(block["source"], f"{path}.source")
        if "task" not in block and len(tasks) != 1:
            raise v.error(
                path, f"the suite has {len(tasks)} tasks; say which one with task: (one of {', '.join(tasks)})"
            )
        task = v.string(block.get("task", tasks[0] if tasks else ""), f"{path}.task")
        if task not in tasks:
            raise v.error(f"{path}.task", f"task {task!r} is not in the suite; tasks: {', '.join(tasks)}")
        values: dict[str, dict[str, float]] = {}
        for label, metrics in v.mapping(block["values"], f"{path}.values").items():
            if label not in labels:
                raise v.error(
                    f"{path}.values.{label}", f"label {label!r} is not in the suite; labels: {', '.join(labels)}"
                )
            values[label] = {}
            for metric, number in v.mapping(metrics, f"{path}.values.{label}").items():
                where = f"{path}.values.{label}.{metric}"
                if metric_direction(metric) is None:
                    raise v.error(where, f"{metric!r} is not a declared, ranked metric (see `attnbench list metrics`)")
                if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                    raise v.error(where, f"is {number!r}, expected a finite number")
                problem = out_of_range(metric, float(number))
                if problem:
                    raise v.error(where, problem)
                values[label][metric] = float(number)
        seeds = block.get("seeds")
        if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
            raise v.error(
                f"{path}.seeds", f"is {seeds!r}, expected the number of seeds each value is a mean over (>= 1)"
            )
        out.append(
            {"source": source, "task": task, "note": v.string(block.get("note", ""), f"{path}.note"), "values": values}
            | ({"seeds": seeds} if seeds is not None else {})
        )
    return out


# The values each metric can take (globs as in `attnbench list metrics`); published numbers outside are refused.
FRACTIONS = (
    "accuracy",
    "balanced_accuracy",
    "macro_f1",
    "weighted_f1",
    "clean_accuracy",
    "roc_auc",
    "pr_auc",
    "ece",
    "clean_ece",
    "ece_equal_mass",
    "label_noise_auc",
    "robustness_auc*",
    "*/accuracy",
    "*/f1",
    "feature_budget_accuracy@*",
    "label_noise_accuracy@*",
)
METRIC_RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys(FRACTIONS, (0.0, 1.0)),
    "mcc": (-1.0, 1.0),
    "brier": (0.0, 2.0),
    "nll": (0.0, math.inf),
}


def out_of_range(metric: str, number: float) -> str | None:
    """Why `number` cannot be a value of `metric` (e.g. a percentage given for a fraction), or None."""
    bounds = next((r for pattern, r in METRIC_RANGES.items() if fnmatch.fnmatchcase(metric, pattern)), None)
    if bounds is None or bounds[0] <= number <= bounds[1]:
        return None
    low, high = bounds
    if (low, high) == (0.0, 1.0) and 1.0 < number <= 100.0:
        return f"is {number:g}, but {metric} is a fraction in [0, 1]; write {number / 100:.4g} for {number:g}%"
    return f"is {number:g}, outside the range of {metric}, [{low:g}, {high:g}]"


def _sweep(value: Any, v: Checker, seeds: list[int], models: dict[str, dict[str, Any]]) -> dict[str, Any]:

    sweep = v.mapping(value, "sweep")
    v.keys(sweep, SWEEP_KEYS, "sweep", ("metric", "grid"))
    metric = v.string(sweep["metric"], "sweep.metric")
    if metric_direction(metric) is None:
        raise v.error("sweep.metric", f"{metric!r} is not a declared, ranked metric; e.g. accuracy or nll")
    grid = v.mapping(sweep["grid"], "sweep.grid")
    if not grid:
        raise v.error("sweep.grid", "is empty; give option: [values], e.g. {lr: [2.0e-4, 1.0e-3]}")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise v.error(f"sweep.grid.{key}", f"is {values!r}; give a non-empty list of values")
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    trials = [_trial(point, v, f"sweep.grid (point {j})", models) for j, point in enumerate(points)]
    seed = sweep.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1:
        raise v.error("sweep.seed", f"is {seed!r}; give an integer in 0..4294967295 (it draws the budget's points)")
    budget = sweep.get("budget", len(points))
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= len(points):
        raise v.error("sweep.budget", f"is {budget!r}; give an integer from 1 to the grid's {len(points)} points")
    chosen = sorted(np.random.default_rng(seed).choice(len(points), size=budget, replace=False).tolist())
    out = {
        "metric": metric,
        "grid": {k: list(vals) for k, vals in grid.items()},
        "budget": budget,
        "seed": seed,
        "trials": [trials[j] for j in chosen],
    }
    if "select_seeds" in sweep:  # absent: every trial at every seed (and run.json as before)
        out["select_seeds"] = _select_seeds(sweep["select_seeds"], v, seeds)
    return out


def _select_seeds(value: Any, v: Checker, seeds: list[int]) -> list[int]:
    """The seeds the trials run at: a non-empty list of distinct seeds of the suite."""
    picked = v.list(value, "sweep.select_seeds")
    if (
        not picked
        or any(isinstance(s, bool) or not isinstance(s, int) for s in picked)
        or len(set(picked)) < len(picked)
    ):
        raise v.error("sweep.select_seeds", f"is {value!r}; give distinct integer seeds of the suite, e.g. [0]")
    unknown = [s for s in picked if s not in seeds]
    if unknown:
        raise v.error(
            "sweep.select_seeds", f"{unknown} are not among the suite's seeds {seeds}; select on seeds the suite runs"
        )
    return list(picked)


def _trial(point: dict[str, Any], v: Checker, path: str, models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One grid point split into training and model overrides, each checked against its config: the model overrides
    over each attention's model settings (`models`, by label), as its cells will run them."""

    training_fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"phase_a"}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)} - set(TASK_SET_MODEL_OPTIONS)
    unknown = sorted(set(point) - training_fields - model_fields)
    if unknown:
        raise v.error(
            "sweep.grid",
            f"unknown option(s) {unknown}; sweep training options "
            f"({', '.join(sorted(training_fields))}) or model options "
            f"({', '.join(sorted(model_fields))})",
        )
    training = {k: x for k, x in point.items() if k in training_fields}
    model = {k: x for k, x in point.items() if k in model_fields and k not in training_fields}
    try:
        make_options(TrainConfig, training, what="sweep training")
    except (ConfigError, ValueError, TypeError) as err:  # a wrong type, or a value the config refuses
        raise v.error(path, f"{point}: {err}") from None
    for label, settings in (models or {"(default model)": {}}).items():
        try:
            make_options(ModelConfig, {**settings, **model}, what=f"the model of attention {label!r}")
        except (ConfigError, ValueError, TypeError) as err:
            keys = ", ".join(f"sweep.grid.{k}" for k in model)
            raise v.error(
                path, f"{point} ({keys}) does not suit the model of attention {label!r} ({settings}): {err}"
            ) from None
    return {"values": dict(point), "training": training, "model": model}


def refuse_unswept(measurements: list[str], v: Checker) -> None:
    """A sweep none of the suite's measurements takes, or beside a plug-in measurement that does not say whether
    it takes one, is refused: its trials would be silently not applied."""
    if not any(swept(name) for name in measurements):
        raise v.error(
            "sweep",
            f"none of this suite's measurements ({', '.join(measurements)}) takes a sweep's trials: they apply to "
            f"measurements that train and store validation scores (accuracy, recall, lm, or a plug-in whose options "
            f"declare swept = True); remove sweep, or add such a measurement",
        )
    for i, name in enumerate(measurements):
        entry = MEASUREMENTS.get(name)
        if entry.source != "builtin" and not hasattr(entry.config, "swept"):
            raise v.error(
                f"measurements[{i}]",
                f"plug-in measurement {name!r} does not say whether the sweep applies to it; declare "
                f"`swept: ClassVar[bool] = True` on its options class (it trains and stores "
                f"details['validation'][metric]) or False (its cells run once, untuned)",
            )
