"""Typed option dataclasses: documented defaults, type checking and did-you-mean for unknown keys.

Every registry (attentions, tasks, measurements) describes its options as a dataclass whose fields
carry a `help` text in their metadata; `make_options` turns a plain dict (from Python or suite
YAML) into a validated instance, or raises a ConfigError that names the bad key or value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

from attnbench.errors import ConfigError, closest


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field with a help text (shown by `attnbench list`) and optional bounds on its value
    (numbers, or every number of a list), checked by `make_options` and suite validation."""
    metadata = {"help": help, "minimum": minimum, "maximum": maximum}
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def rest_option(help: str) -> Any:
    """A dict option that gathers every key its config has no field for (`fold_rest`): the options a composite
    passes on to its parts, e.g. a hybrid's `window` for its sliding-window layers; the config checks them itself."""
    return dataclasses.field(
        default_factory=dict, metadata={"help": help, "minimum": None, "maximum": None, "rest": True}
    )


def fold_rest(config_cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with every key that names no field of `config_cls` moved into its `rest_option` field, where it has
    one (values given to that field by name are kept); as given otherwise."""
    fields = dataclasses.fields(config_cls)
    rest = next((f.name for f in fields if f.metadata.get("rest")), None)
    if rest is None:
        return dict(values)
    names = {f.name for f in fields}
    folded = {key: value for key, value in values.items() if key in names}
    extra = {key: value for key, value in values.items() if key not in names}
    if extra:
        given = folded.get(rest, {})
        folded[rest] = {**given, **extra} if isinstance(given, Mapping) else given
    return folded


def bounds_text(f: dataclasses.Field) -> str:
    """'1..65536', 'at least 0', 'at most 10' or '' for an option's declared bounds."""
    low, high = f.metadata.get("minimum"), f.metadata.get("maximum")
    if low is not None and high is not None:
        return f"{low:g}..{high:g}"
    if low is not None:
        return f"at least {low:g}"
    return f"at most {high:g}" if high is not None else ""


def check_option(f: dataclasses.Field, annotation: Any, value: Any, where: str) -> Any:
    """`value` coerced to the field's type and checked against its declared bounds (ConfigError if not)."""
    value = coerce(value, annotation, where)
    low, high = f.metadata.get("minimum"), f.metadata.get("maximum")
    numbers = value if isinstance(value, list) else [value]
    for number in numbers:
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            continue
        if (low is not None and number < low) or (high is not None and number > high):
            shown = f"{value!r} (its value {number!r})" if isinstance(value, list) else repr(value)
            raise ConfigError(f"{where} is {shown}, outside its bounds ({bounds_text(f)}); choose a value within them")
    return value


def option_table(config_cls: type) -> list[dict[str, Any]]:
    """One row per option: name, type, default and help text."""
    hints = typing.get_type_hints(config_cls)
    rows = []
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        bounds = bounds_text(f)
        rows.append(
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": default,
                "help": f.metadata.get("help", "") + (f" [{bounds}]" if bounds else ""),
            }
        )
    return rows


class OptionError(ConfigError):
    """A ConfigError from `make_options`; `key`: the option it is about (None: the options as a whole); `across`:
    raised by the config's own checks across its options, worded without naming the config."""

    def __init__(self, message: str, key: str | None = None, *, across: bool = False):
        super().__init__(message)
        self.key, self.across = key, across


def make_options(
    config_cls: type, values: Mapping[str, Any], *, what: str, key_name: Callable[[str], str] | None = None
) -> Any:
    """Validate `values` against the dataclass `config_cls` and return an instance; any mistake an OptionError.

    `what` names the thing being configured in error messages, e.g. "attention 'performer'"; `key_name(key)` how
    a bad value names its option (default "option 'key' of <what>"; a suite's key path already names it).
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    name = key_name or (lambda key: f"option {key!r} of {what}")
    checked = {}
    for key, value in fold_rest(config_cls, values).items():
        if key not in fields:
            hint = closest(str(key), list(fields))
            did_you_mean = f"; did you mean {hint!r}?" if hint else ""
            raise OptionError(
                f"unknown option {key!r} for {what}{did_you_mean} valid options: {', '.join(fields)}", key
            )
        try:
            checked[key] = check_option(fields[key], hints[key], value, name(key))
        except ConfigError as err:
            raise OptionError(str(err), key) from None
    try:
        refuse_missing(config_cls, checked, what)
    except ConfigError as err:
        raise OptionError(str(err)) from None
    try:
        return config_cls(**checked)
    except ConfigError as err:  # the config's own checks across its options, as it words them
        raise OptionError(str(err), across=True) from None
    except (TypeError, ValueError) as err:  # a required option missing, a value the config's checks refuse
        raise OptionError(f"{what}: {err}") from None


def refuse_missing(config_cls: type, given: Mapping[str, Any], what: str) -> None:
    """A ConfigError naming the first required option (a field without a default) that `given` leaves out."""
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        if (
            f.init
            and f.name not in given
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ):
            raise ConfigError(
                f"{what}: option {f.name!r} ({_type_name(hints[f.name])}) is required and not given; "
                f"give it, e.g. options: {{{f.name}: ...}}"
            )


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check `value` against a type annotation (int, float, bool, str, Literal, Optional, list, dict)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin is Literal:
        if value in args:
            return value
        hint = closest(str(value), [str(a) for a in args])
        did_you_mean = f"; did you mean {hint!r}?" if hint else ""
        raise ConfigError(f"{where} is {value!r}{did_you_mean} choose one of: {', '.join(map(str, args))}")
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        if len(errors) == 1 and value is not None:  # Optional[X]: X's own message says more
            raise ConfigError(errors[0] + " or null")
        raise ConfigError(f"{where} is {value!r}, expected {_type_name(annotation)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} is {value!r}, expected a list")
        inner = args[0] if args else Any
        return [coerce(v, inner, where) for v in value]
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} is {value!r}, expected a mapping")
        return dict(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} is {value!r}, expected true or false")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where} is {value!r}, expected an integer")
    if annotation is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            huge = isinstance(value, int) and abs(value) >= 2**1023  # float() of it would overflow
            number = (math.inf if value > 0 else -math.inf) if huge else float(value)
        elif isinstance(value, str):  # YAML reads 1e-3 as a string
            with contextlib.suppress(ValueError):
                number = float(value)
        if number is None or math.isnan(number):  # inf is a value (e.g. beta: inf, zero temperature)
            raise ConfigError(f"{where} is {value!r}, expected a number")
        return number
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} is {value!r}, expected a string")
    return value


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (list, tuple):
        return f"list[{_type_name(args[0])}]" if args else "list"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def require(condition: bool, message: str) -> None:
    """Raise a ConfigError with `message` unless `condition` holds (for __post_init__ checks)."""
    if not condition:
        raise ConfigError(message)
