"""What a cell is: the typed spec a suite expands to, its id and its readable name.

A `CellSpec` is made once, when a suite expands into cells (attnbench.suite), and travels unchanged to the
executors, the measurements and the store. `to_json` is the mapping the store writes under "cell"; the cell's id
is the first 16 hex digits of the sha256 of that mapping's canonical JSON (sorted keys, no spaces), so the same
cell always lands in the same result file. `from_json` reads such a mapping back (an in-flight marker, a stored
result) and is the exact inverse of `to_json`: the id survives the round trip.

The option, model and training mappings are the suite's values as given (overrides, not resolved configs);
treat them as read-only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

KINDS: dict[str, tuple[type, ...]] = {  # what each key of a cell's mappings holds
    "name": (str,),
    "label": (str,),
    "suite": (str,),
    "metric": (str,),
    "seed": (int,),
    "trial": (int,),
    "options": (dict,),
    "values": (dict,),
    "model": (dict,),
    "training": (dict,),
    "inputs": (dict,),
}


def _read(data: Any, required: tuple[str, ...], optional: tuple[str, ...], what: str) -> dict[str, Any]:
    """`data` as a mapping with every required key, no unknown one (a dropped key would change the cell's id) and
    each value of its kind (KINDS: a seed an integer, options a mapping)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a mapping, not {type(data).__name__} {data!r}")
    missing = [k for k in required if k not in data]
    unknown = sorted(set(data) - set(required) - set(optional))
    if missing or unknown:
        raise ValueError(
            f"{what} {data!r} "
            + (f"lacks {', '.join(missing)}" if missing else f"has unknown keys {', '.join(unknown)}")
            + f"; it takes {', '.join(required + optional)}"
        )
    for key, kinds in KINDS.items():
        value = data.get(key)
        if key in data and (not isinstance(value, kinds) or isinstance(value, bool)):
            word = {str: "text", int: "an integer", dict: "a mapping"}[kinds[0]]
            raise ValueError(f"{what}'s {key} is {type(value).__name__} {value!r}, not {word}")
    return data


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A cell's task: a registered name and its options; `given_label` where the suite labels it otherwise."""

    name: str
    options: dict[str, Any]
    given_label: str | None = None

    @property
    def label(self) -> str:
        """The task's label in cell names and tables: the one given, else its name."""
        return self.given_label or self.name

    def to_json(self) -> dict[str, Any]:
        label = {} if self.given_label is None else {"label": self.given_label}
        return {"name": self.name, "options": _copy(self.options), **label}

    @classmethod
    def from_json(cls, data: Any) -> TaskSpec:
        data = _read(data, ("name", "options"), ("label",), "a cell's task")
        return cls(data["name"], _copy(data["options"]), data.get("label"))


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """A cell's attention: a registered name (or "module:Class"), its label in the suite and its options."""

    name: str
    label: str
    options: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "options": _copy(self.options)}

    @classmethod
    def from_json(cls, data: Any) -> AttentionSpec:
        data = _read(data, ("name", "label", "options"), (), "a cell's attention")
        return cls(data["name"], data["label"], _copy(data["options"]))


@dataclasses.dataclass(frozen=True)
class MeasurementSpec:
    """A cell's measurement: a registered name and its options."""

    name: str
    options: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "options": _copy(self.options)}

    @classmethod
    def from_json(cls, data: Any) -> MeasurementSpec:
        data = _read(data, ("name", "options"), (), "a cell's measurement")
        return cls(data["name"], _copy(data["options"]))


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """The sweep trial a cell runs: its index in the suite's trials, the grid values and the metric chosen on."""

    trial: int
    values: dict[str, Any]
    metric: str

    def to_json(self) -> dict[str, Any]:
        return {"trial": self.trial, "values": _copy(self.values), "metric": self.metric}

    @classmethod
    def from_json(cls, data: Any) -> SweepSpec:
        data = _read(data, ("trial", "values", "metric"), (), "a cell's sweep")
        return cls(data["trial"], _copy(data["values"]), data["metric"])


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """One cell of a suite: (task, attention, seed, measurement) with the model and training settings it runs
    with, the digests of the local files its task reads (`inputs`) and, in a sweep, its trial."""

    suite: str
    task: TaskSpec
    attention: AttentionSpec
    seed: int
    model: dict[str, Any]  # ModelConfig overrides: the suite's, the task's, the attention's, the sweep trial's
    training: dict[str, Any]  # TrainConfig overrides: the suite's, the task's, the sweep trial's
    measurement: MeasurementSpec
    inputs: dict[str, Any] | None = None  # attnbench.suite.task_inputs, where the task reads files
    sweep: SweepSpec | None = None

    def to_json(self) -> dict[str, Any]:
        """The cell as the store writes it (a fresh mapping: changing it changes nothing here)."""
        data = {
            "suite": self.suite,
            "task": self.task.to_json(),
            "attention": self.attention.to_json(),
            "seed": self.seed,
            "model": _copy(self.model),
            "training": _copy(self.training),
            "measurement": self.measurement.to_json(),
        }
        if self.inputs is not None:
            data["inputs"] = _copy(self.inputs)
        if self.sweep is not None:
            data["sweep"] = self.sweep.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> CellSpec:
        """The cell of a mapping written by `to_json`; a ValueError naming what is wrong for any other."""
        data = _read(
            data,
            ("suite", "task", "attention", "seed", "model", "training", "measurement"),
            ("inputs", "sweep"),
            "a cell",
        )
        return cls(
            suite=data["suite"],
            task=TaskSpec.from_json(data["task"]),
            attention=AttentionSpec.from_json(data["attention"]),
            seed=data["seed"],
            model=_copy(data["model"]),
            training=_copy(data["training"]),
            measurement=MeasurementSpec.from_json(data["measurement"]),
            inputs=_copy(data["inputs"]) if "inputs" in data else None,
            sweep=SweepSpec.from_json(data["sweep"]) if "sweep" in data else None,
        )

    @property
    def id(self) -> str:
        """First 16 hex digits of the sha256 of the cell's canonical JSON: the name of its result file."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """Readable name 'task/label/s<seed>/measurement' (+ '/t<trial>' in a sweep), matched by --filter and
        `exclude`; the task part is the task's label."""
        name = f"{self.task.label}/{self.attention.label}/s{self.seed}/{self.measurement.name}"
        return name + (f"/t{self.sweep.trial}" if self.sweep is not None else "")


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (no mapping is shared between cells, or between a cell and its JSON)."""
    return json.loads(json.dumps(value))
