"""Go-style durations (``300ms``, ``30s``, ``5m``, ``1h30m``), as KubeRay's Go history server's flags take them."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; a bare number means seconds. ValueError otherwise."""
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    try:
        return float(value)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(value) or pos == 0:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    return total
