"""Decoding stored event objects: arrays, JSON Lines, gzip, damage."""

from __future__ import annotations

import gzip

import orjson

from runtime.server.replay.decode import decode_events, decode_object, gunzip

EVENTS = [{"eventId": str(n), "eventType": "NODE_DEFINITION_EVENT"} for n in range(5)]
JSONL = b"\n".join(orjson.dumps(e) for e in EVENTS) + b"\n"


def test_json_lines() -> None:
    result = decode_events(JSONL)
    assert result.items == EVENTS and result.bad_lines == 0


def test_legacy_json_array() -> None:
    assert decode_events(b"  \n" + orjson.dumps(EVENTS)).items == EVENTS


def test_unparsable_array_is_one_bad_record() -> None:
    result = decode_events(b'[{"eventId": "1"}, {')
    assert result.items == [] and result.bad_lines == 1


def test_empty_and_blank() -> None:
    assert decode_events(b"").items == []
    assert decode_events(b" \n\n \r\n").items == []


def test_blank_lines_skipped_malformed_lines_counted() -> None:
    lines = JSONL.split(b"\n")
    damaged = b"\n".join([lines[0], b"", b"   ", b"{not json", lines[1], b'{"eventId": "x"', lines[2], b"\r"])
    result = decode_events(damaged)
    assert result.items == EVENTS[:3]
    assert result.bad_lines == 2


def test_two_broken_lines_are_not_glued_into_one_event() -> None:
    # Joined with a comma these two halves would make one valid object.
    result = decode_events(b'{"eventId": "a"\n"eventType": "X"}\n' + orjson.dumps(EVENTS[0]))
    assert result.items == [EVENTS[0]] and result.bad_lines == 2


def test_crlf_lines() -> None:
    assert decode_events(JSONL.replace(b"\n", b"\r\n")).items == EVENTS


def test_gzip_by_suffix_and_multi_member() -> None:
    body = gzip.compress(JSONL[:100]) + gzip.compress(JSONL[100:])
    assert decode_object("x-2026-11-22-01.jsonl.gz", body).items == EVENTS
    assert decode_object("x-2026-11-22-01.jsonl", JSONL).items == EVENTS


def test_truncated_gzip_keeps_what_decoded() -> None:
    many = [{"eventId": f"{n * 7919:x}", "eventType": "NODE_DEFINITION_EVENT", "n": n} for n in range(2000)]
    plain = b"\n".join(orjson.dumps(e) for e in many) + b"\n"
    body = gzip.compress(plain)
    data, ok = gunzip(body[: len(body) // 2])
    assert not ok and data and plain.startswith(data)
    result = decode_object("x.jsonl.gz", body[: len(body) // 2])
    assert result.gzip_error and result.bad_lines <= 1
    assert 0 < len(result.items) < len(many) and result.items == many[: len(result.items)]


def test_not_gzip_at_all() -> None:
    result = decode_object("x.jsonl.gz", b"plain text, not gzip")
    assert result.gzip_error and result.items == [] and result.bad_lines == 1
