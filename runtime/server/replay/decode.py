"""Decoding stored event objects (``node_events/``, ``job_events/``) into event dicts.

* ``.gz`` objects are gunzipped; a truncated or corrupt stream yields what could be
  decompressed (its last, partial line is then counted as a bad line), so one bad
  upload does not hide the rest of a file.
* Inflating is bounded (writers are less trusted than the server): a stream is
  inflated a step at a time (``max_length``) and may yield at most
  :func:`inflate_allowance` bytes; past that :class:`InflateLimitError` is raised
  (a decompression bomb), after holding at most the allowance plus one step.
* First non-space byte ``[``: a legacy JSON array; otherwise JSON Lines. Blank lines
  are skipped; malformed lines are skipped and counted. Lines up to 100 MiB.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

import orjson

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 100 * 1024 * 1024
_WHITESPACE = b" \t\r\n"

# What a gzipped event object may inflate to. Ray's events are JSON Lines whose
# every line carries random ids (eventId, taskId, nodeId) and timestamps: they
# compress ~8x (the captured sessions under tests/fixtures/ray-samples: 7.4-8.3x at
# level 9), ~10-20x for the most regular ones; even one event repeated verbatim
# stops near 200x, and deflate's ceiling is ~1032x, which is what a bomb uses. So:
#: at most this many inflated bytes per stored byte (5-10x above real files) ...
GZIP_MAX_RATIO = 100
#: ... but at least this much (a tiny object's header makes its ratio meaningless) ...
GZIP_MIN_ALLOWANCE = 1024 * 1024
#: ... and never more than this per object: the collector rotates its files at
#: 100 MiB (--event-max-file-size-mb) plus one request (--max-request-mb, 32 MiB),
#: so 1 GiB is ~8x the largest object it writes, inflated.
GZIP_MAX_INFLATED = 1024 * 1024 * 1024
#: Inflated bytes per zlib call (``max_length``): the most produced at once.
INFLATE_STEP = 8 * 1024 * 1024


class InflateLimitError(zlib.error):
    """A gzip stream inflates past its allowance (a decompression bomb). A
    ``zlib.error``, so whoever already handles corrupt streams handles it."""


def inflate_allowance(stored: int) -> int:
    """The most a gzip object of ``stored`` bytes may inflate to."""
    return min(GZIP_MAX_INFLATED, max(GZIP_MIN_ALLOWANCE, GZIP_MAX_RATIO * stored))


@dataclass(slots=True)
class DecodeResult:
    """Decoded items (dicts, or anything else a line held) and what went wrong."""

    items: list[object]
    bad_lines: int = 0
    gzip_error: bool = False


def gunzip(data: bytes, limit: int | None = None) -> tuple[bytes, bool]:
    """(decompressed bytes, ok). Concatenated members are all decoded; on a corrupt
    or truncated stream the bytes decoded so far are returned with ``ok=False`` (a
    corrupt member's own bytes are dropped). More than ``limit`` decompressed bytes
    (default :func:`inflate_allowance` of ``len(data)``) raise InflateLimitError."""
    if limit is None:
        limit = inflate_allowance(len(data))
    out: list[bytes] = []
    total = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        member: list[bytes] = []
        pending = rest
        try:
            while True:
                piece = inflater.decompress(pending, INFLATE_STEP)
                total += len(piece)
                if total > limit:
                    raise InflateLimitError(f"inflates past {limit} bytes ({len(data)} stored)")
                member.append(piece)
                pending = inflater.unconsumed_tail
                # A full step may leave output inside zlib even with no input left.
                if inflater.eof or not (pending or len(piece) == INFLATE_STEP):
                    break
            # At eof the rest is in unused_data (flush() would append unconsumed_tail to it again).
            tail = b"" if inflater.eof else inflater.flush()
        except InflateLimitError:
            raise
        except zlib.error:
            return b"".join(out), False
        total += len(tail)
        if total > limit:
            raise InflateLimitError(f"inflates past {limit} bytes ({len(data)} stored)")
        out += member
        out.append(tail)
        if not inflater.eof:
            return b"".join(out), False
        rest = inflater.unused_data.lstrip(b"\0")  # some writers pad members with NULs
    return b"".join(out), True


def decode_events(data: bytes) -> DecodeResult:
    """Decode one event object's (already gunzipped) bytes."""
    body = data.strip(_WHITESPACE)
    if not body:
        return DecodeResult([])
    if body[:1] == b"[":
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            logger.warning("skipping an event file whose JSON array does not parse")
            return DecodeResult([], bad_lines=1)
        if not isinstance(parsed, list):
            return DecodeResult([], bad_lines=1)
        return DecodeResult(parsed)
    # Fast path: JSON Lines become one JSON array, parsed by a single call. Any
    # blank or malformed line breaks the array (or changes the count), and then
    # the lines are parsed one by one.
    expected = body.count(b"\n") + 1
    try:
        items = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        items = None
    if isinstance(items, list) and len(items) == expected:
        return DecodeResult(items)
    return _decode_lines(body)


def _decode_lines(body: bytes) -> DecodeResult:
    result = DecodeResult([])
    append = result.items.append
    for raw in body.split(b"\n"):
        if len(raw) > MAX_LINE_BYTES:
            result.bad_lines += 1
            continue
        line = raw.strip(_WHITESPACE)
        if not line:
            continue
        try:
            append(orjson.loads(line))
        except orjson.JSONDecodeError:
            result.bad_lines += 1
    return result


def decode_object(name: str, data: bytes) -> DecodeResult:
    """Gunzip by the ``.gz`` suffix, then decode. An object inflating past its
    allowance is skipped whole: a gzip error and one bad line."""
    gzip_error = False
    nothing = False
    if name.endswith(".gz"):
        try:
            data, ok = gunzip(data)
        except InflateLimitError as exc:
            logger.warning("event object %s: skipped, its gzip stream %s", name, exc)
            data, ok = b"", True
            gzip_error = nothing = True
        if not ok:
            gzip_error = True
            nothing = not data.strip(_WHITESPACE)
            logger.warning("event object %s: gzip stream is corrupt or truncated; using what decoded", name)
    result = decode_events(data)
    if gzip_error:
        result.gzip_error = True
        if nothing:  # a partial stream already shows up as a bad last line
            result.bad_lines += 1
    return result
