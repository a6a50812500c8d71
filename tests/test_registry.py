"""The attention registry: glob listing, did-you-mean errors, typed options, and user plugins."""

import dataclasses
import textwrap
from pathlib import Path

import pytest
import torch

from attnbench.errors import ConfigError, UnknownNameError, UserError
from attnbench.kernels.short_conv import ShortConvConfig
from attnbench.model import ModelConfig, MultiHeadAttention, TransformerClassifier
from attnbench.registry import (
    ATTENTIONS,
    attention_capabilities,
    attention_entry,
    attention_names,
    build_attention,
    module_attention_names,
)

PLUGIN = '''
import torch
from torch import nn


class MeanAttention(nn.Module):
    """Every position gets the mean of the real values (a toy plugin)."""

    def __init__(self, head_dim=64, num_heads=1, scale=1.0):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, key_padding_mask=None):
        w = torch.ones_like(v[..., :1]) if key_padding_mask is None else key_padding_mask[:, None, :, None].to(v.dtype)
        return self.scale * ((v * w).sum(-2, keepdim=True) / w.sum(-2, keepdim=True)).expand_as(v)
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A private registry state plus a folder on sys.path for throw-away plugin modules."""
    monkeypatch.setattr(ATTENTIONS, "_entries", dict(ATTENTIONS._entries))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _expected_mean(v, mask):
    w = mask[:, None, :, None].float()
    return ((v * w).sum(-2, keepdim=True) / w.sum(-2, keepdim=True)).expand_as(v)


def test_names_are_sorted_and_glob_filtered():
    names = attention_names()
    assert names == sorted(names)
    assert attention_names("*former") == ["linformer", "nystromformer", "performer", "skyformer"]
    assert attention_names("*linear*") == ["elu-linear", "log-linear"]
    assert attention_names("nothing-like-this*") == []


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownNameError) as err:
        build_attention("perfomer")
    message = str(err.value)
    assert "did you mean 'performer'" in message and "softmax" in message and "module:ClassName" in message


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        build_attention("performer", num_feature=64)
    message = str(err.value)
    assert "unknown option 'num_feature'" in message and "did you mean 'num_features'" in message
    assert "redraw_every" in message and "head_dim" in message


def test_wrong_types_and_choices_are_clear():
    with pytest.raises(ConfigError, match="'num_features' of attention 'performer' is 'many', expected an integer"):
        build_attention("performer", num_features="many")
    with pytest.raises(ConfigError, match="expected true or false"):
        build_attention("rfa", resample="yes")
    with pytest.raises(ConfigError, match="did you mean 'favor'.*choose one of"):
        build_attention("random-features", feature_map="favour")
    with pytest.raises(ConfigError, match="num_landmarks=0 must be at least 1"):
        build_attention("nystromformer", num_landmarks=0)
    assert build_attention("rfa", tau="0.5").cfg.tau == 0.5  # YAML reads 5e-1 as text: numbers are coerced


def test_every_entry_has_documented_options_and_capabilities():
    for name in attention_names():
        entry = attention_entry(name)
        assert entry.description, name
        rows = entry.options()
        assert {"head_dim", "num_heads", "max_length", "causal", "seed"} <= {r["name"] for r in rows}
        assert all(r["help"] for r in rows), name
        assert set(entry.capabilities.as_dict()) == {
            "padding_mask",
            "causal",
            "needs_max_length",
            "learning_phase",
            "positive_features",
            "normalised",
            "recurrent_state",
            "layer_pattern",
        }
    assert attention_entry("linformer").capabilities.needs_max_length
    assert not attention_entry("nystromformer").capabilities.causal
    assert attention_entry("elu-linear").capabilities.causal


def test_plugin_by_module_and_class_string(plugin_dir):
    (plugin_dir / "toy_attention_by_string.py").write_text(textwrap.dedent(PLUGIN))
    attn = build_attention("toy_attention_by_string:MeanAttention", head_dim=8, scale=2.0)
    v = torch.randn(2, 1, 5, 8)
    mask = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    torch.testing.assert_close(attn(v, v, v, key_padding_mask=mask), 2.0 * _expected_mean(v, mask))
    with pytest.raises(ConfigError, match="did you mean 'scale'"):
        build_attention("toy_attention_by_string:MeanAttention", scal=2.0)
    with pytest.raises(UnknownNameError, match="MeanAttention"):
        build_attention("toy_attention_by_string:MeanAtention")
    with pytest.raises(UserError, match="cannot import module 'no_such_module_xyz'"):
        build_attention("no_such_module_xyz:Thing")


def test_registered_plugin_keeps_its_typed_config(plugin_dir):
    (plugin_dir / "toy_registered_plugin.py").write_text(
        textwrap.dedent('''
        import dataclasses
        from attnbench.options import option
        from attnbench.registry import AttentionConfig, register_attention
        from attnbench.baselines.softmax import SoftmaxAttention, SoftmaxConfig

        @dataclasses.dataclass
        class HotConfig(SoftmaxConfig):
            temperature: float = option(1.0, "divides the scores")

        @register_attention("toy-hot", config=HotConfig, causal=False)
        class Hot(SoftmaxAttention):
            """Softmax with a temperature."""
            def forward(self, q, k, v, key_padding_mask=None):
                return super().forward(q / self.cfg.temperature, k, v, key_padding_mask)
    ''')
    )
    entry = attention_entry("toy_registered_plugin:Hot")
    assert dataclasses.is_dataclass(entry.config) and entry.config.__name__ == "HotConfig"
    assert entry.capabilities.causal is False
    with pytest.raises(ConfigError, match="expected a number"):
        build_attention("toy_registered_plugin:Hot", temperature="hot")
    assert build_attention("toy_registered_plugin:Hot", temperature=2.0).cfg.temperature == 2.0


def test_plugin_by_installed_entry_point(plugin_dir, capsys):
    (plugin_dir / "toy_attention_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = plugin_dir / "toy_attention_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-attention-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.attention]\ntoy-mean = toy_attention_plugin:MeanAttention\n")
    assert "toy-mean" in attention_names()
    assert attention_names("toy-*") == ["toy-mean"]
    attn = build_attention("toy-mean", head_dim=8, scale=3.0)
    v = torch.randn(2, 1, 4, 8)
    mask = torch.tensor([[True] * 4, [True] * 3 + [False]])
    torch.testing.assert_close(attn(v, v, v, key_padding_mask=mask), 3.0 * _expected_mean(v, mask))
    assert attention_entry("toy-mean").source.startswith("entry point")
    from attnbench.cli import main

    assert main(["list", "attention", "toy-*"]) == 0
    assert "toy-mean: Every position gets the mean" in capsys.readouterr().out
    model = TransformerClassifier(
        ModelConfig(vocab_size=11, max_length=8, d_model=16, num_heads=2, num_layers=1), "toy-mean", {"scale": 0.5}
    )
    logits = model(torch.randint(1, 11, (3, 8)), torch.ones(3, 8, dtype=torch.bool))
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()


def _readme_block(first_line: str) -> str:
    """The README's fenced code block that starts with `first_line`."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index(first_line)
    return text[start : text.index("```", start)]


def _naive_linear(phi_q, phi_k, v, mask, causal):
    """The O(N^2) formula in float64: w_ij = phi(q_i) . phi(k_j) over real (and, causal, earlier) keys."""
    w = phi_q.double() @ phi_k.double().transpose(-2, -1) * mask[:, None, None, :]
    if causal:
        w = w.tril()
    return (w @ v.double()) / w.sum(-1, keepdim=True)


def test_the_readmes_feature_map_plugin_runs_as_written(plugin_dir, capsys):
    from attnbench.attention_properties import check_attention
    from attnbench.cli import main

    (plugin_dir / "my_attn").mkdir()
    (plugin_dir / "my_attn" / "relu_linear.py").write_text(_readme_block("# my_attn/relu_linear.py"))
    spec = "my_attn.relu_linear:ReluLinearAttention"
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 16, generator=g) for _ in range(3))
    mask = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])
    for causal in (False, True):
        attn = build_attention(spec, head_dim=16, causal=causal).eval()
        phi = lambda x: torch.relu(x) + 1e-3  # noqa: E731 - the map, independently
        out = attn(q, k, v, key_padding_mask=mask)
        expected = _naive_linear(phi(q), phi(k), v, mask, causal).float()
        torch.testing.assert_close(out[0], expected[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out[1, :, :5], expected[1, :, :5], rtol=1e-4, atol=1e-5)
    assert all(v.ok is not False for v in check_attention(spec)), [v.line() for v in check_attention(spec)]
    assert main(["list", "attention", spec]) == 0
    assert "causal=yes" in capsys.readouterr().out
    assert main(["check", spec]) == 0


@pytest.mark.parametrize("name", attention_names())
def test_capability_flags_match_behaviour(name):
    """needs_max_length: building without one fails exactly then; positive_features (feature-map attentions,
    for every map they offer): the features of random inputs are never negative exactly then."""
    entry = attention_entry(name)
    if entry.capabilities.layer_pattern:  # a model builds it layer by layer (tests/test_hybrid.py)
        with pytest.raises(ConfigError, match="layer by layer"):
            build_attention(name, head_dim=16)
        return
    if entry.capabilities.needs_max_length:
        with pytest.raises(ConfigError, match="max_length"):
            build_attention(name, head_dim=16)
    else:
        build_attention(name, head_dim=16)
    maps = getattr(entry.config, "__dataclass_fields__", {}).get("feature_map")
    kinds = list(getattr(maps.type, "__args__", ())) if maps is not None and not isinstance(maps.type, str) else []
    if maps is not None and not kinds:
        from attnbench.baselines.feature_maps import FEATURE_MAPS

        kinds = list(FEATURE_MAPS)
    for options in [{"feature_map": kind} for kind in kinds] or [{}]:
        attn = build_attention(name, head_dim=16, max_length=64, **options).eval()
        if not hasattr(attn, "feature_map"):
            continue
        x = 3 * torch.randn(2, 1, 50, 16, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            smallest = min(attn.feature_map.forward_queries(x).min(), attn.feature_map.forward_keys(x).min())
        claimed = attention_capabilities(name, **options).positive_features
        assert claimed == bool(smallest >= 0), (name, options, float(smallest))


def test_a_third_party_learning_phase_is_declared_with_its_own_config_type():
    import dataclasses

    from attnbench.options import option
    from attnbench.registry import LEARNING_PHASES, learning_phase_entry, register_attention, register_learning_phase

    @dataclasses.dataclass
    class WarmupConfig:
        rounds: int = option(1, "rounds of the toy learning phase")

    @register_learning_phase("toy-warmup", config=WarmupConfig)
    def toy_warmup(model, train_split, options, **kwargs):
        return {"rounds": options.rounds}

    @register_attention("toy-with-phase", learning_phase="toy-warmup")
    class ToyWithPhase(torch.nn.Module):
        def __init__(self, config):
            super().__init__()

    try:
        entry = learning_phase_entry("toy-with-phase")
        assert entry.factory is toy_warmup and entry.config is WarmupConfig
        assert learning_phase_entry("softmax") is None
        assert LEARNING_PHASES.make_config("toy-warmup", rounds=3).rounds == 3
        with pytest.raises(ConfigError, match="unknown option 'round'"):
            LEARNING_PHASES.make_config("toy-warmup", round=3)
    finally:
        ATTENTIONS._entries.pop("toy-with-phase")
        LEARNING_PHASES._entries.pop("toy-warmup")


def _initial_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**module.state_dict(), **{f"buffer {n}": b for n, b in module.named_buffers()}}


SEEDED = [(name, {}) for name in module_attention_names()]
SEEDED += [
    (name, {"short_conv": 3})
    for name in module_attention_names()
    if issubclass(ATTENTIONS.get(name).config, ShortConvConfig)
]


@pytest.mark.parametrize("name, options", SEEDED, ids=lambda x: x if isinstance(x, str) else str(x or ""))
def test_the_seed_alone_fixes_every_initial_weight(name, options):
    """build_attention(name, seed=s) twice, whatever torch's global generator holds in between, gives the same
    parameters and buffers (BASED, GLA and every short_conv filter drew from the global generator)."""
    built = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        built.append(_initial_tensors(build_attention(name, head_dim=8, num_heads=2, max_length=64, seed=3, **options)))
    assert built[0].keys() == built[1].keys()
    differ = [key for key in built[0] if not torch.equal(built[0][key], built[1][key])]
    assert not differ, f"{name} {options}: {differ} drawn from torch's global generator"


@pytest.mark.parametrize("name", ["based", "gla", "deltanet", "performer"])
def test_a_models_attention_is_the_one_its_seed_builds(name):
    """The model builds each layer's attention with the global generator seeded by the layer's seed, as results so
    far were computed; the attention's own generator draws the same values, so committed cells recompute the same."""
    options = {"short_conv": 3} | ({"num_features": 8} if name == "performer" else {})
    torch.manual_seed(5)
    layer = MultiHeadAttention(ModelConfig(d_model=16, num_heads=2, num_layers=1, max_length=32), name, options, 7)
    alone = build_attention(name, head_dim=8, num_heads=2, max_length=32, seed=7, **options)
    mine, theirs = _initial_tensors(layer.attention), _initial_tensors(alone)
    assert all(torch.equal(mine[key], theirs[key]) for key in theirs)


def test_the_readmes_plugin_rules_are_stated_and_name_what_exists():
    """The README said nothing of a causal plug-in's recurrent step nor of how a plug-in reads padding masks (the
    issue itself named `attnbench.baselines.masks`, since moved): each rule is stated, and every `attnbench.*`
    module or function its Extend section names exists."""
    import importlib
    import re

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    extend = text[text.index("## Extend") : text.index("## Layout")]
    assert "attnbench.kernels.masks.key_padding_mask" in extend and "`causal=True`" in extend
    assert "init_state(batch_size)" in extend and "step(q_t, k_t, v_t, state" in extend
    for dotted in sorted(set(re.findall(r'(?<!")\battnbench(?:\.[a-z_]+)+', extend))):  # not entry-point groups
        module, _, name = dotted.rpartition(".")
        try:
            importlib.import_module(dotted)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), name), dotted


def test_every_registered_learning_phase_keeps_the_one_signature():
    import inspect

    from attnbench.registry import LearningPhase, attention_names, learning_phase_entry

    protocol = list(inspect.signature(LearningPhase.__call__).parameters.values())[1:]  # without self
    phases = {e.factory.__module__: e.factory for e in map(learning_phase_entry, attention_names()) if e is not None}
    assert {"attnbench.baselines.coulomb.phase_a", "attnbench.baselines.hedgehog.distillation"} <= set(phases)
    for name, phase in phases.items():
        params = list(inspect.signature(phase).parameters.values())
        assert [(p.name, p.kind, p.default) for p in params] == [(p.name, p.kind, p.default) for p in protocol], name
