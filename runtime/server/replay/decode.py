"""Decoding stored event objects (``node_events/``, ``job_events/``) into event dicts.

* ``.gz`` objects are gunzipped; a truncated or corrupt stream yields what could be
  decompressed (its last, partial line is then counted as a bad line), so one bad
  upload does not hide the rest of a file.
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


@dataclass(slots=True)
class DecodeResult:
    """Decoded items (dicts, or anything else a line held) and what went wrong."""

    items: list[object]
    bad_lines: int = 0
    gzip_error: bool = False


def gunzip(data: bytes) -> tuple[bytes, bool]:
    """(decompressed bytes, ok). Concatenated members are all decoded; on a corrupt
    or truncated stream the bytes decoded so far are returned with ``ok=False``."""
    out: list[bytes] = []
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        try:
            out.append(inflater.decompress(rest))
            out.append(inflater.flush())
        except zlib.error:
            return b"".join(out), False
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
    """Gunzip by the ``.gz`` suffix, then decode."""
    gzip_error = False
    nothing = False
    if name.endswith(".gz"):
        data, ok = gunzip(data)
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
