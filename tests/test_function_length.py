"""Functions fit on a screen: one of more than 60 lines says why in its docstring, in a sentence that starts with
"Long:" (the list below is what `python tests/test_function_length.py` prints)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60


def long_functions() -> list[tuple[int, str, str, bool]]:
    """(lines, where, name, whether its docstring says why) for every function of the package over LIMIT lines."""
    found = []
    for folder in ("harness", "baselines"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LIMIT:
                        said = "Long:" in (ast.get_docstring(node) or "")
                        found.append((lines, f"{path.relative_to(ROOT)}:{node.lineno}", node.name, said))
    return sorted(found, reverse=True)


def test_every_function_over_the_limit_says_why_in_its_docstring():
    unexplained = [f"{where} {name} ({lines} lines)" for lines, where, name, said in long_functions() if not said]
    assert unexplained == []


if __name__ == "__main__":
    for lines, where, name, said in long_functions():
        print(f"{lines:4d}  {where}  {name}{'' if said else '  (no reason given)'}")
