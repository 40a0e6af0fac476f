"""What every binary shares (collector, history server, ``ray-history``, quickstart).

The bottom layer: it imports nothing else from ``runtime`` (see the import-linter
contracts in ``pyproject.toml``), so a binary never borrows from another one.
"""
