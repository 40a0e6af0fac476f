"""The quickstart's flag validation and port checks (no Ray needed)."""

from __future__ import annotations

import argparse
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.quickstart import add_arguments, run
from runtime.quickstart.options import OptionsError, options_from_args
from runtime.quickstart.ports import PortInUseError, check_ports_free, free_port, port_in_use
from runtime.quickstart.workload import short_error


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on, on loopback only (as Ray's processes do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_defaults_are_the_documented_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = options_from_args(parse())
    assert options.storage_dir == tmp_path / ".ray-history"
    assert (options.cluster_name, options.namespace) == ("quickstart", "default")
    assert options.ports_by_flag() == {
        "--gcs-port": 6379,
        "--dashboard-port": 8265,
        "--events-port": 8084,
        "--port": 8080,
    }
    assert options.serve is True


def test_no_serve_has_an_alias() -> None:
    assert parse("--no-serve").serve is False
    assert parse("--exit-after-ready").serve is False


@pytest.mark.parametrize("value", ["0", "65536", "http", "-1"])
def test_a_bad_port_is_refused_by_name(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(f"--events-port={value}")
    assert exited.value.code == 2
    assert "--events-port" in capsys.readouterr().err


def test_two_flags_with_one_port_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="--port and --dashboard-port are both 28265"):
        options_from_args(parse("--dashboard-port=28265", "--port=28265", f"--storage-dir={tmp_path}"))


def test_a_port_in_rays_worker_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=r"--gcs-port=16379 is inside Ray's worker port range 10002-19999"):
        options_from_args(parse("--gcs-port=16379", f"--storage-dir={tmp_path}"))
    # The history server starts after Ray is gone: any port will do.
    assert options_from_args(parse("--port=18080", f"--storage-dir={tmp_path}")).server_port == 18080


@pytest.mark.parametrize(("flag", "value"), [("--cluster-name", "Quick_Start"), ("--namespace", "a/b")])
def test_a_bad_name_is_refused_by_flag(flag: str, value: str, tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=flag):
        options_from_args(parse(f"{flag}={value}", f"--storage-dir={tmp_path}"))


def test_storage_dir_must_be_a_directory(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(OptionsError, match=r"--storage-dir: .* is not a directory"):
        options_from_args(parse(f"--storage-dir={a_file}"))


def test_ray_temp_dir_must_be_short_and_empty(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=r"--ray-temp-dir: .* characters long"):
        options_from_args(parse(f"--ray-temp-dir=/tmp/{'x' * 60}", f"--storage-dir={tmp_path}"))
    used = Path(tempfile.mkdtemp(prefix="rqu-", dir="/tmp"))
    try:
        (used / "old").write_text("x")
        with pytest.raises(OptionsError, match=r"--ray-temp-dir: .* is not empty"):
            options_from_args(parse(f"--ray-temp-dir={used}", f"--storage-dir={tmp_path}"))
    finally:
        shutil.rmtree(used)


def test_port_in_use_sees_a_loopback_listener(listening: int) -> None:
    assert port_in_use(listening)
    assert not port_in_use(free_port())


def test_check_ports_free_names_every_taken_flag(listening: int) -> None:
    with pytest.raises(PortInUseError) as refused:
        check_ports_free({"--dashboard-port": listening, "--port": free_port()})
    message = str(refused.value)
    assert f"port {listening} (--dashboard-port) is already in use" in message
    assert "--dashboard-port=<free port>" in message and "(--port)" not in message


def test_run_refuses_a_taken_port_before_starting_anything(
    listening: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(f"--events-port={listening}", f"--storage-dir={tmp_path / 'store'}", "--port=28081")
    assert run(args) == 2
    captured = capsys.readouterr()
    assert f"port {listening} (--events-port) is already in use" in captured.err
    assert "Starting a Ray head" not in captured.out


def test_run_reports_a_bad_flag_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(parse("--cluster-name=Bad_Name", f"--storage-dir={tmp_path}")) == 2
    assert "quickstart: error: --cluster-name" in capsys.readouterr().err


def test_short_error_finds_the_exception_line_among_forwarded_worker_output() -> None:
    message = (
        "Job entrypoint command failed with exit code 1, last available logs:\n"
        '  File "x.py", line 3, in f\n'
        "ray.exceptions.RayTaskError(ValueError): ray::validate-batch-2() (pid=1, ip=127.0.0.1)\n"
        "ValueError: reading -7.5 in batch 2 is negative\n"
        "\x1b[36m(validate-batch-3 pid=20645)\x1b[0m validate_batch: checking 5 readings of batch 3\n"
    )
    assert short_error(message) == "ValueError: reading -7.5 in batch 2 is negative"
    assert short_error("just a line\n\n") == "just a line"
    assert short_error("") == ""
