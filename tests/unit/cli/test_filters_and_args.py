"""Filter parsing and command-line errors (exit 2, message naming the flag)."""

from __future__ import annotations

import argparse

import pytest

from runtime.cli import main as cli_main
from runtime.cli.filters import TaskFilter, filter_params, parse_filter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("state=FAILED", TaskFilter("state", "=", "FAILED")),
        ("name!=noisy-task", TaskFilter("name", "!=", "noisy-task")),
        (" job_id = 02000000 ", TaskFilter("job_id", "=", "02000000")),
        ("func_name=a=b", TaskFilter("func_name", "=", "a=b")),
    ],
)
def test_parse_filter(text: str, expected: TaskFilter) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize(
    ("text", "message"), [("state", "is not KEY=VALUE"), ("=x", "is not KEY"), ("state=", "empty")]
)
def test_bad_filters(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_filter(text)


def test_filter_params_pair_by_position() -> None:
    params = filter_params([parse_filter("state=FAILED"), parse_filter("name!=x")])
    assert params == [
        ("filter_keys", "state"),
        ("filter_keys", "name"),
        ("filter_predicates", "="),
        ("filter_predicates", "!="),
        ("filter_values", "FAILED"),
        ("filter_values", "x"),
    ]


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(argv)
    code = exited.value.code
    return int(code) if isinstance(code, int) else 1, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["jobs"], "CLUSTER"),
        (["jobs", "Bad_Name"], "cluster name"),
        (["jobs", "demo", "yesterday"], "not a session name"),
        (["jobs", "demo", "-n", "UPPER"], "namespace"),
        (["tasks", "demo", "--filter", "nonsense"], "--filter"),
        (["tasks", "demo", "--limit", "0"], "--limit"),
        (["logs", "demo", "--file", "a.log", "--task-id", "ab"], "not allowed with argument"),
        (["export", "demo", "latest"], "-o/--output"),
        (["import"], "FILE"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _fails(argv, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_file_needs_node(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _fails(["logs", "demo", "--file", "raylet.out", "--server", "http://127.0.0.1:9"], capsys)
    assert code == 2 and "--file needs --node" in err


def test_server_and_storage_are_alternatives(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["jobs", "demo", "--server", "http://x:1", "--storage-backend=local", "--local-storage-dir=/tmp"]
    code, err = _fails(argv, capsys)
    assert code == 2 and "--server" in err and "--storage-backend" in err


def test_storage_flag_errors_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _fails(["clusters", "--storage-backend=local"], capsys)
    assert code == 2 and "--local-storage-dir" in err
    code, err = _fails(["clusters", "--storage-backend=ftp"], capsys)
    assert code == 2 and "ftp" in err


def test_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_BACKEND", raising=False)
    code, err = _fails(["clusters", "--server", "http://127.0.0.1:1"], capsys)
    assert code == 1 and "cannot reach the history server at http://127.0.0.1:1" in err


def test_both_environment_sources_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_HISTORY_SERVER", "http://127.0.0.1:1")
    monkeypatch.setenv("STORAGE_BACKEND", "local")
    code, err = _fails(["clusters"], capsys)
    assert code == 2 and "RAY_HISTORY_SERVER" in err and "STORAGE_BACKEND" in err


def test_quickstart_missing_module_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_main, "QUICKSTART_MODULE", "runtime.no_such_quickstart")
    code, err = _fails(["quickstart", "--anything"], capsys)
    assert code == 1
    assert "quickstart is not available" in err and "runtime.no_such_quickstart" in err


def test_other_commands_do_not_import_quickstart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "QUICKSTART_MODULE", "runtime.no_such_quickstart")
    parser = cli_main.build_parser(["jobs", "demo"])
    args = parser.parse_args(["jobs", "demo"])
    assert args.command == "jobs" and args.session == "latest" and args.namespace == "default"
