"""Ray log events (``logs/events/event_*.log``) for ``/events``."""

from __future__ import annotations

import random
import tarfile

import orjson
import pytest

from runtime.server.index.fingerprint import is_log_events
from runtime.server.replay import log_events
from runtime.server.replay.log_events import LogEvents
from runtime.storage.session_keys import parse_session_key
from tests.support.sample_session import API, SAMPLES


def line(**fields: object) -> bytes:
    return orjson.dumps(fields)


def rows(events: LogEvents) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for job, _, _, data in events.rows():
        out.setdefault(job, []).append(orjson.loads(data))
    return out


def test_session_a_matches_the_live_events_answer() -> None:
    events = LogEvents()
    with tarfile.open(SAMPLES / "session-logs-sample.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and "/logs/events/event_" in member.name:
                handle = tar.extractfile(member)
                assert handle is not None
                events.feed(handle.read())
    live = orjson.loads((API / "events.json").read_bytes())["data"]["events"]
    ours = rows(events)
    assert {k: v for k, v in live.items() if v} == ours


def test_rules() -> None:
    events = LogEvents()
    data = b"\n".join(
        [
            line(
                event_id="a",
                source_type="GCS",
                timestamp="30",
                message="one\\ntwo\\rthree",
                custom_fields={"job_id": "02000000", "nested_map": {"inner_key": [{"deep_key": 1}]}},
            ),
            line(event_id="b", timestamp=10, message="number timestamp"),
            line(event_id="c", timestamp="20", custom_fields={"job_id": ""}),
            line(timestamp="5", message="no id"),
            b"{not json",
            b"",
            b"x" * (2 * 1024 * 1024 + 1),
            line(event_id="b", timestamp=11, message="last write wins"),
        ]
    )
    events.feed(data)
    out = rows(events)
    assert events.bad_lines == 3 and events.count() == 3
    assert [e["eventId"] for e in out["global"]] == ["b", "c"]
    assert out["global"][0]["message"] == "last write wins" and out["global"][0]["timestamp"] == 11
    job_event = out["02000000"][0]
    assert job_event["message"] == "one\ntwo\nthree"
    assert job_event["customFields"] == {"jobId": "02000000", "nestedMap": {"innerKey": [{"deepKey": 1}]}}
    assert job_event["sourceType"] == "GCS" and job_event["time"] == "1970-01-01 00:00:30"
    assert "customFields" not in out["global"][0]


def test_a_busy_job_is_trimmed_to_the_newest_ten_thousand() -> None:
    events = LogEvents()
    events.feed(b"\n".join(line(event_id=str(n), timestamp=str(n)) for n in range(11_001)))
    kept = rows(events)["global"]
    assert len(kept) == 10_000 and kept[0]["eventId"] == "1001" and kept[-1]["eventId"] == "11000"
    small = LogEvents()
    small.feed(b"\n".join(line(event_id=str(n), timestamp=str(n)) for n in range(11_000)))
    assert small.count() == 11_000 and len(small.rows()) == 11_000


def test_log_event_keys() -> None:
    def is_log_event_key(rel: str) -> bool:
        return is_log_events(parse_session_key(rel))

    assert is_log_event_key("abc/logs/events/event_GCS.log")
    assert not is_log_event_key("abc/logs/events/other.log")
    assert not is_log_event_key("abc/logs/raylet.out")
    assert not is_log_event_key("abc/logs/events/sub/event_X.log")


def _trimmed_at_the_end(lines: list[bytes]) -> list[tuple[str, float, str, bytes]]:
    """The rows as they were computed before trimming while feeding: everything held,
    sorted and trimmed once at the end."""
    held: dict[str, dict[str, tuple[float, bytes]]] = {}
    for raw in lines:
        event = orjson.loads(raw)
        job = (event.get("custom_fields") or {}).get("job_id") or "global"
        events = held.setdefault(job, {})
        events.pop(event["event_id"], None)
        converted = {"eventId": event["event_id"], "timestamp": event["timestamp"], "time": ""}
        events[event["event_id"]] = (float(event["timestamp"]), orjson.dumps(converted))
    rows = []
    for job, events in held.items():
        items = sorted(events.items(), key=lambda kv: kv[1][0])
        if len(items) > 11_000:
            items = items[-10_000:]
        rows.extend((job, ts, event_id, data) for event_id, (ts, data) in items)
    return rows


def _fed(lines: list[bytes]) -> LogEvents:
    events = LogEvents()
    for start in range(0, len(lines), 1000):
        events.feed(b"\n".join(lines[start : start + 1000]))
    return events


def _keys(rows: list[tuple[str, float, str, bytes]]) -> set[tuple[str, float, str]]:
    return {(job, ts, event_id) for job, ts, event_id, _ in rows}


def test_trimming_while_feeding_keeps_exactly_the_rows_of_trimming_at_the_end() -> None:
    """Held events are bounded (a job trimmed once it holds 20,000), yet the rows are
    those of holding everything: out-of-order times, ties, re-sent ids (with their own
    timestamp, as Ray re-sends them), two jobs."""
    rng = random.Random(7)
    lines = []
    for _ in range(80_000):
        # 60,000 ids over 80,000 events: about a third re-sent; 5,000 times: many ties.
        event_id = rng.randrange(60_000)
        fields: dict[str, object] = {"event_id": str(event_id), "timestamp": str(event_id * 7919 % 5_000)}
        if rng.random() < 0.5:
            fields["custom_fields"] = {"job_id": "01000000"}
        lines.append(line(**fields))
    events = _fed(lines)
    assert events._trimmed == {"global", "01000000"}  # trimmed while fed, not only at the end
    assert _keys(events.rows()) == _keys(_trimmed_at_the_end(lines))
    assert max(len(held) for held in events.by_job.values()) < 20_000
    # Trimmed to 10,000 while fed, then 500 more: still the newest 10,000 of all 20,500.
    lines = [line(event_id=str(n), timestamp=str(n)) for n in range(20_500)]
    assert _keys(_fed(lines).rows()) == _keys(_trimmed_at_the_end(lines))


def test_events_past_the_held_limit_are_counted_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """One event per made-up job id defeated per-job trimming: memory grew with the file."""
    monkeypatch.setattr(log_events, "MAX_HELD", 1000, raising=False)
    events = LogEvents()
    events.feed(
        b"\n".join(line(event_id=str(n), timestamp="1", custom_fields={"job_id": f"j{n}"}) for n in range(1500))
    )
    assert events.count() == 1000 and events.bad_lines == 500
    # A re-sent event already held still replaces its copy.
    events.feed(line(event_id="3", timestamp="2", custom_fields={"job_id": "j3"}))
    assert events.count() == 1000 and rows(events)["j3"][0]["timestamp"] == "2"
