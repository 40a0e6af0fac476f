"""Fast RFC 3339 timestamps (Ray's protobuf Timestamps) to Unix nanoseconds.

Every task has five or more state transitions, so this is called millions of times
per large session: the common shape ``YYYY-MM-DDTHH:MM:SS.fffffffffZ`` costs one
dict lookup (seconds cached per distinct second) and one ``int()``; anything else
goes through the strict parser of the collector.
"""

from __future__ import annotations

from typing import Final

from runtime.common.timestamps import parse_timestamp_ns

#: "YYYY-MM-DDTHH:MM:SS" -> that second in ns; hot loops may read it directly.
SECOND_NS: dict[str, int] = {}
_SECONDS_LIMIT = 1 << 16
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Compiled (mypyc), an int of up to 63 bits is held unboxed: comparing one with these
#: costs a few instructions, with INT64_MIN/MAX (boxed) a generic big-int comparison.
_SHORT_MIN: Final = -(1 << 62)
_SHORT_MAX: Final = (1 << 62) - 1
NANOS_LEN = 30  # "2026-11-22T01:45:31.197192869Z"


def ts_ns(text: object) -> int | None:
    """Nanoseconds since the epoch, or None when ``text`` is not a timestamp."""
    if type(text) is not str:
        return None
    if len(text) == NANOS_LEN and text[19] == "." and text[29] == "Z":
        frac = text[20:29]
        if frac.isdigit() and frac.isascii():
            head = text[:19]
            base = SECOND_NS.get(head)
            if base is None:
                try:
                    base = parse_timestamp_ns(head + "Z")
                except ValueError:
                    return None
                if len(SECOND_NS) >= _SECONDS_LIMIT:
                    SECOND_NS.clear()
                SECOND_NS[head] = base
            return base + int(frac)
    try:
        return parse_timestamp_ns(text)
    except ValueError:
        return None


def in_int64(value: int) -> bool:
    """Whether ``value`` fits int64 (ns since the epoch always do, until 2262)."""
    return _SHORT_MIN <= value <= _SHORT_MAX or INT64_MIN <= value <= INT64_MAX


def to_int(value: object) -> int:
    """Ray's int64 fields arrive as JSON strings; int32 as numbers. 0 when unusable,
    which includes a value beyond int64 (nothing downstream can store or encode it)."""
    if type(value) is int:
        return value if in_int64(value) else 0
    if value is None or value == "":
        return 0
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        try:
            number = int(float(value))  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return 0
    return number if in_int64(number) else 0
