"""The index's own errors, free of the web stack: the index builder and its worker
processes start in a fresh interpreter, and importing Flask there cost ~0.17 s of
every cold build before its first event was read."""

from __future__ import annotations


class SessionLoadError(Exception):
    """A stored session could not be indexed (e.g. no event object was readable)."""
