"""Kernel-<map>: the random-features attention whose omegas are Coulomb particles, moved by phase A only; and its
ceiling `ce-kernel`: the same particles trained jointly with the network by cross-entropy, no phase A."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from torch import Tensor, nn

from attnbench.baselines.coulomb.phase_a import PhaseAConfig
from attnbench.baselines.random_features import (
    SCALED,
    FeatureMapKind,
    MapForm,
    RandomFeatureMap,
    RandomFeaturesAttention,
    RandomFeaturesConfig,
    feature_values,
)
from attnbench.baselines.short_conv import unfiltered
from attnbench.options import make_options, option, require
from attnbench.registry import register_attention


class CoulombFeatureMap(RandomFeatureMap):
    """A random-feature map whose omegas (H, M, d) are particles: an nn.Parameter, drawn like the Vanilla twin's."""

    def __init__(
        self,
        head_dim: int,
        num_heads: int,
        num_features: int,
        kind: str = "porf-softplus",
        seed: int = 0,
        *,
        orthogonal: bool = True,
        scaling: str = "chi",
        form: MapForm = SCALED,
        omega_scale: float = 1.0,
        radius: float | None = None,
    ):
        super().__init__(
            head_dim,
            num_heads,
            num_features,
            kind,
            seed,
            orthogonal=orthogonal,
            scaling=scaling,
            form=form,
            omega_scale=omega_scale,
            radius=radius,
        )
        initial = self.omega
        del self.omega  # the Vanilla buffer becomes a parameter with the same values
        self.omega = nn.Parameter(initial.clone())

    def new_feature_map(self) -> None:
        """No-op: particles are learned, never redrawn."""

    def kernel_features(self, x: Tensor, omega: Tensor | None = None) -> Tensor:
        """Features whose Gram matrix over the feature count is the kernel: x (B, H, N, d) -> (B, H, N, k*M).

        Key-style evaluation (favor's stabilising max is one detached factor per batch and head), times
        sqrt(number of features) so that `kernel_target_alignment`'s K = Phi Phi^T / M is the map's kernel.
        """
        phi = feature_values(
            self.kind, x, self.omega if omega is None else omega, is_query=False, form=self.form, phase=self.phase
        )
        return phi * math.sqrt(phi.shape[-1])

    def set_particles(self, omega: Tensor, phase: Tensor | None = None) -> None:
        """Replace the particles (e.g. by D resampled ones): omega (H, D, d), and cos2's phases (H, D) with them."""
        self.omega.data = omega.detach().clone()
        if phase is not None:
            self.phase = phase.detach().clone()
        self.num_features = omega.shape[1] * (2 if self.kind == "trig" else 1)


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
    positive_features=lambda cfg: cfg.feature_map != "trig",
    normalised=unfiltered,
)
class CoulombAttention(RandomFeaturesAttention):
    """Kernel-<map>: random-feature attention whose omegas are Coulomb particles learned in phase A."""

    feature_map_class = CoulombFeatureMap

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
    positive_features=lambda cfg: cfg.feature_map != "trig",
)
class CrossEntropyKernelAttention(RandomFeaturesAttention):
    """The ceiling of Kernel-<map>: the same particles (same draw and options) as ordinary parameters, trained
    jointly with the network by cross-entropy in phase B (AdamW, its weight decay included); no phase A."""

    feature_map_class = CoulombFeatureMap
