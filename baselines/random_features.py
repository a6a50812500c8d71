"""`random-features`, the paper's "Vanilla" kernels: linear attention over a random-feature map with fixed, seeded
omegas, the map chosen by the `feature_map` option (`attnbench.baselines.feature_maps`) in the paper's form or the
scaled one (`attnbench.baselines.random_feature_map`).

The initial omegas (a control for the Coulomb model's phase A, `attnbench.baselines.coulomb`): drawn as the form
says, times `omega_scale` (so N(0, s^2 I) rows), then, with `projection_radius`, every row longer than the radius
scaled back onto the sphere of that radius (`project_to_ball`), exactly as phase A's first projected Langevin step
does with no force and no noise: `random-features` with the radius of a suite's phase A is the "projected Vanilla"
twin, whose difference from Kernel-<map> is what learning adds, not the shorter omegas.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from attnbench.baselines.feature_maps import FEATURE_MAPS, feature_map_class
from attnbench.baselines.random_feature_map import SCALED, MapForm
from attnbench.baselines.random_projections import RowNorms
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.options import option, require
from attnbench.registry import register_attention

FeatureMapKind = Literal[tuple(FEATURE_MAPS)]  # the registered maps, in their file's order
FormName = Literal["paper", "scaled"]


@dataclasses.dataclass
class RandomFeaturesConfig(ShortConvConfig):
    feature_map: FeatureMapKind = option("favor", "feature map applied to u = omega^T x (see docs/paper.md)")
    form: FormName = option(
        "paper",
        "paper: the maps of docs/paper.md (temperature, floor, l1 renormalisation to sqrt(M) of queries and "
        "keys except favor and softmaxfeat, cos2 phases, favor exp(u - |x|^2/2) / sqrt(M)); scaled: the earlier "
        "forms (x scaled by d^-1/4, f(u) / sqrt(M), favor + eps 1e-6, cos2 without phases, orthogonal omegas)",
    )
    temperature: float = option(1.0, "paper form: tau dividing u in elu, softplus, sigmoid2, softmaxfeat (ours: 1)")
    floor: float = option(1e-6, "paper form: floor of elu and softplus, and guard of the normaliser Z (ours: 1e-6)")
    elu_bias: float = option(0.0, "paper form: the bias b in elu(u / tau + b), the same for every feature")
    num_features: int = option(256, "number of random frequencies M per head (trig gives 2M features)", maximum=65536)
    orthogonal: bool | None = option(
        None,
        "orthogonal Gaussian blocks (True) or i.i.d. Gaussian omegas (False); None: the form's own "
        "(paper: i.i.d. except porf-softplus; scaled: orthogonal)",
    )
    row_norms: RowNorms = option("chi", "row norms of orthogonal blocks: chi (Gaussian-like) or sqrt-d")
    eps: float | None = option(
        None,
        "guard keeping the linear-attention normaliser away from zero; None: 1e-6, or 1e-30 for the paper's "
        "favor, whose features carry an arbitrary stabilising scale that a guard of 1e-6 would swamp",
    )
    omega_scale: float = option(1.0, "initial omegas times this scale (N(0, s^2 I) rows; 1: the paper's N(0, I))")
    projection_radius: float | None = option(
        None,
        "control: after the draw, project every omega longer than this radius back onto its sphere, as phase "
        "A's first step does with no force and no noise (the projected Vanilla twin); None: no projection",
    )
    projection_units: Literal["sqrt_dim", "absolute"] = option(
        "sqrt_dim", "units of projection_radius, as phase A's radius_units: sqrt(head_dim) or absolute"
    )

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.eps is None or self.eps > 0, f"eps={self.eps} must be positive")
        require(self.temperature > 0, f"temperature={self.temperature} must be positive")
        require(self.floor > 0, f"floor={self.floor} must be positive")
        require(self.omega_scale > 0, f"omega_scale={self.omega_scale} must be positive")
        require(
            self.projection_radius is None or self.projection_radius > 0,
            f"projection_radius={self.projection_radius} must be positive (None: no projection)",
        )
        require(
            self.orthogonal is not False or not feature_map_class(self.feature_map).always_orthogonal,
            f"feature_map={self.feature_map!r} always uses orthogonal omegas; drop orthogonal=False",
        )

    def map_form(self) -> MapForm:
        """The `MapForm` these options ask for."""
        if self.form == "scaled":
            return SCALED
        return MapForm(True, self.temperature, self.floor, self.elu_bias)

    def initial_radius(self) -> float | None:
        """The radius the initial omegas are projected onto, in absolute units (None: no projection)."""
        if self.projection_radius is None:
            return None
        return self.projection_radius * (math.sqrt(self.head_dim) if self.projection_units == "sqrt_dim" else 1.0)

    def guard(self) -> float:
        """The normaliser guard: `eps`, else the form's default."""
        if self.eps is not None:
            return self.eps
        return feature_map_class(self.feature_map).paper_eps if self.form == "paper" else 1e-6

    def orthogonal_omegas(self) -> bool:
        """Whether the omegas are drawn in orthogonal blocks (`orthogonal`, else the form's default)."""
        if self.orthogonal is not None:
            return self.orthogonal
        return self.form == "scaled" or feature_map_class(self.feature_map).always_orthogonal


def positive_features(cfg: RandomFeaturesConfig) -> bool:
    """Whether the chosen map's features are positive (every map but trig), a capability flag."""
    return feature_map_class(cfg.feature_map).positive


@register_attention(
    "random-features",
    config=RandomFeaturesConfig,
    causal=True,
    normalised=unfiltered,
    positive_features=positive_features,
)
class RandomFeaturesAttention(LinearKernelAttention):
    """Vanilla random-feature attention: fixed random omegas, a choice of feature map (trig is not positive)."""

    learned_omegas: bool = False  # the Coulomb model's particles: omegas as parameters

    def __init__(self, cfg: RandomFeaturesConfig):
        super().__init__(
            feature_map_class(cfg.feature_map)(
                cfg.head_dim,
                cfg.num_heads,
                cfg.num_features,
                cfg.seed,
                orthogonal=cfg.orthogonal_omegas(),
                scaling=cfg.row_norms,
                form=cfg.map_form(),
                omega_scale=cfg.omega_scale,
                radius=cfg.initial_radius(),
                learned=self.learned_omegas,
            ),
            eps=cfg.guard(),
            causal=cfg.causal,
            short_conv=short_conv_for(cfg),
        )
        self.cfg = cfg

    @property
    def feature_form(self) -> str:
        """The form this attention's map computes, recorded with results (e.g. 'paper softplus, tau 1.0, floor 1e-06')."""
        return self.feature_map.description
