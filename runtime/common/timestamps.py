"""RFC 3339 timestamps (what Ray writes in its events) to Unix nanoseconds: the
collector validates events with it, the history server's replay reads them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,32}))?(Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)


def parse_timestamp_ns(text: str) -> int:
    """RFC 3339 with 0-9 (more are truncated, as Go does) fractional digits and
    ``Z`` or an offset, to nanoseconds since the epoch. ValueError otherwise.

    ``datetime.fromisoformat`` cannot read Ray's nanosecond timestamps."""
    match = _RFC3339.fullmatch(text)
    if not match:
        raise ValueError(f"timestamp {text[:64]!r} is not RFC 3339 (YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm))")
    year, month, day, hour, minute, second, frac, zone = match.groups()
    base = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    seconds = int(base.timestamp())
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        offset_h, offset_m = int(zone[1:3]), int(zone[4:6])
        if offset_h > 23 or offset_m > 59:
            raise ValueError(f"timestamp {text[:64]!r} has an invalid UTC offset")
        seconds -= sign * (offset_h * 3600 + offset_m * 60)
    nanos = int((frac or "0")[:9].ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos
