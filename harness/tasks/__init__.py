"""Registry of tasks: generated sequence tasks and sentence-classification data sets.

Contract (suites, measurements and tests rely on it):

    from attnbench.tasks import load_task, task_names
    task_names("*")                                   # sorted names, timm-style glob
    data = load_task("listops", seed=0, max_length=256, label_noise=0.1)
    data["train"].input_ids                           # (N, L) long, right-padded with data.pad_id

Every task's options are a dataclass deriving from `TaskConfig` (seed, label_noise); `load_task`
validates them, builds the task and then flips `label_noise` of the TRAIN labels (seeded).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from attnbench.errors import ConfigError
from attnbench.options import option, require
from attnbench.registry import Registry
from attnbench.tasks.base import Split, TaskData

ENTRY_POINT_GROUP = "attnbench.task"
TestRows = Literal["fresh", "shared"]

TASKS = Registry("task", entry_point_group=ENTRY_POINT_GROUP, builtin_packages=[("attnbench.tasks", None)])


@dataclasses.dataclass
class TaskConfig:
    """Options every task has; task families subclass this with their own."""

    seed: int = option(0, "seed of generation and of the label noise", minimum=0, maximum=2**32 - 1)
    label_noise: float = option(0.0, "fraction of TRAIN labels flipped to another class (seeded)")
    eval_lengths: list[int] = option(
        [],
        "also score test rows drawn at these row lengths, each reported as <metric>@<length> (TaskData.eval_splits); "
        "for tasks with a row length (at_length): mqar, byte_lm, listops",
        minimum=1,
    )

    def __post_init__(self) -> None:
        require(0.0 <= self.label_noise <= 1.0, f"label_noise={self.label_noise} must lie in [0, 1]")
        self.eval_lengths = sorted(set(self.eval_lengths))

    test_rows: ClassVar[TestRows] = "shared"  # "fresh": the seed draws new test rows (generated tasks); "shared":
    # every seed is scored on the same test rows (files, corpora, a fixed split_seed). The inference engine
    # (attnbench.decisions) counts the test rows as a second source of variance where they are shared; a task
    # that does not say is analysed as shared, which holds for fresh rows too (only less sharply)
    generator_version: ClassVar[int] = 1  # raise it when the task makes other data from the same options and seed
    path_options: ClassVar[tuple[str, ...]] = ()  # options holding paths (or mappings of paths): a suite resolves
    # their relative values against the suite file's folder

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse the names an input declaration once had: a task declaring under them would read inputs that no
        cell's identity holds."""
        super().__init_subclass__(**kwargs)
        for old in ("input_files", "input_digests"):
            if old in vars(cls):
                raise TypeError(f"{cls.__name__}.{old}: declare what a task reads in inputs() (TaskConfig.inputs)")

    def check_inputs(self) -> None:
        """Check what can be checked before anything runs (data files, their columns); raise UserError.

        Suite validation calls it; tasks that read files override it (reading headers only)."""

    @classmethod
    def resolve_paths(cls, options: dict[str, Any], base: Path) -> dict[str, Any]:
        """`options` with the relative paths among `path_options` (strings, or mappings of strings) made absolute
        against `base`, the suite file's folder, so that a suite runs the same from any working directory."""
        return {key: _absolute(value, base) if key in cls.path_options else value for key, value in options.items()}

    def at_length(self, length: int) -> TaskConfig | None:
        """These options with rows of `length` tokens, sized to what their test split needs: the options an
        eval length's test rows are drawn with. None: the task has no row length to vary (the default)."""
        return None

    def length_configs(self) -> dict[int, TaskConfig]:
        """The options of each of `eval_lengths` (at_length); ConfigError where the task has no row length or its
        options refuse one of the lengths. Suite validation calls it, so a bad length fails before anything runs."""
        configs = {}
        for length in self.eval_lengths:
            try:
                config = self.at_length(length)
            except ConfigError as err:
                raise ConfigError(f"eval_lengths: at length {length}: {err}") from None
            require(
                config is not None,
                f"eval_lengths={self.eval_lengths}: {type(self).__name__} has no row length to vary "
                f"(at_length); eval_lengths works with tasks that have one, e.g. mqar, byte_lm, listops",
            )
            configs[length] = config
        return configs

    def check_lengths(self, needed: dict[str, int]) -> None:
        """Refuse (UserError) a test split that holds no row of one of `needed`'s lengths (tokens, by what asks for
        it: a measurement's option, `row_lengths` of its options), naming that option. Suite validation calls it;
        generated tasks draw rows of any length, so the default checks nothing."""

    def inputs(self) -> dict[str, Path | str]:
        """Everything the task reads beyond its options, by a stable name: a local file's path (its own files, a
        data-dir file, a file a package bundles), whose sha256 is taken, or a digest the task makes of what is no
        file of its own (a package's corpus: 'sha256:<hex>', or 'unavailable' while the package is absent). Each
        joins the cell's identity (attnbench.suite.task_inputs), so an edited file, another data folder or another
        package's corpus makes new cells. A task that reads anything overrides it; tests/test_task_inputs.py
        checks, for every registered task, that each file it opens while loading is declared here."""
        return {}


def _absolute(value: Any, base: Path) -> Any:
    """A path string made absolute against `base` (a mapping: each value); anything else unchanged."""
    if isinstance(value, dict):
        return {key: _absolute(item, base) for key, item in value.items()}
    if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
        return str(base / value)
    return value


def register_task(
    name: str, *, config: type = TaskConfig, description: str | None = None
) -> Callable[[Callable[..., TaskData]], Callable[..., TaskData]]:
    """Register `fn(cfg) -> TaskData` under `name`; `config` must derive from TaskConfig."""
    if not issubclass(config, TaskConfig):
        raise TypeError(f"task {name!r}: config {config.__name__} must subclass attnbench.tasks.TaskConfig")
    return TASKS.register(name, config=config, description=description)


def task_designs(names: list[str]) -> dict[str, str]:
    """Each task's declared test-row design (`TaskConfig.test_rows`) by name: what a run stores in run.json
    ("test_rows"), so that reading the run needs no task module (`attnbench.decisions.cells`)."""
    return {name: TASKS.get(name).config.test_rows for name in names}


def task_names(pattern: str = "*") -> list[str]:
    """Sorted registered task names matching a glob pattern, e.g. "*"."""
    return TASKS.names(pattern)


def load_task(name: str, seed: int = 0, **options: Any) -> TaskData:
    """Build task `name` with validated options, then apply its train label noise."""
    entry = TASKS.get(name)
    cfg = TASKS.make_config(name, seed=seed, **options)
    data = entry.factory(cfg)
    data.info.setdefault("options", dataclasses.asdict(cfg))
    data.info.setdefault("test_rows", cfg.test_rows)
    for length, config in cfg.length_configs().items():  # test rows drawn at other lengths
        data.eval_splits[length] = entry.factory(config)["test"]
    if cfg.label_noise > 0:
        train, flipped = flip_labels(data["train"], cfg.label_noise, data.num_classes, seed=cfg.seed)
        data.splits["train"] = train
        data.info["label_noise"] = {"rate": cfg.label_noise, "flipped": flipped, "split": "train"}
    return data


def flip_labels(split: Split, rate: float, num_classes: int, seed: int) -> tuple[Split, int]:
    """A copy of `split` with round(rate * N) labels moved to a different class chosen uniformly."""
    if num_classes < 2:
        raise ValueError(f"label noise needs at least 2 classes, the task has {num_classes}")
    generator = torch.Generator().manual_seed(10_007 * seed + 1)  # independent of the task's own streams
    count = round(rate * len(split))
    rows = torch.randperm(len(split), generator=generator)[:count]
    shift = torch.randint(1, num_classes, (count,), generator=generator)
    labels = split.labels.clone()
    labels[rows] = (labels[rows] + shift) % num_classes
    return Split(split.input_ids, split.attention_mask, labels, split.segment_ids), count
