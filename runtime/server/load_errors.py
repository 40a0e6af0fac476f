"""The error of a session that cannot be indexed, free of the web stack: the index
builder and its worker processes start in a fresh interpreter, and importing Flask
there cost ~0.17 s of every cold build before its first event was read. Beside
``runtime.server.errors`` rather than in ``runtime.server.index``: the routes' error
vocabulary maps it to a 503, and the index uses that vocabulary."""

from __future__ import annotations


class SessionLoadError(Exception):
    """A stored session could not be indexed (e.g. no event object was readable)."""
