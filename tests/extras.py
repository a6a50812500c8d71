"""The optional extras tests may need (pyproject's optional-dependencies beyond dev): a test that needs one skips,
saying which extra installs it, where it is absent; CI runs such tests in a venv with only the dev extra too."""

from __future__ import annotations

import importlib.util

import pytest


def needs_extra(extra: str, module: str) -> pytest.MarkDecorator:
    """Skip unless `module` (which the optional extra `extra` installs) can be imported here."""
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None,
        reason=f"needs the optional extra {extra!r} ({module} is not installed): pip install 'attnbench[{extra}]'",
    )
