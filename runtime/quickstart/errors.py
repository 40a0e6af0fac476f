"""The one error type the quickstart reports to the user (exit 1)."""

from __future__ import annotations


class QuickstartError(RuntimeError):
    """A step failed; the message says which and shows the relevant log tail."""
