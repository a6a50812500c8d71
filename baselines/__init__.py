"""Attention families, one file each; importing this package registers them all."""

from attnbench.baselines import (
    based,  # noqa: F401
    coulomb,  # noqa: F401  (a package: the paper as a plugin)
    deltanet,  # noqa: F401
    elu_linear,  # noqa: F401
    fox,  # noqa: F401
    gated_deltanet,  # noqa: F401
    gla,  # noqa: F401
    hedgehog,  # noqa: F401
    kernelized_rpe,  # noqa: F401
    linformer,  # noqa: F401
    log_linear,  # noqa: F401
    mamba2,  # noqa: F401
    nystromformer,  # noqa: F401
    performer,  # noqa: F401
    random_features,  # noqa: F401
    retention,  # noqa: F401
    rfa,  # noqa: F401
    rwkv7,  # noqa: F401
    skyformer,  # noqa: F401
    sliding_window,  # noqa: F401
    softmax,  # noqa: F401
    uniform,  # noqa: F401
)
