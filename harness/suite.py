"""Suites: YAML files naming attentions, tasks, seeds, model/training settings and measurements.

A suite is validated completely (unknown keys, keys given twice, wrong types, option bounds, unknown
names and options at any depth, data files and their columns) before anything runs, then expanded into cells, one per (task, attention, seed,
measurement). Schema (top-level keys):

    name: smoke                      # required; default run folder runs/<name>
    description: one line            # required; shown by `attnbench list suites`
    attentions:                      # a name, "module:Class", or a mapping {name, label, options}
      - softmax
      - {name: performer, label: performer-64, options: {num_features: 64}}
      - {name: random-features, label: vanilla-favor-qk, model: {tie_qk: false}}   # model overrides
    tasks:                           # a name or {name, label, options, model, training}; seed from `seeds`
      - {name: listops, options: {num_train: 256}}
      - {name: pathfinder, model: {num_layers: 1}, training: {lr: 1.0e-3}}   # per-task overrides (LRA's configs)
    seeds: [0, 1, 2]                 # required, distinct integers
    model: {d_model: 64}             # ModelConfig overrides (vocabulary, classes, max_length come from the task);
                                     # a task's `model` goes over it, an attention's `model` over both
    training: {epochs: 2}            # TrainConfig fields (phase_a: PhaseAConfig fields)
    measurements: [accuracy, {name: efficiency, options: {...}}]   # required
    cell_timeout: 600                # optional seconds per cell (CLI --cell-timeout overrides; default 6 h)
    exclude: ["qqp/linformer*"]      # optional glob patterns over cell names to leave out
    references / comparisons / published / sweep   # optional, see attnbench.suite_keys

Validated here (`load_suite` -> `Suite`); its cells are the plan's (attnbench.plan).

Measurements declare what they depend on with class attributes of their options dataclass
(`uses_task`, `uses_seed`, `uses_attention`, all True unless set to False, as typing.ClassVar):
one with `uses_task = False` (efficiency, kernel) gets the task {"name": "none"} and is expanded
once, not per task; `uses_seed = False` (efficiency) runs with the first seed only;
`uses_attention = False` (kernel, a tabular experiment) gets the attention {"name": "none"} and
runs once, not per attention. One with `measures_time = True` (kernel; default False) times calls
or measures memory: `attnbench run --workers auto` then runs the suite one cell at a time (attnbench.workers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml

import attnbench
from attnbench.decoder import require_causal_form
from attnbench.errors import UserError, closest, unknown_name_message
from attnbench.model import ModelConfig
from attnbench.names import MODEL_SET_ATTENTION_OPTIONS, TASK_SET_MODEL_OPTIONS, task_label
from attnbench.options import OptionError, make_options
from attnbench.plan import Suite
from attnbench.registry import ATTENTIONS, Registry, layer_attentions, learning_phase_entry
from attnbench.sizing import check_knob, match_config
from attnbench.suite_keys import COMPARISON_KEYS, refuse_unswept, validate_comparison_keys
from attnbench.train import TrainConfig

SUITE_KEYS = (
    "name",
    "description",
    "attentions",
    "tasks",
    "seeds",
    "model",
    "training",
    "measurements",
    "cell_timeout",
    "exclude",
    *COMPARISON_KEYS,
)
REQUIRED_KEYS = ("name", "description", "seeds", "measurements")
MAX_SEED = 2**32 - 1  # numpy's seed range


def suites_dir() -> Path:
    """The shipped suites: harness/suites in an installed wheel, else the repository's suites/ beside harness/."""
    installed = Path(attnbench.__file__).resolve().parent / "suites"
    return installed if installed.is_dir() else Path(attnbench.__file__).resolve().parents[1] / "suites"


def suite_names() -> list[str]:
    """Names of the shipped suites (file stems in suites/)."""
    return sorted(p.stem for p in suites_dir().glob("*.yaml"))


def find_suite(name_or_path: str) -> Path:
    """The YAML file of a shipped suite name, or the user's own path to one."""
    path = Path(name_or_path)
    shipped = suites_dir() / f"{name_or_path}.yaml"
    if path.suffix in (".yaml", ".yml") or path.exists() and not (path.is_dir() and shipped.is_file()):
        if not path.is_file():
            raise UserError(
                f"suite file {name_or_path!r} does not exist; give a shipped suite name "
                f"({', '.join(suite_names())}) or the path to a YAML file"
            )
        return path
    if shipped.is_file():
        return shipped
    raise UserError(
        unknown_name_message("suite", name_or_path, suite_names()) + "; or give the path to your own YAML file"
    )


MAX_YAML_NODES = 100_000  # a suite's values with every alias expanded: shipped suites hold a few hundred


def load_yaml(text: str) -> Any:
    """The YAML document in `text`, refusing a key given twice, an alias inside its own anchor, and aliases that
    expand to more than MAX_YAML_NODES values ('billion laughs'): DuplicateKeyError or AliasError."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    _expanded_size(node, {}, set())
    _refuse_duplicate_keys(node, "")
    return yaml.safe_load(text)


class AliasError(Exception):
    """YAML aliases that recurse or expand beyond MAX_YAML_NODES values."""


def _expanded_size(node: yaml.Node | None, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values `node` holds with every alias expanded (each node counted once per place it appears),
    computed once per node; an AliasError for a node inside itself or a total above MAX_YAML_NODES."""
    if node is None or id(node) in sizes:
        return sizes.get(id(node), 0)
    if id(node) in open_nodes:
        raise AliasError(
            f"line {node.start_mark.line + 1}: an alias refers to the anchor it is inside (a recursive alias); "
            f"write the value out"
        )
    open_nodes.add(id(node))
    children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
    size = 1 + (sum(_expanded_size(c, sizes, open_nodes) for c in children) if isinstance(children, list) else 0)
    open_nodes.discard(id(node))
    if size > MAX_YAML_NODES:
        raise AliasError(
            f"line {node.start_mark.line + 1}: aliases expand this value to {size:,} values, more than "
            f"{MAX_YAML_NODES:,} (nested aliases, a 'billion laughs'); write the suite without them"
        )
    sizes[id(node)] = size
    return size


def read_yaml(path: Path) -> dict[str, Any]:
    """The raw mapping in a suite file (no validation beyond 'is a YAML mapping'; aliases bounded)."""
    try:
        text = path.read_text()
        data = load_yaml(text)
    except (DuplicateKeyError, AliasError) as err:
        raise UserError(f"{path}: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(
            f"{path}: cannot read the suite file ({type(err).__name__}: {err}); check the path and its permissions"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split("\n")[0].split())
        raise UserError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a suite must be a YAML mapping with keys {', '.join(REQUIRED_KEYS)}")
    return data


class DuplicateKeyError(Exception):
    """A YAML mapping that gives one key twice (YAML would silently keep the last)."""


def _refuse_duplicate_keys(node: yaml.Node | None, path: str) -> None:
    """Walk a composed YAML document; raise DuplicateKeyError naming the key path of a repeated key."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key != "<<":
                where = _join(path, key)
                if key in seen:
                    raise DuplicateKeyError(
                        f"{where}: key {key!r} is given twice (lines {seen[key]} and "
                        f"{key_node.start_mark.line + 1}); keep one"
                    )
                seen[key] = key_node.start_mark.line + 1
                _refuse_duplicate_keys(value_node, where)
            else:
                _refuse_duplicate_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(item, f"{path}[{i}]")


def suite_description(path: Path) -> str:
    """The one-line description of a suite file, read without validating the rest."""
    try:
        return str(read_yaml(path).get("description", "")).strip()
    except UserError as err:
        return f"(invalid: {err})"


def load_suite(name_or_path: str) -> Suite:
    """Find, read and fully validate a suite; any mistake raises one UserError naming file and key path."""
    path = find_suite(name_or_path)
    return _Validator(path).suite(read_yaml(path))


def _registries() -> tuple[Registry, Registry]:
    from attnbench.measurements import MEASUREMENTS
    from attnbench.tasks import TASKS

    return TASKS, MEASUREMENTS


class _Validator:
    """Walks the raw YAML; every error names the file and the key path, e.g. attentions[2].options.x."""

    def __init__(self, path: Path):
        self.path = path
        self.resolved: dict[str, Any] = {"attentions": {}, "tasks": {}, "measurements": {}}
        self.inputs: dict[str, dict[str, Any]] = {}  # by options key path: what a task reads (Suite.task_inputs)
        self.attentions: list[dict[str, Any]] = []  # read before the tasks: their learning phases check phase_a

    def error(self, key_path: str, message: str) -> UserError:
        return UserError(f"{self.path}: {key_path}: {message}")

    def suite(self, raw: dict[str, Any]) -> Suite:
        """The validated suite of a parsed YAML file (its keys checked in the order the file's reader meets them)."""
        self.keys(raw, SUITE_KEYS, "", REQUIRED_KEYS)
        tasks_registry, measurements_registry = _registries()
        name, description = self.name_and_description(raw)
        measurements = self.entries(raw["measurements"], "measurements", measurements_registry, labels=False)
        independent = {
            flag: frozenset(
                m["name"] for m in measurements if not getattr(measurements_registry.get(m["name"]).config, flag, True)
            )
            for flag in ("uses_task", "uses_seed", "uses_attention")
        }
        task_free = independent["uses_task"]
        model = self.model(raw.get("model", {}))
        self.attentions = attentions = self.entries(
            raw.get("attentions", []), "attentions", ATTENTIONS, labels=True, model=model
        )
        tasks = self.entries(raw.get("tasks", []), "tasks", tasks_registry, labels=False, task_labels=True, model=model)
        self.refuse_missing_entries(measurements, independent, tasks, raw.get("attentions"))
        suite = Suite(
            name=name,
            description=description.strip(),
            path=self.path,
            attentions=attentions,
            tasks=tasks,
            seeds=self.seeds(raw["seeds"]),
            model=model,
            training=self.training(raw.get("training", {})),
            measurements=measurements,
            cell_timeout=self.timeout(raw.get("cell_timeout")),
            exclude=[
                self.string(p, f"exclude[{i}]") for i, p in enumerate(self.list(raw.get("exclude", []), "exclude"))
            ],
            resolved=self.resolved,
            task_free=task_free,
            seed_free=independent["uses_seed"],
            attention_free=independent["uses_attention"],
            task_inputs={
                task_label(t): self.inputs[f"tasks[{i}].options"]
                for i, t in enumerate(tasks)
                if self.inputs.get(f"tasks[{i}].options")
            },
        )
        self.required_labels(measurements, measurements_registry, [a["label"] for a in attentions])
        self.row_lengths(tasks, measurements, tasks_registry, measurements_registry)
        suite.comparison_keys = validate_comparison_keys(
            raw,
            self,
            [a["label"] for a in suite.attentions],
            [task_label(t) for t in suite.tasks],
            suite.seeds,
            {a["label"]: {**model, **a.get("model", {})} for a in suite.attentions},
        )
        if "sweep" in suite.comparison_keys:
            refuse_unswept([m["name"] for m in measurements], self)
        if not suite.cells():
            raise self.error("exclude", "the exclude patterns leave no cells to run")
        return suite

    def required_labels(self, measurements: list[dict[str, Any]], registry: Registry, labels: list[str]) -> None:
        """Measurement options that name a row of the suite (`required_labels()` of their options, such as
        accuracy's parameter_reference) must name one of its attention labels."""
        for i, measurement in enumerate(measurements):
            config = registry.make_config(measurement["name"], **measurement["options"])
            needed = config.required_labels() if callable(getattr(config, "required_labels", None)) else {}
            for key, label in needed.items():
                if label not in labels:
                    raise self.error(
                        f"measurements[{i}].options.{key}",
                        f"{label!r} is not a label of this suite's attentions ({', '.join(labels) or 'none'}); "
                        f"add it to attentions, or name the row to compare with in {key}",
                    )

    def row_lengths(
        self,
        tasks: list[dict[str, Any]],
        measurements: list[dict[str, Any]],
        tasks_registry: Registry,
        registry: Registry,
    ) -> None:
        """Each task's test split holds the rows each measurement scores beyond the task's own (`row_lengths()` of
        its options, such as lm's twice_length), so that a cell cannot train and then fail on them."""
        for j, measurement in enumerate(measurements):
            config = registry.make_config(measurement["name"], **measurement["options"])
            if not callable(getattr(config, "row_lengths", None)):
                continue
            for i, task in enumerate(tasks):
                task_config = tasks_registry.make_config(task["name"], **task["options"])
                try:
                    task_config.check_lengths(config.row_lengths(task_config))
                except UserError as err:
                    raise self.error(
                        f"tasks[{i}].options", f"{err} (measurements[{j}]: {measurement['name']})"
                    ) from None

    def name_and_description(self, raw: dict[str, Any]) -> tuple[str, str]:
        """The suite's name (a folder name: no '/') and its one-line description."""
        name = self.string(raw["name"], "name")
        if "/" in name or not name.strip():
            raise self.error("name", f"suite name {name!r} must be non-empty and contain no '/'")
        description = self.string(raw["description"], "description")
        if "\n" in description.strip():
            raise self.error("description", "must be one line (it is shown by `attnbench list suites`)")
        return name, description

    def refuse_missing_entries(
        self,
        measurements: list[dict[str, Any]],
        independent: dict[str, frozenset[str]],
        tasks: list[dict[str, Any]],
        attentions: Any,
    ) -> None:
        """A UserError when a measurement needs tasks or attentions and the suite gives none."""
        needs_task = [m["name"] for m in measurements if m["name"] not in independent["uses_task"]]
        if needs_task and not tasks:
            raise self.error(
                "tasks",
                f"no tasks given, but measurement {needs_task[0]!r} needs one; add tasks (see `attnbench list tasks`)",
            )
        needs_attention = [m["name"] for m in measurements if m["name"] not in independent["uses_attention"]]
        if needs_attention and not attentions:
            raise self.error(
                "attentions",
                f"no attentions given, but measurement {needs_attention[0]!r} needs "
                f"them; add attentions (see `attnbench list attention`)",
            )

    def keys(self, mapping: dict[str, Any], valid: tuple[str, ...], path: str, required: tuple[str, ...] = ()) -> None:
        for key in mapping:
            if key not in valid:
                hint = closest(str(key), valid)
                did_you_mean = f"; did you mean {hint!r}?" if hint else ""
                raise self.error(
                    _join(path, str(key)), f"unknown key {key!r}{did_you_mean} valid keys: {', '.join(valid)}"
                )
        for key in required:
            if key not in mapping:
                raise self.error(_join(path, key), f"missing required key {key!r}")

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.error(path, f"is {value!r}, expected a string")
        return value

    def list(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(path, f"is {value!r}, expected a list")
        return value

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"is {value!r}, expected a mapping of option: value")
        return value

    def seeds(self, value: Any) -> list[int]:
        seeds = self.list(value, "seeds")
        if not seeds:
            raise self.error("seeds", "is empty; give at least one integer seed, e.g. [0]")
        for i, seed in enumerate(seeds):
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise self.error(f"seeds[{i}]", f"is {seed!r}, expected an integer")
            if not 0 <= seed <= MAX_SEED:
                raise self.error(
                    f"seeds[{i}]",
                    f"is {seed}; a seed must be an integer in 0..{MAX_SEED} "
                    f"(numpy and the task generators take no negative seeds)",
                )
        if len(set(seeds)) != len(seeds):
            raise self.error("seeds", f"{seeds} repeats a seed; each seed must appear once")
        return list(seeds)

    def timeout(self, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise self.error("cell_timeout", f"is {value!r}, expected a positive number of seconds")
        return float(value)

    def entries(
        self,
        value: Any,
        path: str,
        registry: Registry,
        *,
        labels: bool,
        model: dict[str, Any] | None = None,
        task_labels: bool = False,
    ) -> list[dict[str, Any]]:
        """A list of names or {name, label?, options?, model?} mappings, each validated against `registry`.

        With `labels` (attentions) an entry may carry a label and `model` overrides for its cells,
        merged over the suite's `model` (e.g. {tie_qk: false} for one variant). With `task_labels` (tasks) an
        entry may carry a label, kept only where it differs from the name (so that unlabelled cells keep their ids),
        and `model` / `training` overrides for its cells (LRA sizes its model and schedule per task).
        """
        items = self.list(value, path)
        if path == "measurements" and not items:
            raise self.error(path, f"is empty; list at least one {registry.kind} (see `attnbench list`)")
        out, seen = [], {}
        for i, item in enumerate(items):
            item_path = f"{path}[{i}]"
            if isinstance(item, str):
                item = {"name": item}
            item = self.mapping(item, item_path)
            allowed = (
                ("name", "label", "options", "model")
                if labels
                else ("name", "label", "options", "model", "training")
                if task_labels
                else ("name", "options")
            )
            self.keys(item, allowed, item_path, ("name",))
            name = self.string(item["name"], f"{item_path}.name")
            try:
                entry = registry.get(name)
            except UserError as err:
                raise self.error(f"{item_path}.name", str(err)) from None
            options = self.mapping(item.get("options", {}), f"{item_path}.options")
            if task_labels:
                options = entry.config.resolve_paths(options, self.path.resolve().parent)
            label = self.entry_label(item, name, item_path, seen, labelled=labels or task_labels)
            seen[label] = i
            normal = {"name": name, "options": dict(options), **({"label": label} if label != name else {})}
            resolved_model = None
            if labels:
                own_model, resolved_model = self.attention_model(item, item_path, name, model)
                normal = {"name": name, "label": label, "options": dict(options), "model": own_model}
            elif task_labels:
                normal |= self.task_overrides(item, item_path, model)
            self.resolved[path][label] = self.registry_options(
                registry, entry, options, f"{item_path}.options", resolved_model
            )
            if labels and entry.capabilities.layer_pattern:
                self.layer_pattern(name, options, resolved_model, f"{item_path}.options")
            out.append(normal)
        return out

    def layer_pattern(self, name: str, options: dict[str, Any], model: dict[str, Any], path: str) -> None:
        """A layer-pattern attention's (the hybrid's) layers, checked against the model's depth and kind."""
        causal = {"causal": True} if model["kind"] == "decoder" else {}
        try:
            layer_attentions(name, {**options, **causal}, model["num_layers"])
        except UserError as err:
            raise self.error(path, str(err)) from None

    def entry_label(
        self, item: dict[str, Any], name: str, item_path: str, seen: dict[str, int], *, labelled: bool
    ) -> str:
        """The entry's label (its name unless it may carry one and does), refused when it holds '/' or an earlier
        entry of the list (`seen`: label -> index) has it."""
        label = self.string(item.get("label", name), f"{item_path}.label") if labelled else name
        if "/" in label:
            raise self.error(f"{item_path}.label", f"label {label!r} must not contain '/'")
        if label in seen:
            what = "label" if labelled else "name"
            path = item_path[: item_path.rindex("[")]
            raise self.error(
                item_path,
                f"{what} {label!r} is already used by {path}[{seen[label]}]; "
                + ("give each entry a distinct label" if labelled else "list each once"),
            )
        return label

    def attention_model(
        self, item: dict[str, Any], item_path: str, name: str, model: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """An attention entry's own `model` overrides, and the model its cells run (the suite's with them over it),
        checked against what the attention can be: a decoder needs a causal form, `match` a knob it has."""
        own_model = self.model(item.get("model", {}), f"{item_path}.model")
        resolved_model = self.config({**(model or {}), **own_model}, f"{item_path}.model", ModelConfig, "model")
        if resolved_model["kind"] == "decoder":  # refused here, before any cell runs
            try:
                require_causal_form(name)
            except UserError as err:
                raise self.error(f"{item_path}.name", str(err)) from None
        if resolved_model["match"] is not None:
            try:
                check_knob(match_config(resolved_model["match"]), name)
            except UserError as err:
                raise self.error(f"{item_path}.model.match", str(err)) from None
        return own_model, resolved_model

    def task_overrides(self, item: dict[str, Any], item_path: str, model: dict[str, Any] | None) -> dict[str, Any]:
        """A task entry's `model` and `training` overrides for its cells, each checked (the model over the suite's)."""
        overrides = {}
        for key, check in (("model", self.model), ("training", self.training)):
            if key in item:
                overrides[key] = check(item[key], f"{item_path}.{key}")
        if "model" in overrides:
            self.config({**(model or {}), **overrides["model"]}, f"{item_path}.model", ModelConfig, "model")
        return overrides

    def registry_options(
        self, registry: Registry, entry: Any, options: dict[str, Any], path: str, model: dict[str, Any] | None
    ) -> dict[str, Any]:
        reserved = MODEL_SET_ATTENTION_OPTIONS if registry is ATTENTIONS else ("seed",)
        for key in options:
            if key in reserved:
                source = "the model settings (model:)" if key != "seed" else "the suite's seeds:"
                raise self.error(_join(path, key), f"option {key!r} is set from {source}; remove it here")
        if registry is not ATTENTIONS:
            return self.config(options, path, entry.config, f"{registry.kind} {entry.name!r}")
        assert model is not None  # what the model passes to every attention (max_length: a stand-in
        from_model = {
            "head_dim": model["d_model"] // model["num_heads"],
            "num_heads": model["num_heads"],
            "max_length": model["max_length"],
        }  # for validation; each task sets the real one)
        resolved = self.config({**from_model, **options}, path, entry.config, f"{registry.kind} {entry.name!r}")
        for key in ("seed", "max_length"):  # per layer from the cell seed; from the task
            resolved.pop(key, None)
        return resolved

    def model(self, value: Any, path: str = "model") -> dict[str, Any]:
        model = self.mapping(value, path)
        for key in model:
            if key in TASK_SET_MODEL_OPTIONS:
                raise self.error(
                    f"{path}.{key}",
                    f"{key!r} is set from each task; set it in the task's options "
                    f"if the task has such an option, and remove it here",
                )
        self.config(model, path, ModelConfig, "model")
        if model.get("match") is not None:
            try:
                match_config(model["match"])
            except UserError as err:
                raise self.error(f"{path}.match", str(err)) from None
        return dict(model)

    def training(self, value: Any, path: str = "training") -> dict[str, Any]:
        """TrainConfig keys; `phase_a` checked against the config of each learning phase the suite's attentions
        declare (the attentions are read before the tasks, whose `training` overrides come here too)."""
        training = self.mapping(value, path)
        self.config(training, path, TrainConfig, "training")
        if training.get("phase_a"):
            phases = {
                phase.name: phase
                for phase in map(learning_phase_entry, {a["name"] for a in self.attentions})
                if phase is not None
            }
            for phase in phases.values():
                self.config(training["phase_a"], f"{path}.phase_a", phase.config, f"learning phase {phase.name!r}")
        return dict(training)

    def config(self, value: Any, path: str, config_cls: type, what: str) -> dict[str, Any]:
        """Check every key and value against a config dataclass (`make_options`, each error at its key path); the
        resolved config as a dict."""
        values = self.mapping(value, path)
        try:
            instance = make_options(config_cls, values, what=what, key_name=repr)
        except OptionError as err:
            where = path if err.key is None else _join(path, str(err.key))
            raise self.error(where, f"{what}: {err}" if err.across else str(err)) from None
        check_inputs = getattr(instance, "check_inputs", None)
        if callable(check_inputs):
            try:
                check_inputs()
                if callable(getattr(instance, "length_configs", None)):  # a task: each eval length's options
                    instance.length_configs()
                self.inputs[path] = task_inputs(instance)
            except UserError as err:
                raise self.error(path, str(err)) from None
        resolved = _copy_jsonable(dataclasses.asdict(instance))
        if path in ("model", "training"):
            self.resolved[path] = resolved
        return resolved


def task_inputs(config: Any) -> dict[str, Any]:
    """What a task config reads beyond its options (TaskConfig.inputs): 'sha256:<hex>' of each file's content, the
    digests the task makes itself (a package's corpus), and 'generator' when its generator_version is above 1;
    empty for generated tasks of the first version."""
    declared = config.inputs() if callable(getattr(config, "inputs", None)) else {}
    inputs: dict[str, Any] = {
        name: file_digest(source) if isinstance(source, Path) else source for name, source in sorted(declared.items())
    }
    if getattr(config, "generator_version", 1) != 1:
        inputs["generator"] = config.generator_version
    return inputs


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """'sha256:<hex>' of a file's content (remembered per path, size and modification time within a process)."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _DIGESTS:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            _DIGESTS[key] = f"sha256:{digest.hexdigest()}"
    except OSError as err:
        raise UserError(
            f"cannot read the data file {path} ({err.strerror or err}); check the path and its permissions"
        ) from None
    return _DIGESTS[key]


def _copy_jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
