"""``--filter key=value`` / ``key!=value``: the state API's filter triples."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass

_FILTER = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>!=|=)(?P<value>.*)", re.DOTALL)


@dataclass(frozen=True)
class TaskFilter:
    """One ``filter_keys``/``filter_predicates``/``filter_values`` triple."""

    key: str
    predicate: str
    value: str


def parse_filter(text: str) -> TaskFilter:
    """``state=FAILED`` or ``name!=noisy``; argparse reports the error naming ``--filter``."""
    match = _FILTER.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE or KEY!=VALUE (e.g. state=FAILED, job_id=02000000, type!=ACTOR_TASK)"
        )
    value = match["value"].strip()
    if not value:
        raise argparse.ArgumentTypeError(f"{text!r}: the value after {match['op']!r} is empty")
    return TaskFilter(match["key"], match["op"], value)


def filter_params(filters: Iterable[TaskFilter]) -> list[tuple[str, str]]:
    """Query parameters in the order the server pairs them (the i-th of each list)."""
    chosen = list(filters)
    params = [("filter_keys", f.key) for f in chosen]
    params += [("filter_predicates", f.predicate) for f in chosen]
    params += [("filter_values", f.value) for f in chosen]
    return params
