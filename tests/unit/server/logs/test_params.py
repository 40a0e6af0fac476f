"""Query checks of /api/v0/logs/file, in KubeRay's Go history server's order and wording."""

from __future__ import annotations

import pytest

from runtime.server.errors import ApiError
from runtime.server.logs.params import LogFileParams, normalise_lines, parse_log_file_params

NODE = "98f883cfe30ce800c7aac63e75e2794d48efac54650dde6e279e2c78"


def _fails(args: dict[str, str], status: int, text: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_log_file_params(args)
    assert info.value.status == status
    assert text in info.value.msg


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"node_id": NODE, "filename": "a", "pid": "x"}, "invalid pid"),
        ({"node_id": NODE, "filename": "a", "lines": "ten"}, "invalid lines"),
        ({"node_id": NODE, "filename": "a", "timeout": "1.5"}, "invalid timeout"),
        ({"node_id": NODE, "filename": "a", "attempt_number": "-1"}, "attempt_number"),
        ({"node_id": NODE, "filename": "a", "suffix": "log"}, "invalid suffix"),
        ({"node_id": NODE, "filename": "a", "filter_ansi_code": "yes"}, "filter_ansi_code"),
        ({"filename": "raylet.out"}, "node_id or node_ip is required"),
        ({"node_id": NODE}, "At least one of actor_id, task_id, pid, or filename is required"),
        ({"node_id": NODE, "pid": "0"}, "At least one of"),
        ({"node_id": NODE, "filename": "../etc/passwd"}, "path traversal"),
        ({"node_id": NODE, "filename": "/etc/passwd"}, "path traversal"),
        ({"node_id": NODE, "filename": ".."}, "path traversal"),
        ({"node_id": NODE, "filename": "a/../../b"}, "path traversal"),
        ({"node_id": "../evil", "filename": "raylet.out"}, "path traversal"),
        ({"node_id": "no hex!", "filename": "raylet.out"}, "path traversal"),
        ({"node_ip": "10.0.0.1; rm", "filename": "raylet.out"}, "invalid node_ip"),
        ({"task_id": "../../x"}, "invalid task_id"),
        ({"actor_id": "not an id!"}, "invalid actor_id"),
        ({"submission_id": "../x"}, "path traversal"),
    ],
)
def test_rejected(args: dict[str, str], text: str) -> None:
    _fails(args, 400, text)


def test_defaults_and_normalisation() -> None:
    params = parse_log_file_params({"node_id": NODE.upper(), "filename": "events/event_GCS.log"})
    assert params == LogFileParams(node_id=NODE, filename="events/event_GCS.log", lines=1000)
    params = parse_log_file_params(
        {"task_id": "AQAAAA==", "suffix": "err", "lines": "-1", "filter_ansi_code": "TRUE", "attempt_number": "2"}
    )
    assert (params.task_id, params.suffix, params.lines, params.filter_ansi, params.attempt_number) == (
        "01000000",
        "err",
        None,
        True,
        2,
    )
    assert parse_log_file_params({"node_ip": "10.0.0.01".replace("01", "1"), "pid": "42"}).pid == 42


@pytest.mark.parametrize(("raw", "want"), [(None, 1000), (0, 1000), (-1, None), (-5, None), (50, 50), (50000, 10000)])
def test_lines(raw: int | None, want: int | None) -> None:
    assert normalise_lines(raw) == want
