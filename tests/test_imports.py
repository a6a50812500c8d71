"""The import graph of the package: no cycle, counting function-local imports too (a local import that dodges a
loop is still a loop) and the packages' __init__ an import runs on the way; every module importable first in a
fresh interpreter; the generic report free of plugin code; the public surface importable from `attnbench`."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from processes import HANG_GUARD

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"attnbench": ROOT / "harness", "attnbench.baselines": ROOT / "baselines"}


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the one import package."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[0] == "baselines" and package == "attnbench":
                continue
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name an import statement anywhere in `tree` names (relative imports resolved)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def ancestors(module: str) -> list[str]:
    """The packages whose __init__ importing `module` runs first: 'a.b.c' -> ['a', 'a.b']."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph() -> nx.DiGraph:
    """An edge from each module to every module an import in it runs: the one it names (for 'from attnbench.x
    import f', the longest known prefix) and the packages above that one, whose __init__ runs first; but not the
    importer's own packages, which are already running when it runs."""
    found = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(found)
    for module, path in found.items():
        own = set(ancestors(module))
        for name in imported(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            parts = name.split(".")
            target = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in found), None)
            if target is None:
                continue
            for runs in [*ancestors(target), target]:
                if runs in found and runs != module and runs not in own:
                    graph.add_edge(module, runs)
    return graph


def test_the_import_graph_has_no_cycle_counting_function_local_imports():
    cycles = sorted(nx.simple_cycles(import_graph()), key=len)
    assert cycles == [], f"{len(cycles)} import cycles, e.g. {' -> '.join(cycles[0] + cycles[0][:1])}"


def test_an_import_runs_the_packages_above_the_module_it_names():
    graph = import_graph()
    # report.py imports attnbench.report.table: attnbench/report/__init__ runs first
    assert graph.has_edge("attnbench.baselines.coulomb.report", "attnbench.report")
    # a module's own packages are already running: softmax importing attnbench.kernels.masks is no loop
    assert not graph.has_edge("attnbench.baselines.softmax", "attnbench.baselines")


def test_the_generic_report_imports_no_plugin_code():
    """Plugins (attnbench.baselines.*) register report sections; the report reads the registry, never their code."""
    edges = [
        (a, b)
        for a, b in import_graph().edges
        if a.startswith("attnbench.report") and b.startswith("attnbench.baselines")
    ]
    assert edges == []


FOUNDATION = {"attnbench.errors", "attnbench.options", "attnbench.registry", "attnbench.cache"}


def test_the_core_never_imports_an_attention():
    """Layers: the harness (attnbench.*, the engine included) reaches attentions only through the registry's
    discovery, which names them as strings; no import statement of it names attnbench.baselines."""
    edges = [
        (a, b)
        for a, b in import_graph().edges
        if not a.startswith("attnbench.baselines") and b.startswith("attnbench.baselines")
    ]
    assert edges == []


def test_the_engine_imports_only_the_foundation():
    """attnbench.kernels sits below the harness and the attentions: it imports itself and the foundation (errors,
    options, the registry's config types, the cache root) and nothing else of the package."""
    edges = [
        (a, b)
        for a, b in import_graph().edges
        if a.startswith("attnbench.kernels") and not b.startswith("attnbench.kernels") and b not in FOUNDATION
    ]
    assert edges == []


def test_the_foundation_imports_nothing_above_it():
    edges = [(a, b) for a, b in import_graph().edges if a in FOUNDATION and b not in FOUNDATION]
    assert edges == []


LAYERS = ("foundation", "engine", "core", "inference", "report", "command line")  # docs/architecture.md, bottom up
SURFACE = {"attnbench", "attnbench.api", "attnbench.__main__", "attnbench.until_decided"}  # the faces; run's loop


def layer(module: str) -> str | None:
    """A module's layer (docs/architecture.md); None for the attentions, whose plug-ins may also register report
    sections (`test_the_core_never_imports_an_attention` holds the harness apart from them)."""
    if module.startswith("attnbench.baselines"):
        return None
    if module in FOUNDATION:
        return "foundation"
    if module in SURFACE or module.startswith("attnbench.cli"):
        return "command line"
    for prefix, name in (("attnbench.kernels", "engine"), ("attnbench.decisions", "inference")):
        if module.startswith(prefix):
            return name
    return "report" if module.startswith("attnbench.report") else "core"


def test_no_layer_imports_a_layer_above_it():
    """foundation < engine < core < inference < report < command line: an import runs down, never up."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = [
        f"{a} ({layer(a)}) -> {b} ({layer(b)})"
        for a, b in import_graph().edges
        if layer(a) is not None and layer(b) is not None and rank[layer(a)] < rank[layer(b)]
    ]
    assert upward == [], "\n".join(upward)


NEEDS_EXTRA = {"attnbench.baselines.peers": ("performer_pytorch", "nystrom_attention")}  # the extra 'peers'
FIRST_IMPORT = """
import importlib, os, sys, traceback
# the heavy third-party libraries once, in the parent: each child then imports only attnbench's modules, and the
# one it is given first of them
import datasets, matplotlib.backends.backend_agg, matplotlib.figure, numpy, pandas, rich.progress, scipy.stats
import sklearn.base, tokenizers, torch, yaml

failed = []
for name in sys.argv[1:]:
    child = os.fork()
    if child == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            print(f"--- import {name} first:", file=sys.stderr)
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitpid(child, 0)[1] != 0:
        failed.append(name)
sys.exit(f"failed to import first: {', '.join(failed)}" if failed else 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_module_imports_first_in_a_fresh_interpreter(children):
    """A loop through a package's __init__ shows only when a module of it is the first imported: import each one
    first, in a forked child of one interpreter that holds no attnbench module."""
    names = sorted(
        m
        for m in modules()
        if not m.endswith("__main__")  # importing it runs the command
        and all(importlib.util.find_spec(p) for p in NEEDS_EXTRA.get(m, ()))
    )
    process = children.start(
        [sys.executable, "-c", FIRST_IMPORT, *names], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, err = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, err


def test_the_public_surface_is_importable_from_attnbench():
    import attnbench

    for name in (
        "load_results",
        "run_suite",
        "load_suite",
        "register_attention",
        "build_attention",
        "attention_names",
        "register_learning_phase",
        "register_report_section",
        "FeatureMap",
        "UserError",
        "ConfigError",
        "option",
    ):
        assert hasattr(attnbench, name), name
