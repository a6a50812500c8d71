"""Attention-free reference models on text tasks: the majority class and TF-IDF + logistic regression.

They run as ordinary accuracy cells (attention name "reference", label = the reference's name) by
the same executor, on the same splits and rows as the Transformer cells of the task, and their
results are read by the same tables, marked as references. A suite asks for them with
`references: [majority, tfidf-logreg]` (or {name, options} mappings); see `reference_attention`.

- majority: predicts the most frequent training class, with the training class frequencies as
  its probabilities (the best constant predictor of NLL as well).
- tfidf-logreg: scikit-learn TfidfVectorizer over word n-grams and character n-grams (within word
  boundaries), sublinear tf, stacked; LogisticRegression (L2, lbfgs) with C chosen on validation
  accuracy from `c_grid` (ties: the smaller C), fitted on the training split only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError
from attnbench.measurements import SkipCell
from attnbench.measurements.common import load_cell_task, train_config
from attnbench.metrics import classification_metrics, reliability_bins
from attnbench.names import REFERENCE
from attnbench.options import make_options, option, require
from attnbench.predictions import encode_predictions
from attnbench.tasks.base import TaskData

__all__ = ["REFERENCE", "REFERENCES", "measure_reference", "reference_attention", "reference_names"]


@dataclasses.dataclass
class MajorityConfig:
    """The majority-class reference has no options."""


@dataclasses.dataclass
class TfidfConfig:
    """Options of the TF-IDF + logistic regression reference."""

    word_ngrams: list[int] = option([1, 2], "word n-gram range [low, high]")
    char_ngrams: list[int] = option([2, 5], "character n-gram range [low, high] (within word boundaries)")
    min_df: int = option(1, "ignore n-grams in fewer training documents than this")
    c_grid: list[float] = option(
        [0.01, 0.1, 1.0, 10.0, 100.0], "inverse regularisation strengths tried; the best on validation accuracy is kept"
    )
    max_iter: int = option(2000, "lbfgs iterations per fit")

    def __post_init__(self) -> None:
        for name in ("word_ngrams", "char_ngrams"):
            low_high = getattr(self, name)
            require(
                len(low_high) == 2 and 1 <= low_high[0] <= low_high[1],
                f"{name}={low_high} must be [low, high] with 1 <= low <= high",
            )
        require(bool(self.c_grid) and all(c > 0 for c in self.c_grid), f"c_grid={self.c_grid} must be positive values")
        require(self.min_df >= 1 and self.max_iter >= 1, "min_df and max_iter must be at least 1")


Fitted = dict[str, Any]  # {"probs": {split: (N, C)}, "details": {...}, "parameters": int}


def fit_majority(
    texts: dict[str, list[str]], labels: dict[str, np.ndarray], num_classes: int, config: MajorityConfig, seed: int
) -> Fitted:
    """Every row gets the training class frequencies as probabilities."""
    prior = np.bincount(labels["train"], minlength=num_classes) / len(labels["train"])
    probs = {split: np.tile(prior, (len(y), 1)) for split, y in labels.items()}
    return {"probs": probs, "details": {"class_prior": prior.tolist()}, "parameters": num_classes}


def fit_tfidf_logreg(
    texts: dict[str, list[str]], labels: dict[str, np.ndarray], num_classes: int, config: TfidfConfig, seed: int
) -> Fitted:
    """Word + character TF-IDF features, logistic regression with C chosen on validation accuracy."""
    try:
        from scipy.sparse import hstack
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise UserError("the tfidf-logreg reference needs scikit-learn: pip install scikit-learn") from None
    vectorizers = [
        TfidfVectorizer(
            analyzer="word",
            ngram_range=tuple(config.word_ngrams),
            min_df=config.min_df,
            sublinear_tf=True,
            lowercase=True,
        ),
        TfidfVectorizer(
            analyzer="char_wb",
            ngram_range=tuple(config.char_ngrams),
            min_df=config.min_df,
            sublinear_tf=True,
            lowercase=True,
        ),
    ]
    train = hstack([v.fit_transform(texts["train"]) for v in vectorizers]).tocsr()
    features = {
        s: train if s == "train" else hstack([v.transform(t) for v in vectorizers]).tocsr() for s, t in texts.items()
    }
    scores, best = {}, None
    for c in sorted(config.c_grid):
        model = LogisticRegression(C=c, max_iter=config.max_iter, random_state=seed).fit(train, labels["train"])
        scores[c] = float(np.mean(model.predict(features["validation"]) == labels["validation"]))
        if best is None or scores[c] > scores[best[0]]:
            best = (c, model)
    c, model = best
    probs = {s: _all_classes(model.predict_proba(x), model.classes_, num_classes) for s, x in features.items()}
    return {
        "probs": probs,
        "parameters": int(model.coef_.size + model.intercept_.size),
        "details": {
            "chosen_c": c,
            "validation_accuracy_by_c": {str(k): v for k, v in scores.items()},
            "features": int(train.shape[1]),
        },
    }


def _all_classes(probs: np.ndarray, classes: np.ndarray, num_classes: int) -> np.ndarray:
    """(N, num_classes) probabilities, zero for classes absent from the training labels."""
    out = np.zeros((probs.shape[0], num_classes))
    out[:, classes] = probs
    return out


REFERENCES: dict[str, tuple[type, Callable[..., Fitted]]] = {
    "majority": (MajorityConfig, fit_majority),
    "tfidf-logreg": (TfidfConfig, fit_tfidf_logreg),
}


def reference_names() -> list[str]:
    """The reference models a suite may name."""
    return sorted(REFERENCES)


def reference_attention(name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The attention entry of a reference cell: {"name": "reference", "label": name, "options": {...}}."""
    if name not in REFERENCES:
        raise UserError(f"unknown reference {name!r}; valid references: {', '.join(reference_names())}")
    config_cls = REFERENCES[name][0]
    make_options(config_cls, options or {}, what=f"reference {name!r}")
    return {"name": REFERENCE, "label": name, "options": {"reference": name, **(options or {})}}


def measure_reference(cell: CellSpec, n_bins: int, eval_split: str) -> dict[str, Any]:
    """Fit the cell's reference on the task's training split; the accuracy measurement's metrics and details."""
    options = dict(cell.attention.options)
    name = options.pop("reference")
    config_cls, fit = REFERENCES[name]
    config = make_options(config_cls, options, what=f"reference {name!r}")
    task = load_cell_task(cell)
    texts, labels = reference_data(task, train_config(cell).max_train_examples)
    start = time.perf_counter()
    fitted = fit(texts, labels, task.num_classes, config, int(cell.seed))
    seconds = time.perf_counter() - start
    probs, y = fitted["probs"][eval_split], labels[eval_split]
    metrics = classification_metrics(probs, y, n_bins) | {
        "train_seconds": seconds,
        "params_total": float(fitted["parameters"]),
        "params_attention": 0.0,
    }
    details = {
        "reference": name,
        "config": dataclasses.asdict(config),
        "eval_split": eval_split,
        "eval_rows": len(y),
        "reliability": reliability_bins(probs, y, n_bins),
        "validation": classification_metrics(fitted["probs"]["validation"], labels["validation"], n_bins),
        "predictions": encode_predictions(probs, y),
        **fitted["details"],
    }
    return {"metrics": metrics, "details": details}


def reference_data(
    task: TaskData, max_train_examples: int | None
) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """Texts and labels per split, the training split cut to the rows the Transformer cells train on."""
    if task.texts is None:
        raise SkipCell(f"task {task.name!r} has no raw texts; the references run on text tasks only")
    texts = dict(task.texts)
    labels = {s: task[s].labels.numpy().astype(np.int64) for s in task.splits}
    if max_train_examples is not None:
        texts["train"], labels["train"] = texts["train"][:max_train_examples], labels["train"][:max_train_examples]
    return texts, labels
