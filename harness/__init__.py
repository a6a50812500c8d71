"""attnbench: a reproducible benchmark harness for efficient attention."""

__version__ = "0.1.0"


def __getattr__(name: str):  # PEP 562: `attnbench.load_results` without importing pandas and torch on `import attnbench`
    if name == "load_results":
        from attnbench.report.load import load_results

        return load_results
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
