"""Type stub of the C module ``_lifecycle.c`` (compiled only by the native build)."""

from typing import Any

STATE_BITS: int

class Scan:
    @property
    def count(self) -> int: ...

def scan(body: bytes, /) -> tuple[Scan, list[bytes], list[int]]: ...
def apply(
    scan: Scan,
    start: int,
    stop: int,
    attempts: dict[Any, Any],
    attempt_type: type,
    ids: Any,
    seconds: dict[str, int],
    ts_ns: Any,
    strings: dict[str, str],
    base_ns: int,
    templates: dict[bytes, Any],
    names: dict[str, str],
    learn: Any,
    templates_limit: int,
    names_limit: int,
    profile: Any,
    /,
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int], int]: ...
def hex_id(text: object, /) -> str | None: ...
