"""One backbone, two heads: a seed gives the classifier and the decoder the weights and outputs they had when
each built its own embeddings, blocks and final norm (fingerprints stored from that code, commit c4cb37b)."""

import pytest
import torch

from attnbench.decoder import TransformerDecoder
from attnbench.model import ModelConfig, TransformerClassifier

BASE = dict(vocab_size=40, num_classes=3, max_length=16, d_model=16, num_layers=2, num_heads=2, ffn_dim=32, dropout=0.1)
# (head, config overrides, attention, options, seed) -> (weights fingerprint, output fingerprints)
CASES = {
    "classifier-pairs-separate": (
        (TransformerClassifier, dict(num_segments=2, qk_projection="separate"), "softmax", {}, 3),
        (13300.423186326912, [-0.6173639446496964, -0.5051004737615585]),
    ),
    "classifier-first-none-torch-dropout": (
        (
            TransformerClassifier,
            dict(pooling="first", qk_projection="none", pad_id=1, dropout_rng="torch"),
            "performer",
            {"num_features": 8},
            7,
        ),
        (8086.417569883393, [-2.067262291908264, -1.5737024545669556]),
    ),
    "decoder-tied": (
        (TransformerDecoder, dict(kind="decoder"), "softmax", {}, 5),
        (8909.160195736767, [-4.532637654039718, -5.4987234685977455, -3.1037437824124936, 436.0]),
    ),
    "decoder-untied-separate": (
        (TransformerDecoder, dict(kind="decoder", tie_embeddings=False, qk_projection="separate"), "elu-linear", {}, 2),
        (14505.807058913295, [47.9053196515888, 42.088472246192396, 33.62578811869025, 361.0]),
    ),
}


def _fingerprints(model: torch.nn.Module, padded_rows: bool) -> tuple[float, list[float]]:
    """(order-weighted sum of |weights|, sums of: a training forward (dropout drawn from seed 99), an evaluation
    forward with padding, and for a decoder six steps and a greedy continuation)."""
    weights = sum((i + 1) * float(p.detach().double().abs().sum()) for i, p in enumerate(model.parameters()))
    ids = torch.randint(2, 40, (3, 12), generator=torch.Generator().manual_seed(11))
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, 9:], mask[2, 5:] = False, False
    extra = [(torch.arange(12) >= 6).long().expand(3, 12)] if padded_rows else []
    torch.manual_seed(99)
    outputs = [model.train()(ids, mask, *extra)]
    with torch.no_grad():
        outputs.append(model.eval()(ids, mask, *extra))
        if isinstance(model, TransformerDecoder):
            state, steps = model.init_state(3), []
            for t in range(6):
                logits, state = model.step(ids[:, t], state)
                steps.append(logits)
            outputs += [torch.stack(steps, 1), model.generate(ids[:, :4], 3)]
    return weights, [float(t.detach().double().sum()) for t in outputs]


@pytest.mark.parametrize("case", CASES)
def test_a_seed_gives_the_weights_and_outputs_of_the_separate_models(case):
    (head, overrides, attention, options, seed), (weights, outputs) = CASES[case]
    model = head(ModelConfig(**{**BASE, **overrides}), attention, options, seed=seed)
    got_weights, got_outputs = _fingerprints(model, overrides.get("num_segments") == 2)
    assert got_weights == pytest.approx(weights, rel=1e-7)
    assert got_outputs == pytest.approx(outputs, rel=1e-5, abs=1e-5)


def test_both_heads_share_one_backbone_type_and_draw_it_first():
    classifier = TransformerClassifier(ModelConfig(**BASE), "softmax", seed=1)
    decoder = TransformerDecoder(ModelConfig(**BASE, kind="decoder", tie_embeddings=False), "softmax", seed=1)
    assert type(classifier.backbone) is type(decoder.backbone)
    head_params = {id(p) for p in [*classifier.classifier.parameters(), *decoder.head.parameters()]}
    for model in (classifier, decoder):  # the head's weights come last in the parameter order (the draw order)
        names = [n for n, p in model.named_parameters() if id(p) in head_params]
        assert [n for n, _ in model.named_parameters()][-len(names) :] == names
