"""Profile event times in a stored detail are ns / 1e6 exactly as Python divides ints."""

from __future__ import annotations

from runtime.server.replay.attempt import Profile
from runtime.server.replay.task_detail import DetailEncoder


def test_profile_times_are_the_correctly_rounded_quotient_in_both_builds() -> None:
    """Python rounds an int / int quotient once, exactly. Compiled by mypyc, the same
    expression on ints that fit a machine word divided two doubles, and Ray's ns since the
    epoch (beyond 2**53) lost digits first: 1795311948774222000 ns came out as
    1795311948774.2222 ms instead of 1795311948774.222 in the server image's indexes."""
    prof = Profile("worker", "ab", "10.0.0.2")
    starts = [1_795_311_948_774_222_000, 1_795_311_946_648_900_100, 2**62 + 12_345, 0, -5_000_001]
    for ns in starts:
        prof.events[("task:execute", ns, ns + 1_001)] = ""
    _head, flat = DetailEncoder().profile(prof)
    times = [value for at, value in enumerate(flat) if at % 4 in (1, 2)]
    expected = [ns / 1_000_000 for start in starts for ns in (start, start + 1_001)]
    assert times == expected
    assert all(type(t) is float for t in times)
