"""User-facing errors: what was wrong, the bad value, what to do instead (CLI exit code 2)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A mistake in the user's input (name, option, file, suite); the CLI prints it and exits 2."""

    exit_code = 2

    def __str__(self) -> str:  # always one line, even when a bad key or file name holds a line break
        return one_line(super().__str__())


class ConfigError(UserError, ValueError):
    """An invalid option value or an unknown option name."""


class InputUnavailable(UserError):
    """An optional input is not installed here (a corpus inside a package that is absent): validation lets it
    pass, and a cell that needs it is skipped with this message as its reason."""


class UnknownNameError(UserError, KeyError):
    """A name that is not registered; the message lists valid names and the closest match."""

    def __str__(self) -> str:  # KeyError would quote the message
        return one_line(str(self.args[0])) if self.args else ""


def one_line(text: str) -> str:
    """`text` with line breaks written as \\n, so that an error message stays on one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def closest(name: str, valid: Iterable[str]) -> str | None:
    """The valid name closest to `name`, or None if nothing is close."""
    matches = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown_name_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """'unknown attention 'perfomer'; did you mean 'performer'? valid: ...'."""
    valid = sorted(valid)
    hint = closest(name, valid)
    did_you_mean = f"; did you mean {hint!r}?" if hint else ""
    return f"unknown {kind} {name!r}{did_you_mean} valid: {', '.join(valid)}"
