"""`attnbench list`: registered attentions, tasks, measurements and metrics, or the shipped suites."""

from __future__ import annotations

import argparse
import json
from typing import Any

from attnbench.errors import UserError, unknown_name_message

LISTABLE = ("attention", "tasks", "measurements", "metrics", "suites")
_ALIASES = {
    "attentions": "attention",
    "task": "tasks",
    "measurement": "measurements",
    "metric": "metrics",
    "suite": "suites",
}


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `list` verb's arguments."""
    p = verbs.add_parser(
        "list",
        help="list attentions, tasks, measurements, metrics or suites",
        description="List registered components with their options, defaults and help "
        "(attentions also with capability flags), or the shipped suites.",
    )
    p.add_argument(
        "what",
        nargs="?",
        default=None,
        metavar="WHAT",
        help=f"one of: {', '.join(LISTABLE)} (default: a short listing of everything)",
    )
    p.add_argument(
        "pattern",
        nargs="?",
        default="*",
        help="glob over names, e.g. '*linear*' (default: all); for attentions also a "
        "'package.module:Class' string, described as the registry would build it",
    )
    return p


def execute(args: argparse.Namespace) -> int:
    """List what `args.what` names (everything, briefly, without it) whose names match `args.pattern`."""
    what = _ALIASES.get(args.what, args.what)
    if what is None:
        for kind in LISTABLE:
            print(f"{kind}: {', '.join(_names(kind, args.pattern))}")
        return 0
    if what not in LISTABLE:
        raise UserError(unknown_name_message("listing", args.what, LISTABLE))
    if what == "suites":
        from attnbench.suite import suite_description, suites_dir

        for name in _names("suites", args.pattern):
            print(f"{name:<14} {suite_description(suites_dir() / f'{name}.yaml')}")
        return 0
    if what == "metrics":
        import fnmatch

        for name, text in _metric_descriptions().items():
            if fnmatch.fnmatchcase(name, args.pattern):
                print(f"{name:<22} {text}")
        return 0
    registry = _registry(what)
    if what == "attention" and ":" in args.pattern:
        print(_describe(registry.get(args.pattern), show_capabilities=True))
        return 0
    names = registry.names(args.pattern)
    if not names:
        raise UserError(f"no {registry.kind} matches {args.pattern!r}; registered: {', '.join(registry.names())}")
    for name in names:
        print(_describe(registry.get(name), show_capabilities=what == "attention"))
    return 0


def _registry(kind: str) -> Any:
    if kind == "attention":
        from attnbench.registry import ATTENTIONS

        return ATTENTIONS
    if kind == "tasks":
        from attnbench.tasks import TASKS

        return TASKS
    from attnbench.measurements import MEASUREMENTS

    return MEASUREMENTS


def _names(kind: str, pattern: str) -> list[str]:
    import fnmatch

    if kind == "suites":
        from attnbench.suite import suite_names

        return [n for n in suite_names() if fnmatch.fnmatchcase(n, pattern)]
    if kind == "metrics":
        return [n for n in _metric_descriptions() if fnmatch.fnmatchcase(n, pattern)]
    return _registry(kind).names(pattern)


def _metric_descriptions() -> dict[str, str]:
    """The declared metrics (attnbench.metrics.register_metric, built-in and from measurement modules): name or glob ->
    which way is better and what it is."""
    from attnbench.measurements import measurement_names
    from attnbench.metrics import METRICS

    measurement_names()  # imports every measurement module, which declares its metrics
    arrows = {"max": "higher is better", "min": "lower is better", None: "not ranked"}
    return {
        info.pattern: f"[{'; '.join([arrows[info.direction], *_record_facts(info)])}] {info.description}"
        for info in sorted(METRICS.values(), key=lambda m: m.pattern)
    }


def _record_facts(info: Any) -> list[str]:
    """A metric record's range, equivalence margin and whether it is exact, as `list metrics` shows them."""
    low, high = info.bounds
    facts = [] if low is None and high is None else [f"range [{'-inf' if low is None else f'{low:g}'}, "
                                                     f"{'inf' if high is None else f'{high:g}'}]"]  # fmt: skip
    if info.margin is not None:
        facts.append(f"margin {info.margin:.0%} of the other" if info.margin_relative else f"margin {info.margin:g}")
    if info.exact:
        facts.append("exact: counted, never tested")
    return facts


def _describe(entry: Any, *, show_capabilities: bool) -> str:
    """A registered component: name, description, capability flags, then one line per option."""
    from attnbench.registry import AttentionConfig
    from attnbench.suite import MODEL_SET_ATTENTION_OPTIONS

    lines = [f"{entry.name}: {entry.description}" + ("" if entry.source == "builtin" else f"  [{entry.source}]")]
    set_elsewhere = MODEL_SET_ATTENTION_OPTIONS if issubclass(entry.config, AttentionConfig) else ("seed",)
    if show_capabilities:
        depends = {flag for flag, _ in entry.depends}
        flags = ", ".join(
            f"{k}={'yes' if v else 'no'}" + ("*" if k in depends else "")
            for k, v in entry.capabilities.as_dict().items()
        )
        lines.append(
            f"  capabilities: {flags}" + ("  (* with the default options; depends on them)" if depends else "")
        )
        if not entry.capabilities.causal:  # no causal form: the inherited option only refuses True
            set_elsewhere = (*set_elsewhere, "causal")
    for row in entry.options():
        if row["name"] in set_elsewhere:
            continue
        lines.append(
            f"  {row['name']} ({row['type']}; default {json.dumps(row['default'], default=str)}): {row['help']}"
        )
    return "\n".join(lines)
