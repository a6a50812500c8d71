"""Which code a cell ran: a fingerprint of the modules that define its attention, task and measurement.

Code is an input of a result as much as data is, but it is provenance, not identity: a cell's id stays what the
suite says (attnbench.cell_spec), and its record carries `provenance["code"]` (`cell_code`), so that a rerun can
tell the cells computed by other code (`code_changed`) and rerun them on request (`attnbench run
--rerun-changed-code`) instead of keeping them silently.

A part's code is the module that registered it (and the module of its options' dataclass) with every module those
import, followed through the part's own rooms (`ROOMS`: an attention's family and the compute engine, the tasks,
the measurements) and through a plug-in's own top-level package; a package's files are followed the same way, so
an edit to a plug-in, a baseline, a kernel it uses or a task's generator changes the fingerprint, and an edit
elsewhere does not. The harness around them (model, training loop, store) is identified by the run's git commit.
The fingerprint reads the files' bytes (sha256), never imports to compute it beyond what the registries did.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.names import NO_ATTENTION, NO_TASK, REFERENCE

ROOMS = {
    "attention": ("attnbench.baselines", "attnbench.kernels", "attnbench.hybrid"),
    "task": ("attnbench.tasks",),
    "measurement": ("attnbench.measurements",),
}
EVERY_ROOM = tuple(room for rooms in ROOMS.values() for room in rooms)
UNKNOWN = "unknown code"  # what a stored cell without a fingerprint (computed before they were recorded) reads as
# (start modules, rooms) -> (the files' stamps, {module: file digest}), kept while no file changes
_CLOSURES: dict[tuple, tuple[dict[Path, tuple[int, int]], dict[str, str]]] = {}


def cell_code(cell: CellSpec) -> dict[str, Any]:
    """The fingerprint of the code `cell` runs: {"attention": digest, "task": digest, "measurement": digest,
    "modules": {module: digest of its file}} (digests: 16 hex of sha256; None for a part the cell has not: no
    task, no attention, or a reference model)."""
    from attnbench.measurements import MEASUREMENTS
    from attnbench.registry import ATTENTIONS
    from attnbench.tasks import TASKS

    starts = {"measurement": _defined_in(MEASUREMENTS.get(cell.measurement.name))}
    if cell.attention.name not in (NO_ATTENTION["name"], REFERENCE):  # a placeholder, or a reference model
        attention = ATTENTIONS.get(cell.attention.name)
        starts["attention"] = _defined_in(attention)
        if attention.capabilities.layer_pattern:  # a pattern of layers: each layer's attention is its code too
            pattern = ATTENTIONS.make_config(cell.attention.name, **cell.attention.options).pattern()
            starts["attention"] += tuple(m for name, _ in pattern for m in _defined_in(ATTENTIONS.get(name)))
    if cell.task.name != NO_TASK["name"]:
        starts["task"] = _defined_in(TASKS.get(cell.task.name))
    code: dict[str, Any] = {"attention": None, "task": None, "measurement": None}
    modules: dict[str, str] = {}
    for part, names in starts.items():
        files = closure(names, ROOMS[part])
        code[part] = _digest(files)
        modules.update(files)
    return code | {"modules": dict(sorted(modules.items()))}


def code_changed(stored: dict[str, Any] | None, current: dict[str, Any]) -> list[str] | None:
    """The parts (attention, task, measurement) whose code differs between a stored record's fingerprint and
    `current`; [] for the same code, None where the record holds none (unknown code)."""
    if not isinstance(stored, dict) or not all(part in stored for part in ROOMS):
        return None
    return [part for part in ROOMS if stored.get(part) != current.get(part)]


def changed_modules(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The modules whose files differ (or that one side lacks) between two fingerprints."""
    was, now = stored.get("modules") or {}, current.get("modules") or {}
    return sorted(m for m in set(was) | set(now) if was.get(m) != now.get(m))


def _defined_in(entry: Any) -> tuple[str, ...]:
    """The modules of a registry entry's registered object and of its options' dataclass (where that is not the
    harness's own, as a plug-in class's generated one)."""
    names = [entry.module, getattr(entry.config, "__module__", "")]
    return tuple(
        dict.fromkeys(n for n in names if n and n != "__main__" and (_in(n, EVERY_ROOM) or not _in(n, ("attnbench",))))
    )


def closure(starts: Iterable[str], rooms: tuple[str, ...]) -> dict[str, str]:
    """{module: digest of its file} of `starts` and every module they import, transitively, that lies in `rooms`
    or in a start's own package (a plug-in's top-level package; an attnbench module's parent); modules without a
    Python source file are left out. Kept per process while none of the files changes (a stat each)."""
    key = (tuple(starts), rooms)
    kept = _CLOSURES.get(key)
    if kept is not None and all(_stamp(path) == stamp for path, stamp in kept[0].items()):
        return kept[1]
    inside = rooms + tuple(s.rpartition(".")[0] if _in(s, ("attnbench",)) else s.partition(".")[0] for s in key[0])
    seen: dict[str, str] = {}
    stamps: dict[Path, tuple[int, int]] = {}
    todo = list(key[0])
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        found = _source(name)
        if found is None:
            continue
        path, is_package = found
        stamps[path] = _stamp(path)
        digest, imported = _read(str(path), *stamps[path], name, is_package)
        seen[name] = digest
        todo += [m for m in imported if m not in seen and _in(m, inside)]
    _CLOSURES[key] = (stamps, seen)
    return seen


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:  # gone: the closure is read anew
        return -1, -1
    return stat.st_mtime_ns, stat.st_size


def _in(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256("\n".join(f"{m} {d}" for m, d in sorted(files.items())).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def _source(name: str) -> tuple[Path, bool] | None:
    """(the Python file of module `name`, whether it is a package), or None for no such module or no .py file."""
    module = sys.modules.get(name)
    if module is not None:
        origin, is_package = getattr(module, "__file__", None), hasattr(module, "__path__")
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):  # an imported name that is not a module
            return None
        if spec is None:
            return None
        origin, is_package = spec.origin, spec.submodule_search_locations is not None
    return (Path(origin), is_package) if origin and origin.endswith(".py") else None


@functools.lru_cache(maxsize=4096)
def _read(path: str, mtime_ns: int, size: int, name: str, is_package: bool) -> tuple[str, tuple[str, ...]]:
    """(16 hex of the file's sha256, the modules it imports, absolute); cached while the file is unchanged."""
    data = Path(path).read_bytes()
    package = name if is_package else name.rpartition(".")[0]
    imported: list[str] = []
    for node in ast.walk(ast.parse(data)):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            imported += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return hashlib.sha256(data).hexdigest()[:16], tuple(dict.fromkeys(imported))
