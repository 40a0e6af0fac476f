"""A stored session's time window, and Grafana's ``from``/``to`` rewritten into it.

The Dashboard builds its Grafana URLs with relative ranges (``from=now-1h&to=now``,
``now-5m``, or its time picker's choice). For a session that has ended, "now" is
after its last sample, so the panels would be empty. A page request for such a
session is redirected to the same URL with an absolute range: relative values (and
missing ones) become the session's start and end, absolute ones are clamped into
that window; a range never reaches outside the session. ``refresh`` is dropped (a
dead session does not change). Everything else, ``var-SessionName`` included, is
kept in its order.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

#: Around the session: Prometheus scrapes at intervals, so its first and last samples
#: may sit up to one interval outside the events' first and last moments.
PAD_MS = 30_000


@dataclass(frozen=True)
class Window:
    """[start_ms, end_ms] in Unix milliseconds, padded by :data:`PAD_MS`."""

    start_ms: int
    end_ms: int

    @classmethod
    def padded(cls, start_ms: int, end_ms: int) -> Window:
        start, end = min(start_ms, end_ms), max(start_ms, end_ms)
        return cls(start - PAD_MS, end + PAD_MS)

    def clamp(self, ms: int) -> int:
        return min(max(ms, self.start_ms), self.end_ms)


def _absolute(value: str) -> int | None:
    """Grafana's epoch-milliseconds form, None for anything else (``now-1h``, dates)."""
    text = value.strip()
    return int(text) if text.isdigit() and len(text) <= 15 else None


def rewrite_query(query: str, window: Window) -> str | None:
    """``query`` with its range inside ``window``; None when it already is (and has no
    ``refresh``), so the caller forwards the request unchanged."""
    pairs = parse_qsl(query, keep_blank_values=True)
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    changed = False
    for name, value in pairs:
        if name == "refresh":
            changed = True
            continue
        if name in ("from", "to"):
            if name in seen:  # a repeated from/to: keep the first
                changed = True
                continue
            absolute = _absolute(value)
            fallback = window.start_ms if name == "from" else window.end_ms
            new = fallback if absolute is None else window.clamp(absolute)
            seen[name] = new
            changed = changed or value != str(new)
            out.append((name, str(new)))
            continue
        out.append((name, value))
    for name, bound in (("from", window.start_ms), ("to", window.end_ms)):
        if name not in seen:
            out.append((name, str(bound)))
            seen[name] = bound
            changed = True  # Grafana's default (now-6h) would be as empty as now-1h
    if seen["from"] >= seen["to"]:  # clamping can collapse a range outside the session
        bounds = {"from": str(window.start_ms), "to": str(window.end_ms)}
        out = [(n, bounds.get(n, v)) for n, v in out]
        changed = True
    return urlencode(out) if changed else None


def session_name_of(query: str) -> str | None:
    """The ``var-SessionName`` a Grafana URL carries (the first one), if any."""
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "var-SessionName":
            return value
    return None
