"""``glob=`` of ``/api/v0/logs``: validation, base-dir split and matching.

Semantics follow the live dashboard (``pathlib.Path(logs_dir).glob(glob)``), not
KubeRay's Go history server: names are returned relative to ``logs/`` *including* the glob's
base directory, so every listed name can be opened with ``filename=``; matched
directories are listed as ``name/``. Per segment, ``*``/``?``/``[...]`` never
cross ``/`` and match dot-files; a ``**`` segment matches zero or more levels
(and, when last, everything below, files included).

Matching runs over names the index already has (stored objects plus the
directories they imply); nothing is listed in storage per request.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import MAX_LOG_DEPTH, validate_file_name

DEFAULT_GLOB = "*"
MAX_GLOB_LENGTH = 512
#: Bound on ``**`` segments: matching stays O(pattern x depth) per name anyway, but
#: a pattern of dozens of ``**`` is never meaningful.
MAX_RECURSIVE_SEGMENTS = 4
_META = re.compile(r"[*?\[]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class LogGlob:
    """A validated pattern: literal ``base`` directory (``""`` = ``logs/`` itself)
    and the remaining ``segments`` (at least one)."""

    base: str
    segments: tuple[str, ...]

    @property
    def recursive(self) -> bool:
        return "**" in self.segments

    def matches(self, relative: str) -> bool:
        """Whether ``relative`` (a path below ``base``, no trailing ``/``) matches."""
        return _match(self.segments, tuple(relative.split("/")))


def parse_glob(pattern: str | None) -> LogGlob:
    """Validate ``pattern`` and split it at the last literal directory.

    Raises InvalidKeyError (-> 400) for absolute paths, ``.``/``..`` or empty
    segments, backslashes, control characters and overlong patterns.
    """
    if pattern is None or pattern == "":
        pattern = DEFAULT_GLOB
    if len(pattern) > MAX_GLOB_LENGTH:
        raise InvalidKeyError(f"glob is longer than {MAX_GLOB_LENGTH} characters")
    if _CONTROL.search(pattern):
        raise InvalidKeyError(f"invalid glob {pattern!r}: control characters and '\\' are not allowed")
    if pattern.startswith("/"):
        raise InvalidKeyError(f"invalid glob {pattern!r}: must be relative to the logs directory")
    if pattern.endswith("/"):  # "events/" means the directory itself, as pathlib reads it
        pattern = pattern.rstrip("/")
    segments = pattern.split("/")
    if len(segments) > MAX_LOG_DEPTH + MAX_RECURSIVE_SEGMENTS:
        raise InvalidKeyError(f"invalid glob {pattern!r}: too many levels")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise InvalidKeyError(f"invalid glob {pattern!r}: path traversal not allowed ('.', '..' or '//')")
    if segments.count("**") > MAX_RECURSIVE_SEGMENTS:
        raise InvalidKeyError(f"invalid glob {pattern!r}: at most {MAX_RECURSIVE_SEGMENTS} '**' segments")
    literal = 0
    while literal < len(segments) - 1 and not _META.search(segments[literal]):
        literal += 1
    base = segments[:literal]
    for segment in base:
        validate_file_name(segment, "glob directory")
    return LogGlob(base="/".join(base), segments=tuple(segments[literal:]))


def match_names(files: Iterable[str], glob: LogGlob) -> list[str]:
    """Matching names among ``files`` (paths relative to ``logs/``), sorted.

    Directories implied by the files are candidates too and come back as ``dir/``.
    Names outside ``glob.base`` are ignored; returned names keep the base.
    """
    base = f"{glob.base}/" if glob.base else ""
    found: set[str] = set()
    dirs: set[str] = set()
    for name in files:
        if not name.startswith(base) or name == base:
            continue
        relative = name[len(base) :]
        parts = relative.split("/")
        for depth in range(1, len(parts)):
            dirs.add("/".join(parts[:depth]))
        if glob.matches(relative):
            found.add(base + relative)
    for directory in dirs:
        if glob.matches(directory):
            found.add(f"{base}{directory}/")
    return sorted(found)


@lru_cache(maxsize=256)
def _segment_regex(segment: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(segment))


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Segment-wise match with ``**``; memoised so any pattern stays polynomial."""
    memo: dict[tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(pattern):
            result = j == len(parts)
        elif pattern[i] == "**" and i == len(pattern) - 1:
            result = j < len(parts)  # trailing ** : anything below, not the base itself
        elif pattern[i] == "**":
            result = go(i + 1, j) or (j < len(parts) and go(i, j + 1))
        else:
            result = j < len(parts) and bool(_segment_regex(pattern[i]).match(parts[j])) and go(i + 1, j + 1)
        memo[key] = result
        return result

    return go(0, 0)
