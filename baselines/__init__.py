"""Attention families, one file each; importing this package registers them all."""

from baselines import softmax  # noqa: F401
from baselines import random_features  # noqa: F401
from baselines import performer  # noqa: F401
from baselines import rfa  # noqa: F401
from baselines import elu_linear  # noqa: F401
from baselines import coulomb  # noqa: F401
from baselines import nystromformer  # noqa: F401
from baselines import linformer  # noqa: F401
