"""Real event batches captured from Ray 2.60 (``tests/fixtures/ray-samples/raw``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "ray-samples"
RAW = SAMPLES / "raw"
EVENTS = SAMPLES / "events"


def raw_batches(run: str = "runB-all-types") -> Iterator[tuple[str, bytes]]:
    """(name, body) of every POST Ray made in that run, answered or not."""
    for body in sorted((RAW / run).glob("*.body")):
        yield body.name, body.read_bytes()


def accepted_batches(run: str = "runB-all-types") -> Iterator[bytes]:
    """Bodies the sink answered 200 (a retried batch appears once)."""
    for name, body in raw_batches(run):
        headers = json.loads((RAW / run / name.replace(".body", ".headers.json")).read_text())
        if headers.get("answered_status") == 200:
            yield body


def all_events(run: str = "runB-all-types") -> list[dict[str, object]]:
    data: list[dict[str, object]] = json.loads((EVENTS / run / "_all_events.json").read_text())
    return data
