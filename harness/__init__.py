"""attnbench: a reproducible benchmark harness for efficient attention. The public surface is `attnbench.api`;
its names are read here too (`attnbench.load_results`, `attnbench.register_attention`, ...)."""

__version__ = "0.1.0"


def __getattr__(name: str):  # PEP 562: the public names on first use, so `import attnbench` imports no torch
    import attnbench.api as api

    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
