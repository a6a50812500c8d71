"""Properties every registered attention must have (new registrations are covered automatically)."""
import pytest
import torch

from harness.model import ModelConfig, TransformerClassifier
from harness.errors import ConfigError
from harness.registry import attention_entry, attention_names, build_attention
from harness.tasks.base import Split, TaskData
from harness.train import TrainConfig, predict_proba, train_classifier

NAMES = attention_names()
CAUSAL = [name for name in NAMES if attention_entry(name).capabilities.causal]
# FAVOR+ stabilises keys by a max over all positions (as the reference does): future keys move it, which
# reaches earlier outputs only through the features' eps, so the leak is small but not zero.
FAVOR_LEAK = {"performer": 1e-2, "random-features": 1e-2}
HEADS, HEAD_DIM, MAX_LENGTH = 2, 16, 4096
# smaller than the defaults where a variant's cost grows with them, to keep training tests to seconds
FAST = {"performer": {"num_features": 32}, "random-features": {"num_features": 32}, "coulomb": {"num_features": 32},
        "rfa": {"num_features": 16}, "nystromformer": {"num_landmarks": 8}, "linformer": {"projected_length": 8}}


def _build(name, **options):
    torch.manual_seed(0)
    return build_attention(name, head_dim=HEAD_DIM, num_heads=HEADS, max_length=MAX_LENGTH, seed=0, **options)


def _qkv(batch, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, n, HEAD_DIM, generator=g) for _ in range(3)]


def test_the_issue_families_are_registered():
    expected = {"softmax", "performer", "rfa", "nystromformer", "elu-linear", "linformer", "random-features"}
    assert expected <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_padded_keys_do_not_change_real_outputs(name):
    attn = _build(name).eval()
    q, k, v = _qkv(2, 20)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1, 12:] = False
    out = attn(q, k, v, key_padding_mask=mask)
    loud = [t.clone() for t in (q, k, v)]
    for t in loud:
        t[1, :, 12:] = 30 * torch.randn(HEADS, 8, HEAD_DIM)
    out_loud = attn(*loud, key_padding_mask=mask)
    torch.testing.assert_close(out_loud[1, :, :12], out[1, :, :12], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out_loud[0], out[0], rtol=0, atol=0)
    alone = attn(q[1:, :, :12], k[1:, :, :12], v[1:, :, :12])  # the same sequence without padding
    torch.testing.assert_close(out[1, :, :12], alone[0], rtol=1e-4, atol=1e-5)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_attention(name):
    q, k, v = _qkv(2, 10)
    first, second = (build_attention(name, head_dim=HEAD_DIM, num_heads=HEADS, max_length=64, seed=7).eval()
                     for _ in range(2))
    assert first.state_dict().keys() == second.state_dict().keys()
    for key, value in first.state_dict().items():
        torch.testing.assert_close(second.state_dict()[key], value, rtol=0, atol=0, msg=key)
    torch.testing.assert_close(first(q, k, v), second(q, k, v), rtol=0, atol=0)
    other = build_attention(name, head_dim=HEAD_DIM, num_heads=HEADS, max_length=64, seed=8).state_dict()
    random_tensors = [key for key, value in first.state_dict().items()
                      if value.is_floating_point() and value.numel() > 1 and value.std() > 0]
    assert all(not torch.equal(other[key], first.state_dict()[key]) for key in random_tensors), name


@pytest.mark.parametrize("name", NAMES)
def test_a_sequence_of_padding_only_stays_finite(name):
    attn = _build(name).eval()
    q, k, v = _qkv(2, 6)
    mask = torch.tensor([[True] * 6, [False] * 6])
    out = attn(q, k, v, key_padding_mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], attn(q[:1], k[:1], v[:1])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 4096])
def test_outputs_finite_for_very_short_and_long_sequences(name, n):
    attn = _build(name).eval()
    q, k, v = _qkv(1, n)
    mask = torch.ones(1, n, dtype=torch.bool)
    mask[0, n - n // 3:] = False if n > 1 else True
    with torch.no_grad():
        for m in (None, mask):
            out = attn(q, k, v, key_padding_mask=m)
            assert out.shape == (1, HEADS, n, HEAD_DIM)
            assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NAMES)
def test_gradients_flow_to_inputs_and_own_parameters(name):
    attn = _build(name).train()
    q, k, v = (t.requires_grad_() for t in _qkv(2, 24))
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[0, 17:] = False
    out = attn(q, k, v, key_padding_mask=mask)
    (out * mask[:, None, :, None]).square().sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    for pname, p in attn.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_outputs_do_not_depend_on_later_positions(name):
    attn = _build(name, causal=True).eval()
    q, k, v = _qkv(2, 100)
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 90:] = False
    changed = [t.clone() for t in (q, k, v)]
    for t in changed:
        t[:, :, 70:] = torch.randn(2, HEADS, 30, HEAD_DIM)
    before = attn(q, k, v, key_padding_mask=mask)[:, :, :70]
    after = attn(*changed, key_padding_mask=mask)[:, :, :70]
    torch.testing.assert_close(after, before, rtol=0, atol=FAVOR_LEAK.get(name, 1e-5))
    causal_out, plain_out = attn(q, k, v), _build(name).eval()(q, k, v)
    torch.testing.assert_close(causal_out[:, :, 0], v[:, :, 0], rtol=1e-4, atol=1e-4)  # the first sees itself only
    torch.testing.assert_close(causal_out[:, :, -1], plain_out[:, :, -1], rtol=1e-4, atol=1e-4)  # the last sees all


@pytest.mark.parametrize("name", sorted(set(NAMES) - set(CAUSAL)))
def test_variants_without_a_causal_form_refuse_it(name):
    with pytest.raises(ConfigError, match="causal"):
        _build(name, causal=True)


def _presence_task(seed=0, rows=(384, 128, 256), length=16):
    """Label 1 iff token 1 occurs after the leading CLS token (2); only attention can carry it to position 0."""
    g = torch.Generator().manual_seed(seed)
    splits = {}
    for split, count in zip(("train", "validation", "test"), rows):
        ids = torch.randint(3, 10, (count, length), generator=g)
        labels = torch.randint(0, 2, (count,), generator=g)
        lengths = torch.randint(6, length + 1, (count,), generator=g)
        where = (torch.rand(count, generator=g) * (lengths - 1)).long() + 1
        ids[labels == 1, where[labels == 1]] = 1
        mask = torch.arange(length)[None, :] < lengths[:, None]
        ids[:, 0] = 2
        ids[~mask] = 0
        splits[split] = Split(ids, mask, labels)
    return TaskData("token-presence", splits, num_classes=2, vocab_size=10, max_length=length)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_model_learns_an_easy_task(name):
    task = _presence_task()
    cfg = ModelConfig(vocab_size=10, num_classes=2, max_length=16, d_model=32, num_layers=1, num_heads=2,
                      ffn_dim=64, dropout=0.0, pooling="first")
    model = TransformerClassifier(cfg, name, FAST.get(name, {}), seed=0)
    train = TrainConfig(epochs=6, batch_size=32, lr=1e-2, warmup_fraction=0.1, phase_a={"max_steps": 4})
    result = train_classifier(model, task, train, seed=0)
    probs = predict_proba(result.model, task["test"])
    accuracy = (probs.argmax(1) == task["test"].labels).float().mean().item()
    assert accuracy > 0.75, (name, accuracy, result.history)
