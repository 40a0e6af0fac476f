"""What a shard's detail encoder holds per task: nothing that grows with the tasks."""

from __future__ import annotations

import tracemalloc

import msgspec

from runtime.server.replay.attempt import Profile
from runtime.server.replay.task_detail import DetailEncoder


def _profile(n: int) -> Profile:
    prof = Profile("worker", "ab", "10.0.0.2")
    prof.events[("task:execute", n, n + 1)] = "{}"
    prof.events[("task::work", n, n + 2)] = f'{{"name": "__main__.work", "task_id": "{n:048x}"}}'
    return prof


def test_a_profiled_task_adds_no_text_the_encoder_holds() -> None:
    """Ray's task:: profile entry names its task in its extra data. As a shared text,
    each profiled task added one that the encoder held until its shard was written:
    found on a 1M-task session with a profile per task, where orjson's bytes each kept
    the 4 KiB buffer they were written in (~250 MiB more per worker). The extra data
    is stored in the task's own row instead, and the encoder keeps only shared texts."""
    encoder = DetailEncoder()
    profiles = [_profile(n) for n in range(2000)]
    encoder.profile(profiles[0])  # the shared texts: the head and the two names
    tracemalloc.start()
    try:
        for prof in profiles:
            encoder.encode([0, None, None, None, None, encoder.profile(prof)])
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(encoder.texts) == 3
    assert held < 20_000  # independent of the 2000 tasks


def test_the_extra_data_is_stored_in_the_row_as_the_state_api_answers_it() -> None:
    encoder = DetailEncoder()
    stored = encoder.encode([0, None, None, None, None, encoder.profile(_profile(7))])
    head, flat = msgspec.msgpack.decode(stored)[5]
    assert head in encoder.texts and flat[0] in encoder.texts and flat[4] in encoder.texts
    assert flat[3] == b"{}"
    assert flat[7] == b'{"name":"__main__.work","task_id":"' + b"%048x" % 7 + b'"}'
