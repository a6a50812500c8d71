"""Attention families, one file each; importing this package registers them all."""

from baselines import softmax  # noqa: F401
