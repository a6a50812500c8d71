"""Key padding masks (attnbench.kernels.masks): bool, int and float 0/1 mean the same on every attention and path;
anything else is a clear error; `attnbench check` holds plugins to it, and to the output's dtype and shape."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from attnbench.attention_properties import check_attention, check_property, has_native_path
from attnbench.cli import main
from attnbench.kernels import native
from attnbench.kernels.masks import key_padding_mask
from attnbench.registry import build_attention, module_attention_names

sys.path.insert(0, str(Path(__file__).parent))  # plugin_attentions
NAMES = [name for name in module_attention_names() if not name.startswith("test-")]
FAST = {
    "performer": {"num_features": 16},
    "random-features": {"num_features": 16},
    "coulomb": {"num_features": 16},
    "rfa": {"num_features": 16},
    "nystromformer": {"num_landmarks": 4},
    "linformer": {"projected_length": 4},
}


def hf_mask() -> torch.Tensor:
    """A Hugging Face attention_mask: int64, 1 = real token, 0 = padding (second row: 5 real of 9)."""
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 5:] = 0
    return mask


def qkv(n: int = 9) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 2, n, 8, generator=g) for _ in range(3)]


def test_softmax_with_a_hugging_face_mask_matches_the_naive_formula():
    q, k, v = qkv()
    mask = hf_mask()
    scores = (q @ k.transpose(-1, -2)) / 8**0.5
    expected = scores.masked_fill(mask[:, None, None, :] == 0, -torch.inf).softmax(-1) @ v
    attn = build_attention("softmax", head_dim=8, num_heads=2)
    for given in (mask, mask.float(), mask.bool()):
        torch.testing.assert_close(attn(q, k, v, key_padding_mask=given), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("on", [True, False], ids=["native-on", "native-off"])
def test_every_attention_reads_int_and_float_masks_as_the_bool_mask_on_both_paths(name, on):
    q, k, v = qkv()
    attn = build_attention(name, head_dim=8, num_heads=2, max_length=16, **FAST.get(name, {})).eval()
    with torch.no_grad(), native.turned_off(not on):
        expected = attn(q, k, v, key_padding_mask=hf_mask().bool())
        for given in (hf_mask(), hf_mask().float(), hf_mask().double()):
            torch.testing.assert_close(attn(q, k, v, key_padding_mask=given), expected, rtol=0, atol=0)
        with pytest.raises(ValueError, match="holds 0.5"):
            attn(q, k, v, key_padding_mask=hf_mask() * 0.5)
        with pytest.raises(ValueError, match=r"shape \(2, 10\)"):
            attn(q, k, v, key_padding_mask=torch.ones(2, 10, dtype=torch.bool))


def test_the_normaliser_returns_the_bool_mask_and_names_bad_input():
    keys = torch.zeros(2, 1, 9, 4)
    assert key_padding_mask(None, keys) is None
    assert torch.equal(key_padding_mask(hf_mask().float(), keys), hf_mask() == 1)
    with pytest.raises(ValueError, match=r"holds -10000.0"):  # an additive (extended) mask is not a padding mask
        key_padding_mask((1.0 - hf_mask()) * -10000.0, keys)
    with pytest.raises(TypeError, match="list"):
        key_padding_mask([[1] * 9] * 2, keys)


def test_check_catches_a_float64_output_and_an_additive_float_mask_in_one_pass():
    assert not has_native_path("plugin_attentions:Float64Out")
    [dtype] = check_property("plugin_attentions:Float64Out", "output dtype and shape")
    assert dtype.native is None and dtype.ok is False and "dtype torch.float64" in dtype.detail
    [mask] = check_property("plugin_attentions:AdditiveMask", "padding mask as bool, int or float 0/1")
    assert mask.ok is False and "float32 0/1 mask" in mask.detail
    verdicts = check_attention("softmax", shapes=((1, 1),))
    assert {v.native for v in verdicts} == {None}  # no native path: one pass, not two
    assert all(v.ok is not False for v in verdicts)


def test_a_plugins_required_argument_is_an_option_refused_when_missing(tmp_path, capsys):
    assert main(["check", "plugin_attentions:Banded"]) == 2
    assert "option 'window' (int) is required and not given" in capsys.readouterr().err
    assert main(["check", "plugin_attentions:Banded", "-o", "window=x"]) == 2
    assert "expected an integer" in capsys.readouterr().err
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\ndescription: d\nseeds: [0]\nmeasurements: [accuracy]\n"
        "tasks: [{name: listops, options: {num_train: 16}}]\n"
        "attentions: [{name: 'plugin_attentions:Banded'}]\n"
    )
    assert main(["run", str(suite), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert (
        "attentions[0].options: attention 'plugin_attentions:Banded': option 'window' (int) is required"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()
    assert build_attention("plugin_attentions:Banded", head_dim=8, window=2).window == 2
