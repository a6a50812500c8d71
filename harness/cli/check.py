"""`attnbench check`: the attention property tests on one attention."""

from __future__ import annotations

import argparse
from typing import Any

from attnbench.errors import UserError


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `check` verb's arguments."""
    p = verbs.add_parser(
        "check",
        help="run the attention property tests on one attention",
        description="Check the properties every attention must have, on a registered name, an "
        "entry-point plugin or a 'package.module:Class' string: padding invariance, "
        "finite outputs at lengths 1 and 4096, gradients, determinism in evaluation, "
        "causality when claimed, one head's parameters shared by every head; each over "
        "several (batch, heads) shapes, with the native kernels on and off. Prints each "
        "property's verdict; exit code 0 when all hold, 1 otherwise.",
    )
    p.add_argument("attention", metavar="NAME|module:Class")
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an attention option (repeatable; the value is read as YAML), e.g. -o num_features=64",
    )
    return p


def execute(args: argparse.Namespace) -> int:
    """Run the property tests on the attention with its options; 1 when any check fails."""
    from attnbench.attention_properties import HEAD_DIM, MAX_LENGTH, check_attention
    from attnbench.registry import ATTENTIONS

    options = _parse_options(args.option)
    ATTENTIONS.make_config(
        args.attention, head_dim=HEAD_DIM, max_length=MAX_LENGTH, **options
    )  # unknown names and options: one line, exit 2
    verdicts = check_attention(args.attention, options)
    for verdict in verdicts:
        print(verdict.line(), flush=True)
    failed = sum(v.ok is False for v in verdicts)
    print(f"{args.attention}: {'all properties hold' if not failed else f'{failed} of {len(verdicts)} checks fail'}")
    return 1 if failed else 0


def _parse_options(pairs: list[str]) -> dict[str, Any]:
    """['num_features=64', ...] -> {'num_features': 64, ...}, each value read as YAML (aliases bounded)."""
    import yaml

    from attnbench.suite import AliasError, load_yaml

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--option {pair!r} is not KEY=VALUE; e.g. --option num_features=64")
        try:
            options[key] = load_yaml(value)
        except (AliasError, yaml.YAMLError) as err:
            raise UserError(f"--option {pair!r}: {err}") from None
    return options
