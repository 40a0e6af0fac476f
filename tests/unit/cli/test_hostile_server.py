"""The query commands and ``open`` against a broken or malicious history server (and hostile
stored values): answers of the wrong shape end in an error naming the route (exit 1, no
traceback), server text never acts as rich markup or terminal escapes, names go into the
printed URL only once checked, and one answer cannot make the CLI buffer without end."""

from __future__ import annotations

import threading
import traceback
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from runtime.cli import client as cli_client
from runtime.cli import main as cli_main
from runtime.cli.api import MAX_ANSWER_BYTES, ApiResponse, HistoryApi, Params
from runtime.cli.client import HttpHistoryApi
from runtime.cli.errors import CliError

SESSION = "session_2026-11-22_01-45-25_333080_9264"
ENTERED = {"result": "success", "namespace": "default", "name": "raycluster-demo", "session": SESSION}


class FakeApi(HistoryApi):
    """A history server answering each path prefix with a canned JSON value."""

    where = "http://evil.example"

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def get(self, path: str, params: Params = (), *, stream: bool = False) -> ApiResponse:
        for prefix, answer in self.answers.items():
            if path.startswith(prefix):
                return ApiResponse(200, "application/json", iter([orjson.dumps(answer)]))
        return ApiResponse(404, "application/json", iter([b'{"result": false, "msg": "nope"}']))


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answers: dict[str, Any], argv: list[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(cli_main, "open_api", lambda args, env=None: FakeApi(answers))
    monkeypatch.setattr(cli_client, "HttpHistoryApi", lambda server, creds: FakeApi(answers))
    try:
        code = cli_main.main(argv)
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    except Exception:  # the point: no traceback
        pytest.fail("the CLI crashed with a traceback:\n" + traceback.format_exc(limit=3))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------ markup
def test_a_job_entrypoint_is_printed_literally(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Any job submitter chooses the entrypoint; ``\\[/]`` in it (escaped-bracket handling
    turned it into a closing tag) stopped ``jobs`` with a rich MarkupError for every reader."""
    jobs = [{"job_id": "02000000", "status": "FAILED", "type": "SUBMISSION", "entrypoint": "python x.py \\[/]"}]
    code, out, _ = _run(monkeypatch, capsys, {"/enter_cluster/": ENTERED, "/api/jobs/": jobs}, ["jobs", "c"])
    assert code == 0 and "python x.py \\[/]" in out


def test_a_session_name_in_the_title_is_not_markup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The title named the server's session unescaped: ``[/]`` crashed, ``[link=...]`` hid text."""
    answers = {"/enter_cluster/": dict(ENTERED, session="[/][red]x"), "/api/jobs/": []}
    code, out, _ = _run(monkeypatch, capsys, answers, ["jobs", "raycluster-demo"])
    assert code == 0 and "[/][red]x" in out


def test_terminal_escapes_in_cells_are_shown_not_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An entrypoint carrying OSC 52 (write the clipboard) and 'clear screen' sequences."""
    jobs = [{"job_id": "02000000", "status": "RUNNING", "entrypoint": "a\x1b]52;c;cm0=\x07\x1b[2Jb"}]
    code, out, _ = _run(monkeypatch, capsys, {"/enter_cluster/": ENTERED, "/api/jobs/": jobs}, ["jobs", "c"])
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\\x1b]52" in out


# ------------------------------------------------------------------- shapes
@pytest.mark.parametrize(
    ("answers", "argv", "route"),
    [
        ({"/enter_cluster/": {"result": "success"}, "/api/jobs/": []}, ["jobs", "c"], "/enter_cluster/default/"),
        ({"/enter_cluster/": ENTERED, "/api/jobs/": {"result": False}}, ["jobs", "c"], "/api/jobs/"),
        ({"/enter_cluster/": ENTERED, "/api/jobs/": [1, 2]}, ["jobs", "c"], "/api/jobs/"),
        ({"/clusters": [{"name": "x", "summary": "oops"}]}, ["clusters"], "/clusters"),
        ({"/clusters": [{"name": "x", "summary": {"jobs": [1]}}]}, ["clusters"], "/clusters"),
        ({"/clusters": {"clusters": []}}, ["clusters"], "/clusters"),
        ({"/enter_cluster/": ENTERED, "/api/v0/tasks": {"data": {"result": []}}}, ["tasks", "c"], "/api/v0/tasks"),
        (
            {"/enter_cluster/": ENTERED, "/api/v0/tasks": {"data": {"result": {"result": "x"}}}},
            ["tasks", "c"],
            "/api/v0/tasks",
        ),
        (
            {"/enter_cluster/": ENTERED, "/api/v0/logs": {"data": {"result": ["raylet.out"]}}},
            ["logs", "c"],
            "/api/v0/logs",
        ),
        ({"/enter_cluster/": ENTERED, "/api/v0/logs": "nope"}, ["logs", "c"], "/api/v0/logs"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_an_error_naming_the_route(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    answers: dict[str, Any],
    argv: list[str],
    route: str,
) -> None:
    """KeyError, AttributeError and TypeError tracebacks used to follow such answers."""
    code, _, err = _run(monkeypatch, capsys, answers, argv)
    assert code == 1 and f"http://evil.example{route}" in err and "unexpected answer" in err


# --------------------------------------------------------------------- open
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"namespace": "default", "name": "raycluster-demo"}, "sessionName must be a string"),
        ({"namespace": "default", "name": "raycluster-demo", "sessionName": "../../admin?x#"}, "invalid session name"),
        ({"namespace": "default", "name": "raycluster-demo", "sessionName": 7}, "sessionName must be a string"),
        (
            {
                "namespace": "default",
                "name": "raycluster-demo",
                "sessionName": SESSION,
                "ownerName": "../x",
                "ownerKind": "rayjob",
            },
            "invalid owner name",
        ),
    ],
)
def test_open_checks_what_goes_into_the_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, entry: dict[str, Any], message: str
) -> None:
    """The server's sessionName (and names) went unchecked into the printed, shareable URL
    (``/sessions/default/raycluster-demo/../../admin?x#/``), or crashed with KeyError."""
    code, out, err = _run(monkeypatch, capsys, {"/clusters": [entry]}, ["open", "raycluster-demo", "--no-browser"])
    assert code == 1 and out == "" and "/clusters: unexpected answer" in err and message in err


def test_open_ignores_entries_of_another_namespace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Asked for namespace ``default``, an entry of another (here invalid) namespace is not it."""
    listing = [{"namespace": "../x", "name": "raycluster-demo", "sessionName": SESSION}]
    code, out, err = _run(monkeypatch, capsys, {"/clusters": listing}, ["open", "raycluster-demo", "--no-browser"])
    assert code == 1 and out == "" and "no cluster default/raycluster-demo" in err


def test_open_prints_a_live_cluster_url(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``live`` is what the server calls a running cluster's session: accepted."""
    listing = [{"namespace": "default", "name": "raycluster-demo", "sessionName": "live"}]
    argv = ["open", "raycluster-demo", "live", "--no-browser", "--server", "https://history.example.com"]
    code, out, _ = _run(monkeypatch, capsys, {"/clusters": listing}, argv)
    assert code == 0 and out == "https://history.example.com/sessions/default/raycluster-demo/live/\n"


# --------------------------------------------------------------------- HTTP
HUGE_MIB = MAX_ANSWER_BYTES // 2**20 + 64


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/clusters"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                for _ in range(HUGE_MIB):  # whitespace, then a valid empty list
                    self.wfile.write(b" " * 2**20)
                self.wfile.write(b"[]")
            except OSError:
                pass
            return
        status = 401 if self.path.startswith("/auth") else 404
        body = b'{"result": false, "msg": "gone\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x9b31m\\u202e"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def evil_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_one_answer_is_bounded(evil_server: str) -> None:
    """requests read the whole body before get_json saw it: a server could fill the CLI's
    memory. Now the body streams and reading stops past MAX_ANSWER_BYTES."""
    api = HttpHistoryApi(evil_server)
    tracemalloc.start()
    try:
        with pytest.raises(CliError, match=r"/clusters: the answer is larger than 128 MiB"):
            api.get_json("/clusters")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        api.close()
    assert peak < MAX_ANSWER_BYTES * 1.5


@pytest.mark.parametrize("path", ["/enter_cluster/default/raycluster/x/latest", "/auth"])
def test_server_error_text_carries_no_terminal_escapes(evil_server: str, path: str) -> None:
    """The server's error message was printed as is: OSC 52 could write the clipboard,
    ``ESC [2J`` clear the screen (404 and 401 messages alike)."""
    with HttpHistoryApi(evil_server) as api, pytest.raises(CliError) as raised:
        api.get_json(path)
    message = str(raised.value)
    assert "gone" in message and "\\x1b]52" in message
    assert not any(ch in message for ch in "\x1b\x07\x9b\u202e")
