"""The base of every random-feature map: phi(x) built from u = omega^T (alpha x) with fixed, seeded random omegas.
The maps themselves, one class each, are in `attnbench.baselines.feature_maps`.

Two forms (`MapForm`). The paper's (docs/paper.md "The feature maps", the default of `random-features` and
`coulomb`), with temperature tau, floor and Z(x) the per-token l1 normaliser making sum_i phi_i(x) = sqrt(M)
(queries and keys alike; a key's normaliser reweights that key), and the scaled form (`form: scaled`, and
Performer's convention): x scaled by d^{-1/4} for every map, features f(u) / sqrt(M) without renormalisation,
no temperature, floor or phases, orthogonal omegas. Each map's class gives its f in both forms.

**Our readings**: the floor clamps elu before Z (so the sum stays sqrt(M)); Z itself is guarded below by the
floor; tau acts only where the paper writes it (`tempered` maps); the omegas of every map but porf-softplus
are i.i.d. Gaussian in the paper form (porf-softplus differs from softplus only by its orthogonal omegas).
In the scaled form every map's scale M^{-1/2} makes phi(x)^T phi(x') = (1/M) sum_k f(omega_k^T x) f(omega_k^T x')
the kernel estimate itself.

Parameters made for one head (`num_heads` 1) serve every head of a call (`per_head`). The initial omegas: drawn
as above, times `omega_scale`, then, with a `radius`, every row longer than it scaled back onto the sphere of that
radius (`project_to_ball`). Learned omegas (the Coulomb model's particles) are an nn.Parameter, never redrawn.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnbench.baselines.random_projections import (
    RowNorms,
    draw_omegas,
    draw_phases,
    per_head,
    project,
    project_to_ball,
    projection_weights,
)
from attnbench.kernels import native
from attnbench.kernels.linear.contract import FeatureChunk, FeatureMap
from attnbench.kernels.native import NativeSpec


@dataclasses.dataclass(frozen=True)
class MapForm:
    """Which form a map computes (module docstring): the paper's, with its tau, floor and elu bias, or the scaled one."""

    paper: bool = True
    temperature: float = 1.0
    floor: float = 1e-6
    elu_bias: float = 0.0


SCALED = MapForm(paper=False)


@dataclasses.dataclass(frozen=True)
class NativeForm:
    """A map's fused form, declared on its class: the fused kernels' feature kind (`native.KIND_TABLE`) in the paper
    and in the scaled form, None where that form runs in PyTorch. `RandomFeatureMap.native_spec` reads it for the
    route chooser, with the map's own constants: a kind the kernels renormalise (`native.PAPER_KINDS`) takes the
    map's floor, `bias` and `phase`; any other its scale M^{-1/2}, `offset` and `norm_coef`."""

    paper: str | None = None
    scaled: str | None = None


class RandomFeatureMap(FeatureMap):
    """phi(x) built from omega^T (alpha x) in a `MapForm`, omegas (H, M, d) held as a fixed buffer `omega` (or, with
    `learned`, a parameter); cos2 in the paper form also holds its phases `phase` (H, M) (None otherwise). H = 1
    serves any head count.

    A map subclasses this with its name and traits as class attributes and one method: `features_of(u)`, f of the
    projections u (B, H, C, M), which the base renormalises (paper form) or scales by M^{-1/2} (scaled form); or
    `chunk`, for a map that needs x itself or scales its own features. `native` (optional) declares its fused form.
    """

    kind: ClassVar[str]  # the `feature_map` option's value
    elementwise_ops: ClassVar[int]  # FLOPs per projected value (`flops`)
    tempered: ClassVar[bool] = False  # the paper divides u by the temperature tau
    paper_form: ClassVar[bool] = True  # False: one form, the scaled one, whatever `form` asks
    always_orthogonal: ClassVar[bool] = False  # orthogonal omegas with chi norms, whatever `orthogonal` asks
    random_phases: ClassVar[bool] = False  # fixed random phases b ~ U[0, 2 pi) per head and feature (paper form)
    features_per_omega: ClassVar[int] = 1
    positive: ClassVar[bool] = True  # every feature >= 0, so the normaliser cannot change sign
    paper_eps: ClassVar[float] = 1e-6  # the normaliser guard the paper form defaults to
    native: ClassVar[NativeForm | None] = None
    offset: float = 0.0  # phi's constant offset in the scaled form (favor's eps)
    bias: float = 0.0  # added to u in the paper form (elu's bias)

    def __init__(
        self,
        head_dim: int,
        num_heads: int,
        num_features: int,
        seed: int = 0,
        *,
        orthogonal: bool = True,
        scaling: RowNorms = "chi",
        form: MapForm = SCALED,
        omega_scale: float = 1.0,
        radius: float | None = None,
        learned: bool = False,
    ):
        super().__init__()
        self.seed = seed
        self.form = form if self.paper_form else SCALED
        self.orthogonal = orthogonal or self.always_orthogonal
        self.scaling = "chi" if self.always_orthogonal else scaling
        self.omega_scale, self.radius = omega_scale, radius
        self.num_features = self.features_per_omega * num_features
        omega = self._draw(num_heads, num_features, head_dim, 0)
        if learned:
            self.omega = nn.Parameter(omega)
        else:
            self.register_buffer("omega", omega)
        phases = self.form.paper and self.random_phases
        self.register_buffer("phase", draw_phases(num_heads, num_features, seed) if phases else None)
        self.register_buffer("draw", torch.zeros((), dtype=torch.long))  # redraws so far; omegas of draw k are seeded

    def features_of(self, u: Tensor) -> Tensor:
        """f(u) of projections u (B, H, C, M) -> (B, H, C, M), before the form's renormalisation or scale; in place
        of u where the map allows and no gradient is recorded."""
        raise NotImplementedError(f"{type(self).__name__} implements neither features_of(u) nor chunk(x, weights)")

    def chunk(
        self,
        x: Tensor,
        weights: Tensor,
        *,
        is_query: bool,
        key_padding_mask: Tensor | None = None,
        out: Tensor | None = None,
    ) -> FeatureChunk:
        """Features of x (B, H, C, d) in factored form, projected by `weights` (B*H, d, M) (`projection_weights`):
        the paper form's f(u) with row weights sqrt(M) / max(sum f, floor), or the scaled form's f(u) / sqrt(M).
        `key_padding_mask` (B, C), True = real, for keys; `out` (B, H, C, M): scratch u may be written into."""
        values = self.features_of(project(x, weights, out))
        m = weights.shape[-1]
        if self.form.paper:
            normaliser = values.sum(dim=-1, keepdim=True).clamp_min(self.form.floor)
            return FeatureChunk(values, row_weights=math.sqrt(m) / normaliser)
        return FeatureChunk(values, m**-0.5)

    def new_feature_map(self) -> None:
        """Replace the omegas (and cos2's phases) by the next seeded draw (seed, head, draw + 1); learned omegas are
        never redrawn."""
        if isinstance(self.omega, nn.Parameter):
            return
        self.draw += 1
        h, m, d = self.omega.shape
        self.omega.copy_(self._draw(h, m, d, int(self.draw)))
        if self.phase is not None:
            self.phase.copy_(draw_phases(h, m, self.seed, int(self.draw)))

    def _draw(self, heads: int, num_features: int, dim: int, draw: int) -> Tensor:
        """The omegas of draw `draw` (H, M, d): seeded, times omega_scale, projected onto the radius (if any)."""
        omega = (
            draw_omegas(
                heads, num_features, dim, self.seed, orthogonal=self.orthogonal, scaling=self.scaling, draw=draw
            )
            * self.omega_scale
        )
        return omega if self.radius is None else project_to_ball(omega, self.radius)

    def input_scale(self, dim: int) -> float:
        """alpha in u = omega^T (alpha x): 1 / tau for the tempered paper maps, 1 for the others, d^{-1/4} scaled."""
        if not self.form.paper:
            return dim**-0.25
        return 1.0 / self.form.temperature if self.tempered else 1.0

    def norm_coef(self, dim: int) -> float:
        """The coefficient of |x|^2 in the key row weights of the fused form (favor's); 0 for the others."""
        return 0.0

    def _weights(self, x: Tensor) -> Tensor:
        """alpha omega^T laid out for x's batch and heads (`projection_weights`), kept while the omegas are unchanged."""
        (batch, heads, _, d), alpha = x.shape, self.input_scale(x.shape[-1])
        return self.derived(
            "weights",
            lambda: projection_weights(self.omega, batch, alpha, x.dtype, heads),
            self.omega,
            key=(batch, heads, d, x.dtype),
        )

    def native_spec(self, x: Tensor) -> NativeSpec | None:
        """The fused kernels' description of these features of x (B, H, N, d), from the class's `native` for this
        form (omega^T alpha as (H or 1, d, M) and the map's constants); None (the PyTorch path) where it has none."""
        per_head(self.omega, x.shape[1])  # one error for a head count the omegas cannot serve, on every path
        kind = None if self.native is None else (self.native.paper if self.form.paper else self.native.scaled)
        if kind is None:
            return None
        d, m = x.shape[-1], self.omega.shape[-2]
        alpha = self.input_scale(d)
        weights = self.derived(
            "native",
            lambda: projection_weights(self.omega, 1, alpha, x.dtype).contiguous(),
            self.omega,
            key=(d, x.dtype),
        )
        if kind in native.PAPER_KINDS:  # keys reweighted by sqrt(M) / max(sum f, floor) in the kernel; queries keep f
            phase = None if self.phase is None else self.phase.to(weights.dtype).contiguous()
            return NativeSpec(kind, weights, floor=self.form.floor, bias=self.bias, phase=phase)
        return NativeSpec(kind, weights, m**-0.5, self.offset, self.norm_coef(d))

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        return self.chunk(x, self._weights(x), is_query=True, out=out)

    def key_chunk(self, x: Tensor, key_padding_mask: Tensor | None = None, out: Tensor | None = None) -> FeatureChunk:
        return self.chunk(x, self._weights(x), is_query=False, key_padding_mask=key_padding_mask, out=out)

    def features(
        self, x: Tensor, *, is_query: bool, key_padding_mask: Tensor | None = None, omega: Tensor | None = None
    ) -> Tensor:
        """Features of a whole sequence x (B, H, N, d) -> (B, H, N, M) (2M for trig), for the map's omegas or
        `omega` (H or 1, M, d); differentiable in x and omega. Only favor depends on is_query / key_padding_mask:
        its stabilising max is per position for queries and over features and real positions for keys (a constant
        factor per row or per (batch, head), cancelled by the attention's normaliser)."""
        omega = self.omega if omega is None else omega
        weights = projection_weights(omega, x.shape[0], self.input_scale(x.shape[-1]), x.dtype, x.shape[1])
        return self.chunk(x, weights, is_query=is_query, key_padding_mask=key_padding_mask).materialise()

    def kernel_features(self, x: Tensor, omega: Tensor | None = None) -> Tensor:
        """Features whose Gram matrix over the feature count is the kernel: x (B, H, N, d) -> (B, H, N, k*M).

        Key-style evaluation (favor's stabilising max is one detached factor per batch and head), times
        sqrt(number of features) so that `kernel_target_alignment`'s K = Phi Phi^T / M is the map's kernel.
        """
        phi = self.features(x, is_query=False, omega=omega)
        return phi * math.sqrt(phi.shape[-1])

    def replace_omegas(self, omega: Tensor, phase: Tensor | None = None) -> None:
        """Replace the omegas (e.g. by D resampled particles): omega (H, D, d), and cos2's phases (H, D) with them."""
        self.omega.data = omega.detach().clone()
        if phase is not None:
            self.phase = phase.detach().clone()
        self.num_features = omega.shape[1] * self.features_per_omega

    @classmethod
    def flops(cls, n: int, d: int, m: int) -> float:
        """FLOPs of the features of n queries and n keys (one batch and head) with m omegas: the projection
        (2 n m d) and the map's elementwise operations (`elementwise_ops` per projected value)."""
        return 2 * (2.0 * n * m * d + cls.elementwise_ops * n * m)

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys, and bytes of the omegas."""
        h, m, _ = self.omega.shape
        return {"flops": self.flops(n, d, m), "bytes": 4.0 * h * m * d}

    def paper_settings(self) -> str:
        """The paper form's settings as recorded with results (', tau 1.0, floor 1e-06')."""
        return f", tau {self.form.temperature}, floor {self.form.floor}"

    @property
    def description(self) -> str:
        """The form this map computes, recorded with results (e.g. 'paper softplus, tau 1.0, floor 1e-06')."""
        scale = f", omegas x{self.omega_scale:g}" if self.omega_scale != 1.0 else ""
        projected = f", omegas projected to radius {self.radius:g}" if self.radius is not None else ""
        if not self.form.paper:
            return f"scaled {self.kind}{scale}{projected}"
        return f"paper {self.kind}{self.paper_settings()}{scale}{projected}"
