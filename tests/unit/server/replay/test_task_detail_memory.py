"""What a shard's detail encoder holds per task stays near the size of its texts."""

from __future__ import annotations

import sys
import tracemalloc

from runtime.server.replay.attempt import Profile
from runtime.server.replay.task_detail import DetailEncoder


def test_the_texts_held_per_task_take_about_their_own_size() -> None:
    """Ray's task:: profile entry names its task in its extra data, so each profiled
    task adds a text that the encoder holds until the shard is written. Found on a
    1M-task session with a profile per task: orjson's bytes each kept the 4 KiB buffer
    they were written in, ~250 MiB more per worker at the bucket size of a big build."""
    encoder = DetailEncoder()
    profiles = []
    for n in range(2000):
        prof = Profile("worker", "ab", "10.0.0.2")
        prof.events[("task::work", n, n + 1)] = f'{{"name": "__main__.work", "task_id": "{n:048x}"}}'
        profiles.append(prof)
    tracemalloc.start()
    try:
        for prof in profiles:
            encoder.profile(prof)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    own = sum(sys.getsizeof(data) for data in encoder.texts.values())
    assert len(encoder.texts) > 2000  # each task's extra data, the profile head and the name
    assert held < 2 * own + 200 * len(profiles)  # the texts, their ids, the dicts' entries
