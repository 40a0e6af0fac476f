"""``Content-Disposition`` for log answers (RFC 6266 with an RFC 5987 fallback)."""

from __future__ import annotations

import re
from urllib.parse import quote

_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\/;]')
_MAX_NAME = 200


def safe_filename(name: str, default: str = "file.txt") -> str:
    """A single file name: no directories, quotes, separators or control characters."""
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).strip(" .")[:_MAX_NAME]
    return name or default


def content_disposition(name: str, *, attachment: bool) -> str:
    """``attachment``/``inline`` with ``filename=`` (ASCII) and ``filename*=`` (UTF-8)."""
    kind = "attachment" if attachment else "inline"
    clean = safe_filename(name)
    ascii_name = clean.encode("ascii", "replace").decode("ascii").replace("?", "_")
    header = f'{kind}; filename="{ascii_name}"'
    if ascii_name != clean:
        header += f"; filename*=UTF-8''{quote(clean, safe='')}"
    return header
