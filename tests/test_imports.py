"""The import graph of the package: no cycle, counting function-local imports too (a local import that dodges a
loop is still a loop), and the public surface importable from `attnbench` itself."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

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


def import_graph() -> nx.DiGraph:
    found = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(found)
    for module, path in found.items():
        for name in imported(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            target = name if name in found else None
            if target is None:  # 'from attnbench.x import f': the module is the longest known prefix
                parts = name.split(".")
                target = next(
                    (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in found), None
                )
            if target is not None and target != module and not module.startswith(target + "."):
                graph.add_edge(module, target)  # a package's own __init__ above its modules is not a loop
    return graph


def test_the_import_graph_has_no_cycle_counting_function_local_imports():
    cycles = sorted(nx.simple_cycles(import_graph()), key=len)
    assert cycles == [], f"{len(cycles)} import cycles, e.g. {' -> '.join(cycles[0] + cycles[0][:1])}"


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
        "FeatureMap",
        "UserError",
        "ConfigError",
        "option",
    ):
        assert hasattr(attnbench, name), name
