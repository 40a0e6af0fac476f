"""Profile event times in a stored detail are ns / 1e6 exactly as Python divides ints."""

from __future__ import annotations

import random

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


def _boundary_shapes(rng: random.Random) -> list[int]:
    """ns whose quotient lies on or next to a rounding boundary of the result: an exact
    half, or a fraction ``j / 2**m``, the whole ms of every size an int64 allows."""
    values = []
    for _ in range(400):
        whole = rng.getrandbits(rng.randrange(1, 44))
        for m in range(1, 25):
            j = rng.randrange(1, 2**m)
            if j * 1_000_000 % 2**m == 0:
                for near in (-1, 0, 1):
                    values.append(whole * 1_000_000 + j * 1_000_000 // 2**m + near)
    return values


def test_profile_times_round_like_python_across_int64() -> None:
    """Every size of int64 (both signs), around 2**53 where the method changes, and
    quotients on or beside a rounding boundary: the same float as Python's ``/``."""
    rng = random.Random(20261127)
    values = [rng.getrandbits(bits) * sign for bits in range(64) for sign in (1, -1) for _ in range(200)]
    values += [2**53 + d for d in range(-3, 4)] + [-(2**53) + d for d in range(-3, 4)]
    values += [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**30]
    values += _boundary_shapes(rng)
    values += [-v for v in _boundary_shapes(rng)]
    prof = Profile("worker", "ab", "10.0.0.2")
    for n, ns in enumerate(values):
        prof.events[(f"e{n}", ns, 0)] = ""
    _head, flat = DetailEncoder().profile(prof)
    assert flat[1::4] == [ns / 1_000_000 for ns in values]
