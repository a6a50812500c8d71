"""Attention families, one module or package each, found by the registry walking this package
(`attnbench.registry.discover`): a new family is a new file here, listed nowhere. A family package registers its
attention in its __init__ or its `attention` module, and may hold a `measurement` and a `report` module (its
measurements and report sections, found the same way)."""

ON_DEMAND = ("peers",)  # reached only as 'attnbench.baselines.peers:Class' strings: the optional extra 'peers'
