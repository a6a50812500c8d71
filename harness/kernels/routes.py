"""Which rendering of an attention each call took, counted on the module and recorded with every result.

Routes are short names: "native" (the fused CPU kernels without gradients), "native-training" (the fused kernels
with their hand-written backward), "pytorch-chunked" (the block-by-block PyTorch inference path),
"pytorch-factored" / "pytorch" (autograd through PyTorch), "pytorch-causal" (the causal form). A result's
`attention_runtime` lists each layer's counts, so "native_kernels: on" in the provenance (the kernels could run)
is never read as "they ran".
"""

from __future__ import annotations


class RecordsRoutes:
    """Mixin for attention modules: `_took(route)` counts a call's route; `kernel_routes` reads the counts."""

    def _took(self, route: str) -> None:
        routes = self.__dict__.get("_kernel_routes")  # a plain attribute: not a buffer, not in state_dict
        if routes is None:
            routes = self.__dict__["_kernel_routes"] = {}
        routes[route] = routes.get(route, 0) + 1

    @property
    def kernel_routes(self) -> dict[str, int]:
        """Calls per route since the module was built (or the counts were reset)."""
        return dict(self.__dict__.get("_kernel_routes") or {})

    def reset_routes(self) -> None:
        self.__dict__.pop("_kernel_routes", None)
