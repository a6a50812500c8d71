"""Attention families, one file each; importing this package registers them all."""

from attnbench.baselines import softmax  # noqa: F401
from attnbench.baselines import random_features  # noqa: F401
from attnbench.baselines import performer  # noqa: F401
from attnbench.baselines import rfa  # noqa: F401
from attnbench.baselines import elu_linear  # noqa: F401
from attnbench.baselines import coulomb  # noqa: F401  (a package: the paper as a plugin)
from attnbench.baselines import nystromformer  # noqa: F401
from attnbench.baselines import linformer  # noqa: F401
from attnbench.baselines import retention  # noqa: F401
from attnbench.baselines import gla  # noqa: F401
from attnbench.baselines import deltanet  # noqa: F401
from attnbench.baselines import based  # noqa: F401
from attnbench.baselines import hedgehog  # noqa: F401
from attnbench.baselines import uniform  # noqa: F401
