"""The history list's parameters (``/clusters?limit=&cursor=&failed=&owner=&since=&until=``)
and its cursor; no Flask here, so ``ray-history clusters`` checks its flags with the
same rules.

* ``limit``: 1..``MAX_LIMIT`` stored sessions per page;
* ``cursor``: opaque; it is the position after the last session of the previous page
  in the list's order (newest first), not an offset, so sessions stored meanwhile
  never shift a later page (no duplicates, no gaps);
* ``since``/``until``: an ISO date (``2026-11-01``: that whole day for ``until``), an
  ISO time (``2026-11-01T12:00:00Z``; no zone = UTC) or a duration back from now
  (``7d``, ``12h``, ``30m``, ``2w``, ``45s``);
* ``failed``: ``true``/``false``; ``owner``: ``NAME`` or ``KIND/NAME`` of the RayJob or
  RayService.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import orjson

MAX_LIMIT = 1000
CURSOR_VERSION = 1
_DURATION = re.compile(r"(?P<amount>\d{1,6})\s*(?P<unit>[smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no", "")

#: A stored session's place in the list, newest first: (created Unix µs, session,
#: namespace, owner kind, owner name, cluster name); a total order over the markers.
SortKey = tuple[int, str, str, str, str, str]


class ListParamError(ValueError):
    """A bad list parameter; ``param`` names it (``--since`` in the CLI, ``since`` in HTTP)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ListQuery:
    namespace: str | None = None
    name: str | None = None
    owner: str | None = None
    failed: bool = False
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = None  # None: the server's --clusters-limit, as before pagination
    cursor: SortKey | None = None


def parse_limit(value: str, param: str = "limit") -> int:
    try:
        limit = int(value.strip())
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ListParamError(param, f"{param} must be an integer from 1 to {MAX_LIMIT} (got {value[:32]!r})")
    return limit


def parse_time(value: str, param: str, now: datetime | None = None, *, end_of_day: bool = False) -> datetime:
    """An ISO date/time or a duration back from ``now`` (see the module doc), in UTC."""
    text = value.strip()
    match = _DURATION.fullmatch(text.lower())
    if match:
        moment = now or datetime.now(UTC)
        return moment - timedelta(**{_UNITS[match["unit"]]: int(match["amount"])})
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return start + timedelta(days=1) - timedelta(microseconds=1) if end_of_day else start
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ListParamError(
            param,
            f"{param} must be an ISO date (2026-11-01), an ISO time (2026-11-01T12:00:00Z) "
            f"or a duration back from now (7d, 12h, 30m) (got {value[:40]!r})",
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_bool(value: str, param: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ListParamError(param, f"{param} must be true or false (got {value[:32]!r})")


def encode_cursor(key: SortKey) -> str:
    raw = orjson.dumps({"v": CURSOR_VERSION, "k": list(key)})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str, param: str = "cursor") -> SortKey:
    message = f"{param} is not a cursor this server gave out (take it from the X-Next-Cursor header)"
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
        data = orjson.loads(raw)
        key = data["k"]
        if data["v"] != CURSOR_VERSION or len(key) != 6 or not isinstance(key[0], int):
            raise ListParamError(param, message)
        if not all(isinstance(part, str) and len(part) <= 256 for part in key[1:]):
            raise ListParamError(param, message)
    except (binascii.Error, ValueError, orjson.JSONDecodeError, KeyError, TypeError):
        raise ListParamError(param, message) from None
    return (key[0], key[1], key[2], key[3], key[4], key[5])


def parse_query(args: Mapping[str, str], now: datetime | None = None) -> ListQuery:
    """The ``/clusters`` query string; raises :class:`ListParamError` naming the parameter."""
    owner = args.get("owner") or None
    if owner is not None and len(owner) > 300:
        raise ListParamError("owner", "owner must be NAME or KIND/NAME (at most 300 characters)")
    since = parse_time(args["since"], "since", now) if args.get("since") else None
    until = parse_time(args["until"], "until", now, end_of_day=True) if args.get("until") else None
    if since is not None and until is not None and until < since:
        raise ListParamError("until", "until is before since: nothing could match")
    return ListQuery(
        namespace=args.get("namespace") or None,
        name=args.get("name") or None,
        owner=owner,
        failed=parse_bool(args.get("failed", ""), "failed"),
        since=since,
        until=until,
        limit=parse_limit(args["limit"]) if "limit" in args else None,
        cursor=decode_cursor(args["cursor"]) if args.get("cursor") else None,
    )


def owner_matches(owner: str, owner_kind: str | None, owner_name: str | None) -> bool:
    """``owner`` = ``NAME`` or ``KIND/NAME`` (kind case-insensitive) of a RayJob/RayService."""
    if not owner_name:
        return False
    kind, _, name = owner.rpartition("/")
    return name == owner_name and (not kind or kind.lower() == (owner_kind or "").lower())
