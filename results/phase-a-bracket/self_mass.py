"""How much of each token's attention goes to the token itself: the paper's Q = K model (no W_q, W_k) against
learned W_q, W_k, at initialisation and after training with the suite's recipe (seed 0).

With Q = K = a head's slice x of the normed hidden state, softmax's score of a token with itself,
|x|^2 / sqrt(d) (about sqrt(d) = 8 after the LayerNorm), is at least its score with any other token of the same
norm (Cauchy-Schwarz), so attention can move only between "mostly itself" and "flat" (the uniform floor). Any
attention module is measured the same way: run on the captured (q, k) with one-hot values, so the output rows are
its attention weights.

    python results/phase-a-bracket/self_mass.py SUITE TASK [--train] [LABEL ...]
      e.g. phase-a-bracket listops --train softmax softmax-qk-none   (2-6 min per trained model on one core)
           phase-a-study rotten_tomatoes uniform softmax-qk-none vanilla-softmaxfeat vanilla-elu vanilla-cos2
"""

import argparse
import json

import torch

from attnbench.attention_capture import AttentionCapture
from attnbench.measurements.common import build_classifier, load_cell_task, model_config, train_cell_model
from attnbench.runtime import seed_everything
from attnbench.suite import load_suite

ROWS = 128  # held-out rows measured


def attention_weights(module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, pad) -> torch.Tensor:
    """(B, H, N, N) weights of query i on key j: the module's output for one-hot values, head_dim keys a pass."""
    b, h, n, d = q.shape
    out = q.new_zeros(b, h, n, n)
    for start in range(0, n, d):
        width = min(d, n - start)
        v = q.new_zeros(b, h, n, d)
        v[:, :, start : start + width, :width] = torch.eye(width)
        out[..., start : start + width] = module(q, k, v, key_padding_mask=pad)[..., :width]
    return out


def self_mass(model: torch.nn.Module, split) -> list[dict[str, float]]:
    """Per layer: a real token's mean weight on itself, and 1 / (real tokens), its share under uniform weights."""
    modules = model.attention_modules()
    capture = AttentionCapture(modules)
    model.eval()
    real = split.attention_mask[:ROWS]
    with torch.no_grad():
        capture.run(model, (split.input_ids[:ROWS], real, None, torch.zeros(1)), torch.device("cpu"))
        capture.remove()
        out = []
        for module, (q, k, pad) in zip(modules, capture.inputs):
            diag = attention_weights(module, q, k, pad).diagonal(dim1=-2, dim2=-1).mean(1)  # (B, N), mean of heads
            share = (1.0 / real.sum(-1, keepdim=True).float()).expand_as(diag)
            out.append({"self": round(float(diag[real].mean()), 4), "uniform": round(float(share[real].mean()), 4)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("task")
    parser.add_argument("labels", nargs="*", help="attention labels (default: every one)")
    parser.add_argument("--train", action="store_true", help="also measure after training with the recipe")
    args = parser.parse_intermixed_args()
    found = {}
    for cell in load_suite(args.suite).cells():
        if cell.seed != 0 or cell.task.label != args.task or (args.labels and cell.attention.label not in args.labels):
            continue
        task = load_cell_task(cell)
        seed_everything(cell.seed)
        model = build_classifier(model_config(cell, task), task, cell.attention.name, cell.attention.options, cell.seed)
        row = {"init": self_mass(model, task["test"])}
        if args.train:
            row["trained"] = self_mass(train_cell_model(cell, task, device="cpu").model, task["test"])
        found[f"{args.suite}/{cell.task.label}/{cell.attention.label}"] = row
        print(cell.attention.label, row, flush=True)
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
