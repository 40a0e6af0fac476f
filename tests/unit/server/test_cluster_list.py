"""The history list's parameters and cursor (runtime/server/cluster_list.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.server.cluster_list import (
    ListParamError,
    decode_cursor,
    encode_cursor,
    owner_matches,
    parse_limit,
    parse_query,
    parse_time,
)
from runtime.server.sessions import StoredSession, StoredSessions
from runtime.storage.layout import ClusterRef

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", datetime(2026, 11, 18, 12, 0, tzinfo=UTC)),
        ("12h", datetime(2026, 11, 25, 0, 0, tzinfo=UTC)),
        ("30m", datetime(2026, 11, 25, 11, 30, tzinfo=UTC)),
        ("2w", datetime(2026, 11, 11, 12, 0, tzinfo=UTC)),
        ("45s", datetime(2026, 11, 25, 11, 59, 15, tzinfo=UTC)),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T12:30:00Z", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
        ("2026-11-01T12:30:00", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),  # no zone: UTC
        ("2026-11-01T14:30:00+02:00", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
    ],
)
def test_times_and_durations(text: str, expected: datetime) -> None:
    assert parse_time(text, "since", NOW) == expected


def test_a_date_as_until_covers_the_whole_day() -> None:
    end = parse_time("2026-11-01", "until", NOW, end_of_day=True)
    assert end == datetime(2026, 11, 1, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "7x", "-7d", "2026-02-30", "1234567d", ""])
def test_bad_times_name_the_parameter(text: str) -> None:
    with pytest.raises(ListParamError) as caught:
        parse_time(text, "--since", NOW)
    assert caught.value.param == "--since" and str(caught.value).startswith("--since must be")


@pytest.mark.parametrize("text", ["0", "1001", "-1", "1.5", "", "x"])
def test_limit_bounds(text: str) -> None:
    with pytest.raises(ListParamError, match="limit must be an integer from 1 to 1000"):
        parse_limit(text)
    assert parse_limit("1") == 1 and parse_limit(" 1000 ") == 1000


def test_cursor_round_trip_and_tampering() -> None:
    key = (1795311925333080, "session_2026-11-22_01-45-25_333080_9264", "default", "rayjob", "nightly", "c-x7k2p")
    cursor = encode_cursor(key)
    assert "=" not in cursor and decode_cursor(cursor) == key
    for bad in (cursor[:-3], cursor + "!", "e30", encode_cursor(key).replace("A", "B", 1) + "x"):
        with pytest.raises(ListParamError, match="cursor is not a cursor this server gave out"):
            decode_cursor(bad)


def test_position_after_a_cursor_is_a_bisection_of_the_total_order() -> None:
    created = datetime(2026, 11, 1, tzinfo=UTC)
    sessions = [
        StoredSession(ClusterRef(ns, "c"), f"session_2026-11-01_00-00-00_000000_{n}", created)
        for n in range(3)
        for ns in ("a", "b")
    ]
    sessions.sort(key=lambda s: s.key, reverse=True)
    for i, session in enumerate(sessions):
        assert StoredSessions.position_after(sessions, session.key) == i + 1
    # A cursor whose session is gone still lands between its neighbours.
    gone = (sessions[2].key[0], sessions[2].key[1], "ab", *sessions[2].key[3:])
    assert StoredSessions.position_after(sessions, gone) == 3  # type: ignore[arg-type]


def test_query_and_owner_matching() -> None:
    query = parse_query({"failed": "true", "owner": "rayjob/nightly", "since": "7d", "limit": "20"}, NOW)
    assert query.failed and query.limit == 20 and query.since == datetime(2026, 11, 18, 12, tzinfo=UTC)
    assert parse_query({}).limit is None and parse_query({}).cursor is None
    assert owner_matches("nightly", "rayjob", "nightly") and owner_matches("RayJob/nightly", "rayjob", "nightly")
    assert not owner_matches("rayservice/nightly", "rayjob", "nightly") and not owner_matches("x", None, None)
