"""``ray-history``: the history server's data from a shell (issue #6)."""
