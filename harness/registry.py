"""Registries of named, configurable components: attentions (and, through `Registry`, tasks, measurements).

Contract (other code, tests and users rely on it):

    from attnbench.registry import attention_names, build_attention, register_attention
    attention_names("*linear*")                     # sorted names, timm-style glob
    attn = build_attention("performer", head_dim=64, num_features=256, seed=0)
    out = attn(q, k, v, key_padding_mask=mask)      # (B, H, N, D) -> (B, H, N, D)

An attention is found by registered name, by an installed entry point in the group
`attnbench.attention`, or by a "package.module:ClassName" string. The built-in components are found by
walking their packages (`discover`), so no list names them: every module of attnbench.baselines registers its
attentions (a family package in its __init__ or its `attention` module); a family package may also hold a
`measurement` and a `report` module, found by the measurement and report-section registries the same way.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import importlib.metadata
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterable
from typing import Any

from attnbench.errors import ConfigError, UnknownNameError, UserError, unknown_name_message
from attnbench.options import make_options, option, option_table

ENTRY_POINT_GROUP = "attnbench.attention"


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a component supports, so the harness can skip impossible pairs with a reason."""

    padding_mask: bool = True  # honours key_padding_mask
    causal: bool = False  # has a causal (autoregressive) form
    needs_max_length: bool = False  # parameters depend on a maximum sequence length
    learning_phase: str | None = None  # a registered learning phase (name or "module:function") run before training
    positive_features: bool = True  # random-feature maps: features are non-negative
    normalised: bool = True  # outputs are weighted means of values (weights sum to 1), so a lone token returns its v
    recurrent_state: bool = False  # built with causal=True: init_state(batch_size), step(q_t, k_t, v_t, state)
    layer_pattern: bool = False  # a pattern of attentions over a model's layers (hybrid), not one layer's attention

    def as_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered component: how to build it, its typed options and capabilities."""

    name: str
    factory: Callable[..., Any]  # called with one validated config instance
    config: type
    description: str
    capabilities: Capabilities  # with the default options where a flag depends on them
    source: str = "builtin"
    depends: tuple[tuple[str, Callable[[Any], bool]], ...] = ()  # (flag, config -> bool) for option-dependent flags
    module: str = ""  # the module that defines the registered object (its code's fingerprint starts there)

    def options(self) -> list[dict[str, Any]]:
        return option_table(self.config)

    def capabilities_for(self, config: Any) -> Capabilities:
        """The flags of this entry built with `config` (a validated config instance): option-dependent flags,
        such as positive_features with a configurable feature map, evaluated on it."""
        return dataclasses.replace(self.capabilities, **{flag: bool(rule(config)) for flag, rule in self.depends})


def discover(package: str, submodule: str | None = None) -> list[str]:
    """Import the built-in plugin modules of `package`, found by walking it: each of its top-level modules and
    packages, or with `submodule` each top-level package's module of that name where it has one (looked up on disk:
    the other packages are not imported). Names starting with '_' and those the package lists in `ON_DEMAND`
    (reached only as 'module:Class' strings, e.g. adapters that need an optional extra) are left out. Returns the
    names imported, in name order."""
    root = importlib.import_module(package)
    skip = set(getattr(root, "ON_DEMAND", ()))
    imported = []
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in skip:
            continue
        name = f"{package}.{info.name}"
        if submodule is not None:
            inner = pkgutil.iter_modules([f"{info.module_finder.path}/{info.name}"]) if info.ispkg else []
            if submodule not in {m.name for m in inner}:
                continue
            name = f"{name}.{submodule}"
        importlib.import_module(name)
        imported.append(name)
    return imported


class Registry:
    """Name -> Entry, with glob listing, "module:Class" lookup and plugin entry points. The built-in entries are
    registered on first use by importing the modules `discover` finds in each (package, submodule) of
    `builtin_packages`, then `builtin_modules`."""

    def __init__(
        self,
        kind: str,
        builtin_modules: Iterable[str] = (),
        entry_point_group: str | None = None,
        builtin_packages: Iterable[tuple[str, str | None]] = (),
    ):
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._builtin_modules = tuple(builtin_modules)
        self._builtin_packages = tuple(builtin_packages)
        self._builtins_loaded = False
        self._entry_point_group = entry_point_group

    def register(
        self, name: str, *, config: type, description: str | None = None, **capabilities: bool | Callable[[Any], bool]
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Class/function decorator: `@registry.register("name", config=MyConfig, causal=True)`; a flag that
        depends on the options is a function of the config instance, e.g.
        `positive_features=lambda cfg: cfg.feature_map != "trig"`."""

        def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
            doc = description or (inspect.getdoc(factory) or "").split("\n")[0]
            depends = tuple((flag, rule) for flag, rule in capabilities.items() if callable(rule))
            defaults = {flag: bool(rule(config())) for flag, rule in depends}
            capabilities_ = Capabilities(**{**capabilities, **defaults})
            entry = Entry(name, factory, config, doc, capabilities_, _source_of(factory), depends, factory.__module__)
            self._entries[name] = entry
            factory.__attnbench_entry__ = entry
            return factory

        return decorate

    def names(self, pattern: str = "*") -> list[str]:
        """Sorted names matching a glob pattern (registered, plus installed entry points)."""
        self._load_builtins()
        names = set(self._entries) | set(self._entry_point_names())
        return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))

    def get(self, name: str) -> Entry:
        """The entry for a registered name, an entry-point name, or a "module:Class" string."""
        self._load_builtins()
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            return self._entry_from_object(name, _import_object(name, self.kind), source=name)
        loaded = self._load_entry_point(name)
        if loaded is not None:
            return loaded
        raise UnknownNameError(
            unknown_name_message(self.kind, name, self.names()) + "; or give a 'package.module:ClassName' string"
        )

    def make_config(self, name: str, **options: Any) -> Any:
        entry = self.get(name)
        return make_options(entry.config, options, what=f"{self.kind} {name!r}")

    def build(self, name: str, **options: Any) -> Any:
        entry = self.get(name)
        return entry.factory(make_options(entry.config, options, what=f"{self.kind} {name!r}"))

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        for package, submodule in self._builtin_packages:
            discover(package, submodule)
        for module in self._builtin_modules:
            importlib.import_module(module)

    def _entry_point_names(self) -> list[str]:
        if self._entry_point_group is None:
            return []
        return [ep.name for ep in importlib.metadata.entry_points(group=self._entry_point_group)]

    def _load_entry_point(self, name: str) -> Entry | None:
        if self._entry_point_group is None:
            return None
        for ep in importlib.metadata.entry_points(group=self._entry_point_group):
            if ep.name == name:
                try:
                    obj = ep.load()
                except Exception as err:
                    raise UserError(f"{self.kind} plugin {name!r} ({ep.value}) failed to import: {err}") from err
                entry = self._entry_from_object(name, obj, source=f"entry point {ep.value}")
                self._entries[name] = entry
                return entry
        return None

    def _entry_from_object(self, name: str, obj: Any, source: str) -> Entry:
        entry = getattr(obj, "__attnbench_entry__", None)
        if entry is not None:
            return dataclasses.replace(entry, name=name, source=source)
        if not callable(obj):
            raise UserError(f"{source} is not a class or function, so it cannot be a {self.kind}")
        return _entry_for_plain_class(name, obj, source)


def _source_of(factory: Callable[..., Any]) -> str:
    module = getattr(factory, "__module__", "")
    return (
        "builtin" if (module == "attnbench" or module.startswith("attnbench.")) else f"{module}:{factory.__qualname__}"
    )


def _import_object(spec: str, kind: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # not found (ImportError), '' or '.x' (ValueError, TypeError), or its own error
        raise UserError(
            f"cannot import module {module_name!r} for {kind} {spec!r}: {err}; "
            f"install the package or put it on PYTHONPATH"
        ) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise UnknownNameError(unknown_name_message(f"name in module {module_name!r}", part, public))
        obj = getattr(obj, part)
    return obj


# --- attentions -------------------------------------------------------------------------------


@dataclasses.dataclass
class AttentionConfig:
    """Options every attention receives from the model; families subclass this with their own."""

    head_dim: int = option(64, "dimension of each head's queries, keys and values")
    num_heads: int = option(1, "number of heads (for per-head parameters)")
    max_length: int | None = option(None, "maximum sequence length (needed by some variants)")
    causal: bool = option(False, "causal (autoregressive) masking")
    seed: int = option(0, "seed for random features and initialisation")


def _entry_for_plain_class(name: str, cls: Callable[..., Any], source: str) -> Entry:
    """Wrap an unregistered nn.Module class: its __init__ keyword arguments become its options, typed from their
    annotations; one without a default is a required option (a suite that leaves it out is refused)."""
    params = inspect.signature(cls).parameters
    base = {f.name for f in dataclasses.fields(AttentionConfig)}
    hints = _annotations(cls)
    what = f"keyword argument of {getattr(cls, '__name__', 'the plugin')}"
    extra = [
        (
            p.name,
            hints.get(p.name, Any),
            option(p.default, what)
            if p.default is not inspect.Parameter.empty
            else dataclasses.field(kw_only=True, metadata={"help": f"{what} (required)"}),
        )
        for p in params.values()
        if p.name not in base and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    config = dataclasses.make_dataclass(f"{getattr(cls, '__name__', 'Plugin')}Config", extra, bases=(AttentionConfig,))
    inherited = getattr(getattr(cls, "__init__", None), "__module__", "") or ""
    accepts_all = any(p.kind is p.VAR_KEYWORD for p in params.values()) and not inherited.startswith(
        "torch."
    )  # nn.Module's own __init__ takes no options

    def factory(cfg: Any) -> Any:
        kwargs = dataclasses.asdict(cfg)
        return cls(**{k: v for k, v in kwargs.items() if accepts_all or k in params})

    doc = (inspect.getdoc(cls) or "").split("\n")[0]
    return Entry(name, factory, config, doc, Capabilities(), source, module=getattr(cls, "__module__", ""))


def _annotations(cls: Callable[..., Any]) -> dict[str, Any]:
    """The resolved annotations of a class's __init__ (or a function's), or {} where they cannot be resolved."""
    try:
        return typing.get_type_hints(cls.__init__ if inspect.isclass(cls) else cls)
    except Exception:  # noqa: BLE001 - a name the plugin's module cannot resolve: its options stay untyped
        return {}


ATTENTIONS = Registry(
    "attention",
    entry_point_group=ENTRY_POINT_GROUP,
    builtin_packages=[("attnbench.baselines", None), ("attnbench.baselines", "attention")],
    builtin_modules=["attnbench.hybrid"],  # a core attention: the model builds it layer by layer
)


def register_attention(
    name: str,
    *,
    config: type = AttentionConfig,
    description: str | None = None,
    **capabilities: bool | Callable[[Any], bool],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an attention class under `name`; it is built as `cls(config_instance)`.

    Capabilities: padding_mask, causal, needs_max_length, learning_phase, positive_features, normalised,
    recurrent_state, layer_pattern; each a bool, or a function of the config instance where it depends on the options.
    """
    return ATTENTIONS.register(name, config=config, description=description, **capabilities)


def attention_names(pattern: str = "*") -> list[str]:
    """Sorted registered attention names matching a glob pattern, e.g. "*linear*"."""
    return ATTENTIONS.names(pattern)


def module_attention_names(pattern: str = "*") -> list[str]:
    """`attention_names` less the patterns of layers (capability `layer_pattern`, e.g. hybrid): the names
    `build_attention` makes one module of."""
    return [name for name in ATTENTIONS.names(pattern) if not ATTENTIONS.get(name).capabilities.layer_pattern]


def attention_capabilities(name: str, **options: Any) -> Capabilities:
    """The capability flags of attention `name` built with `options` (those that depend on options evaluated)."""
    return ATTENTIONS.get(name).capabilities_for(ATTENTIONS.make_config(name, **options))


def attention_entry(name: str) -> Entry:
    """The registry entry (factory, config class, capabilities) for an attention name or "module:Class"."""
    return ATTENTIONS.get(name)


def layer_attentions(attention: str, options: dict[str, Any], num_layers: int) -> list[tuple[str, dict[str, Any]]]:
    """(name, options) of each of a model's `num_layers` layers: the attention itself in every layer, or, for a
    pattern of layers (capability `layer_pattern`, e.g. attnbench.hybrid), its config's `pattern()` in turn
    (ConfigError where num_layers is not a multiple of the pattern's length)."""
    if not ATTENTIONS.get(attention).capabilities.layer_pattern:
        return [(attention, dict(options))] * num_layers
    period = ATTENTIONS.make_config(attention, **options).pattern()
    if num_layers % len(period):
        raise ConfigError(
            f"attention {attention!r} is a pattern of {len(period)} layers ({', '.join(n for n, _ in period)}) and "
            f"the model has num_layers={num_layers}; give num_layers a multiple of {len(period)}"
        )
    return [period[i % len(period)] for i in range(num_layers)]


LEARNING_PHASES = Registry("learning phase", entry_point_group="attnbench.learning_phase")


class LearningPhase(typing.Protocol):
    """The one signature of a learning phase (phase A), as `register_learning_phase` takes it and the training loop
    calls it: `model` the whole model (the phase finds its attention modules in `model.modules()`), `train_split`
    the task's training Split, `options` its config (an instance of the registered config type, or a dict of
    options: `learning_phase_config`); `device`; `seed` for its own random stream; `progress` (or None);
    `validation` a Split to measure on (or None); `phase_b_steps` phase B's step count (for a budget given as a
    fraction of all steps, or None) -> a JSON-able record of what it did."""

    def __call__(
        self,
        model: Any,
        train_split: Any,
        options: Any,
        *,
        device: Any = "cpu",
        seed: int = 0,
        progress: Any = None,
        validation: Any = None,
        phase_b_steps: int | None = None,
    ) -> dict[str, Any]: ...


def register_learning_phase(
    name: str, *, config: type, description: str | None = None, causal: bool = False
) -> Callable[[LearningPhase], LearningPhase]:
    """Register a learning phase (a `LearningPhase`), run by the training loop before training for every attention
    whose registry entry names it (`learning_phase=`); its options (a suite's `training.phase_a`) are validated
    against `config`, a dataclass of `option`s, like an attention's. `causal`: it is defined for a causal decoder
    too (it reads only what the attention sees, not a sequence's class label); else a decoder cell with it is
    skipped."""
    return LEARNING_PHASES.register(name, config=config, description=description, causal=causal)


def learning_phase_config(config: type, options: Any, what: str) -> Any:
    """A learning phase's `options` as its config: an instance of `config` as it is, a dict (or None) validated."""
    return options if isinstance(options, config) else make_options(config, options or {}, what=what)


def learning_phase_entry(attention: str) -> Entry | None:
    """The learning phase that attention `attention` declares (its factory and config type), or None."""
    spec = ATTENTIONS.get(attention).capabilities.learning_phase
    return None if spec is None else LEARNING_PHASES.get(spec)


def check_heads(attention: str, num_heads: int, given: int) -> None:
    """Per-head parameters built for `num_heads` heads serve a call on `given` heads: the same count, or one head's
    parameters shared by every head (num_heads left at 1, as performer-pytorch shares its projection); else a
    ConfigError naming num_heads."""
    if num_heads not in (1, given):
        raise ConfigError(
            f"attention {attention!r} was built with num_heads={num_heads} but called on {given} heads; "
            f"build it with num_heads={given}, or num_heads=1 to share one head's parameters"
        )


def build_attention(name: str, **options: Any) -> Any:
    """Build the attention module `name` with validated options (unknown options fail with a hint)."""
    return ATTENTIONS.build(name, **options)
