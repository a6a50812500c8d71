"""Kernel-<map>: the random-features attention whose omegas are Coulomb particles, moved by phase A only; and its
ceiling `ce-kernel`: the same particles trained jointly with the network by cross-entropy, no phase A."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from attnbench.baselines.coulomb.phase_a import PhaseAConfig
from attnbench.baselines.random_features import (
    FeatureMapKind,
    RandomFeaturesAttention,
    RandomFeaturesConfig,
    positive_features,
)
from attnbench.kernels.short_conv import unfiltered
from attnbench.options import make_options, option, require
from attnbench.registry import register_attention


@dataclasses.dataclass
class ParticleConfig(RandomFeaturesConfig):
    feature_map: FeatureMapKind = option(
        "porf-softplus",
        "feature map f (see docs/paper.md); default porf-softplus: positive, no data-dependent "
        "stabiliser, the paper's best Kernel map on SST-2 (ours)",
    )

    def __post_init__(self) -> None:
        require(
            self.num_features >= 2, f"num_features={self.num_features} must be at least 2 (particles repel in pairs)"
        )
        super().__post_init__()


@dataclasses.dataclass
class CoulombConfig(ParticleConfig):
    phase_a: dict = option(
        {},
        "phase-A options for this attention's cells, over the suite's training.phase_a "
        "(e.g. {beta: .inf} for one row of a study)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        make_options(PhaseAConfig, self.phase_a, what="coulomb phase_a")  # a bad key fails at suite validation


@register_attention(
    "coulomb",
    config=CoulombConfig,
    learning_phase="attnbench.baselines.coulomb.phase_a:run_learning_phase",
    causal=True,
    positive_features=positive_features,
    normalised=unfiltered,
)
class CoulombAttention(RandomFeaturesAttention):
    """Kernel-<map>: random-feature attention whose omegas are Coulomb particles learned in phase A."""

    learned_omegas = True  # the particles: the map's omegas as an nn.Parameter

    def learning_phase_parameters(self) -> list[nn.Parameter]:
        """The particles (H, M, d): moved by phase A only, frozen for phase B."""
        return [self.feature_map.omega]

    def learning_phase_options(self) -> dict[str, Any]:
        """This attention's phase-A options, which the training loop lays over the suite's `training.phase_a`."""
        return dict(self.cfg.phase_a)


@register_attention(
    "ce-kernel",
    config=ParticleConfig,
    causal=True,
    normalised=unfiltered,
    positive_features=positive_features,
)
class CrossEntropyKernelAttention(RandomFeaturesAttention):
    """The ceiling of Kernel-<map>: the same particles (same draw and options) as ordinary parameters, trained
    jointly with the network by cross-entropy in phase B (AdamW, its weight decay included); no phase A."""

    learned_omegas = True  # the particles: the map's omegas as an nn.Parameter
