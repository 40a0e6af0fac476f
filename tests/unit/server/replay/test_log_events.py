"""Ray log events (``logs/events/event_*.log``) for ``/events``."""

from __future__ import annotations

import tarfile

import orjson

from runtime.server.index.fingerprint import is_log_events
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
