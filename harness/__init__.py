"""attnbench: a reproducible benchmark harness for efficient attention."""

__version__ = "0.1.0"
