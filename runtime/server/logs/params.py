"""Query parameters of ``/api/v0/logs/file`` and ``/stream``, parsed and checked.

Validation order and messages follow KubeRay's Go history server; every value
that ends up in a storage key is whitelisted here (hex ids, one-or-more clean
path segments), so nothing later has to worry about traversal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.common.ids import InvalidIdError, to_hex_id
from runtime.server.errors import ApiError
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_file_name, validate_log_path, validate_node_id

DEFAULT_LINES = 1000
MAX_LINES = 10000
_MAX_ID = 128


@dataclass(frozen=True)
class LogFileParams:
    """A checked log-file request. ``lines is None`` means the whole content."""

    node_id: str | None = None
    node_ip: str | None = None
    filename: str | None = None
    task_id: str | None = None
    actor_id: str | None = None
    pid: int | None = None
    submission_id: str | None = None
    suffix: str = "out"
    lines: int | None = DEFAULT_LINES
    attempt_number: int = 0
    filter_ansi: bool = False
    download_filename: str | None = None


def _int(args: Mapping[str, str], name: str) -> int | None:
    raw = args.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ApiError(400, f"invalid {name}: {raw[:64]!r} is not an integer") from None


def _bool(args: Mapping[str, str], name: str) -> bool:
    raw = (args.get(name) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise ApiError(400, f"invalid {name}: must be true or false")
    return raw == "true"


def _hex(args: Mapping[str, str], name: str) -> str | None:
    raw = args.get(name)
    if not raw:
        return None
    try:
        value = to_hex_id(raw)
    except InvalidIdError:
        raise ApiError(400, f"invalid {name}: must be a hex (or base64) Ray id") from None
    if len(value) > _MAX_ID:
        raise ApiError(400, f"invalid {name}: longer than {_MAX_ID} hex digits")
    return value


def normalise_lines(lines: int | None) -> int | None:
    """Ray's line semantics: unset/0 -> 1000, negative -> whole file, cap 10 000."""
    if lines is None or lines == 0:
        return DEFAULT_LINES
    if lines < 0:
        return None
    return min(lines, MAX_LINES)


def parse_log_file_params(args: Mapping[str, str]) -> LogFileParams:
    """Check the query of a log-file request; ApiError(400) naming the problem."""
    pid = _int(args, "pid")
    lines = _int(args, "lines")
    _int(args, "timeout")  # accepted for compatibility; a stored read has no timeout
    attempt = _int(args, "attempt_number") or 0
    if attempt < 0:
        raise ApiError(400, "invalid attempt_number: must be >= 0")
    suffix = args.get("suffix") or "out"
    if suffix not in ("out", "err"):
        raise ApiError(400, "invalid suffix: must be 'out' or 'err'")
    filter_ansi = _bool(args, "filter_ansi_code")

    node_id_raw = args.get("node_id") or None
    node_ip = args.get("node_ip") or None
    task_id = _hex(args, "task_id")
    actor_id = _hex(args, "actor_id")
    filename = args.get("filename") or None
    submission_id = args.get("submission_id") or None
    if not (node_id_raw or node_ip or actor_id or task_id or submission_id):
        raise ApiError(400, "node_id or node_ip is required when actor_id or task_id is not provided")
    if not (actor_id or task_id or (pid and pid != 0) or filename or submission_id):
        raise ApiError(400, "At least one of actor_id, task_id, pid, or filename is required")

    try:
        node_id = validate_node_id(node_id_raw) if node_id_raw else None
        if filename is not None:
            validate_log_path(filename)
        if submission_id is not None:
            validate_file_name(submission_id, "submission_id")
    except InvalidKeyError as exc:
        raise ApiError(400, f"invalid path: path traversal not allowed ({exc})") from None
    if node_ip is not None:
        try:
            node_ip = str(ipaddress.ip_address(node_ip.strip()))
        except ValueError:
            raise ApiError(400, "invalid node_ip: not an IP address") from None

    return LogFileParams(
        node_id=node_id,
        node_ip=node_ip,
        filename=filename,
        task_id=task_id,
        actor_id=actor_id,
        pid=pid if pid else None,
        submission_id=submission_id,
        suffix=suffix,
        lines=normalise_lines(lines),
        attempt_number=attempt,
        filter_ansi=filter_ansi,
        download_filename=args.get("download_filename") or None,
    )
