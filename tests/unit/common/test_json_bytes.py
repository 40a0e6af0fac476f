"""JSON bytes that are kept hold only their own size."""

from __future__ import annotations

import tracemalloc

import orjson

from runtime.common.json_bytes import dumps_kept


def test_kept_json_is_orjsons_own_bytes_at_their_own_size() -> None:
    values = [{"event_id": n, "message": "m" * (n % 50)} for n in range(500)]
    values += [{"event_id": n, "message": "m\u00e9\u4e2d\U0001f600" * (n % 50)} for n in range(500)]
    for value in values:  # orjson's first calls allocate what it keeps for later ones
        dumps_kept(value)
    tracemalloc.start()
    try:
        kept = [dumps_kept(value) for value in values]
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept == [orjson.dumps(value) for value in values]
    assert all(type(data) is bytes for data in kept)
    assert held < sum(len(data) + 64 for data in kept) + 8 * len(kept) + 1024
