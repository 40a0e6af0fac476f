"""``ray-history`` authenticates to a history server: ``--token``, ``RAY_HISTORY_TOKEN``,
else the current kubeconfig context through the kubernetes client's loader (a token,
a token file, an exec plugin). A loopback server records what was sent."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runtime.cli import main as cli_main
from runtime.cli.credentials import Credentials, resolve

TOKEN = "flag-token-3f9a"


class Recorder:
    """A history server stand-in: answers JSON, records each request's Authorization and Accept."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None, str | None]] = []
        self.status: dict[str, tuple[int, object]] = {}
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                recorder.requests.append((path, self.headers.get("Authorization"), self.headers.get("Accept")))
                status, body = next(
                    (answer for prefix, answer in recorder.status.items() if path.startswith(prefix)), (200, [])
                )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def authorizations(self) -> list[str | None]:
        return [auth for _path, auth, _accept in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("RAY_HISTORY_TOKEN", "RAY_HISTORY_SERVER", "STORAGE_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config of the machine
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = cli_main.main(argv)
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    return code, capsys.readouterr().err


def _kubeconfig(path: Path, user: dict[str, object], server: str = "https://127.0.0.1:6443") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "team-a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "team-a",
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


# ---------------------------------------------------------------- sources
def test_the_flag_sends_a_bearer_token(server: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["clusters", "--server", server.url, "--token", TOKEN, "--json"], capsys)
    assert code == 0, err
    assert server.authorizations() == [f"Bearer {TOKEN}"]
    # JSON first: a server with browser login would redirect a client preferring HTML.
    assert server.requests[0][2] is not None and server.requests[0][2].startswith("application/json")


def test_the_environment_variable_sends_it(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_HISTORY_TOKEN", "  env-token \n")
    assert _run(["clusters", "--server", server.url, "--json"], capsys)[0] == 0
    assert server.authorizations() == ["Bearer env-token"]


def test_the_flag_wins_over_the_environment_as_server_does(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_HISTORY_TOKEN", "env-token")
    assert _run(["clusters", "--server", server.url, "--token", TOKEN, "--json"], capsys)[0] == 0
    assert server.authorizations() == [f"Bearer {TOKEN}"]


def test_no_token_anywhere_sends_no_header(server: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["clusters", "--server", server.url, "--json"], capsys)[0] == 0
    assert server.authorizations() == [None]


def test_a_pasted_bearer_prefix_is_accepted() -> None:
    assert resolve("Bearer abc", {}).token == "abc"


@pytest.mark.parametrize("bad", ["", "   ", "two words", "tab\there", "nul\x00"])
def test_unusable_tokens_are_usage_errors_that_do_not_quote_them(
    bad: str, server: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(["clusters", "--server", server.url, "--token", bad], capsys)
    assert code == 2
    assert "--token" in err
    assert bad.strip() == "" or bad not in err
    assert server.requests == []


def test_token_with_storage_flags_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["clusters", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--token", TOKEN]
    code, err = _run(argv, capsys)
    assert code == 2 and "--token is for a history server" in err


def test_the_credentials_repr_hides_the_token() -> None:
    assert TOKEN not in repr(Credentials(TOKEN, "--token"))


# ------------------------------------------------------------- kubeconfig
def test_kubeconfig_token_user(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", {"token": "kube-token-1"})))
    assert _run(["clusters", "--server", server.url, "--json"], capsys)[0] == 0
    assert server.authorizations() == ["Bearer kube-token-1"]


def test_kubeconfig_token_file_user(tmp_path: Path) -> None:
    (tmp_path / "sa-token").write_text("file-token-2\n")
    config = _kubeconfig(tmp_path / "config", {"tokenFile": str(tmp_path / "sa-token")})
    credentials = resolve(None, {"KUBECONFIG": str(config)})
    assert credentials.token == "file-token-2"
    assert credentials.source == "kubeconfig context team-a"


def test_kubeconfig_exec_plugin(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plugin = tmp_path / "credential-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "exec-token-3", "expirationTimestamp": "2099-01-01T00:00:00Z"},
    }
    plugin.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({credential!r}))\n")
    plugin.chmod(0o700)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", user)))
    assert _run(["clusters", "--server", server.url, "--json"], capsys)[0] == 0
    assert server.authorizations() == ["Bearer exec-token-3"]


def test_kubeconfig_with_a_client_certificate_sends_nothing_and_says_so(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n").decode()
    user = {"client-certificate-data": pem, "client-key-data": pem}
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", user)))
    code, err = _run(["clusters", "--server", server.url, "--json", "-vv"], capsys)  # -vv: debug log on stderr
    assert code == 0, err
    assert server.authorizations() == [None]
    assert "kubeconfig context team-a authenticates with a client certificate" in err


def test_the_token_is_never_logged(
    server: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", {"token": "kube-secret-4"})))
    server.status["/clusters"] = (401, {"result": False, "msg": "token rejected"})
    code, err = _run(["clusters", "--server", server.url, "-vv"], capsys)
    assert code == 1
    assert "kube-secret-4" not in err  # -vv: debug logging goes to stderr too


# ----------------------------------------------------------------- refusals
def test_401_without_a_token_names_the_flag(server: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    server.status["/clusters"] = (401, {"result": False, "msg": "authentication required"})
    code, err = _run(["clusters", "--server", server.url], capsys)
    assert code == 1
    assert "requires authentication (HTTP 401: authentication required)" in err
    assert "--token TOKEN" in err and "RAY_HISTORY_TOKEN" in err
    assert "Traceback" not in err


def test_401_with_a_token_says_it_was_not_accepted(server: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    server.status["/clusters"] = (401, {"result": False, "msg": "the token is expired"})
    code, err = _run(["clusters", "--server", server.url, "--token", TOKEN], capsys)
    assert code == 1
    assert "did not accept the token from --token (HTTP 401: the token is expired)" in err
    assert TOKEN not in err


def test_403_names_the_namespace(server: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    server.status["/enter_cluster/"] = (403, {"result": False, "msg": "alice may not read namespace team-b"})
    code, err = _run(["jobs", "demo", "-n", "team-b", "--server", server.url, "--token", TOKEN], capsys)
    assert code == 1
    assert "refused access to namespace 'team-b' (HTTP 403: alice may not read namespace team-b)" in err
    assert "--token" in err and "Traceback" not in err
    assert server.authorizations() == [f"Bearer {TOKEN}"]
