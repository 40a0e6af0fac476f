"""``ray-history gc`` on a local directory: flags, live check against a stub API server,
deletion order, a run interrupted midway, and that it runs without ``rich``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from runtime.cli import main as cli_main
from runtime.cli.errors import CliError
from runtime.cli.gc import _WrittenSinceScanError, delete_session, parse_age, scan
from runtime.cli.live_clusters import list_live_clusters
from runtime.storage.errors import PermanentStorageError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from runtime.storage.retention import select
from tests.unit.server.live.k8s_stub import api_stub, raycluster

REPO = Path(__file__).resolve().parents[3]
DAY = 86400.0
DEMO = ClusterRef("default", "raycluster-demo")
GONE = ClusterRef("team-a", "gone")
S1 = "session_2026-01-01_00-00-00_000001_1"
S2 = "session_2026-02-01_00-00-00_000001_1"
NODE = "ab" * 28


def _write_session(root: Path, cluster: ClusterRef, session: str, age_days: float, *, layout: KeyLayout) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    store = LocalStore(root)
    keys = [
        layout.log_key(cluster, session, NODE, "raylet.out"),
        layout.log_key(cluster, session, NODE, "events/event_GCS.log"),
        layout.node_events_key(cluster, session, NODE, f"{NODE}-2026-01-01-00-1.jsonl"),
        layout.job_events_key(cluster, session, NODE, "01000000", f"{NODE}-2026-01-01-00-2.jsonl.gz"),
        layout.endpoint_key(cluster, session, "/api/jobs/"),
        layout.marker_key(cluster, session),
    ]
    when = time.time() - age_days * DAY
    for key in keys:
        store.put_bytes(key, b"" if "cluster-metadata" in key else b"data")
        os.utime(root / key, (when, when))
    return keys


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _gc(root: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, object]]]:
    code = cli_main.main(["gc", "--storage-backend=local", f"--local-storage-dir={root}", "--json", *args])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return code, lines


# ----------------------------------------------------------------- --older-than
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("1d12h", 1.5 * DAY), ("36h", 1.5 * DAY), ("90m", 5400.0), ("2.5s", 2.5), ("0.5d", DAY / 2)],
)
def test_ages(text: str, seconds: float) -> None:
    assert parse_age(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "problem"), [("30", "give a unit"), ("0d", "longer than zero"), ("", "empty"),
                                               ("30 days", "not a duration"), ("d", "not a duration")])  # fmt: skip
def test_bad_ages(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_age(text)


@pytest.mark.parametrize("text", ["30.", "+30", "3e1", "3_0", "1d30", "1d+30", " 30 ", "inf", "-inf", "nan", "1e400"])
def test_a_number_without_a_unit_is_refused_however_it_is_spelt(text: str) -> None:
    # float() reads all of these; as seconds, "30." would delete every ended session at once.
    with pytest.raises(ValueError, match="give a unit"):
        parse_age(text)


@pytest.mark.parametrize("text", ["36501d", "1000000d", "876601h", "9" * 400 + "d"])
def test_an_age_beyond_a_century_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"at most 36500d"):
        parse_age(text)


def test_the_longest_age_still_gives_a_cutoff() -> None:
    assert parse_age("36500d") == 36500 * DAY


@pytest.mark.parametrize("value", ["30.", "+30", "3e1", "3_0", "inf", "nan", "1000000d"])
def test_unusable_ages_are_flag_errors_and_delete_nothing(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_session(tmp_path, DEMO, S1, 1 / 24, layout=KeyLayout())  # ended an hour ago
    _write_session(tmp_path, DEMO, S2, 1 / 24, layout=KeyLayout())
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", f"--older-than={value}"])
    assert exited.value.code == 2
    assert f"--older-than={value}: " in capsys.readouterr().err
    assert _files(tmp_path) == before


def test_bad_flags_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--older-than", "30"], "--older-than=30: give a unit"),
        ([], "the following arguments are required: --older-than"),
        (["--older-than", "30d", "--live-check", "k8s"], "argument --live-check: invalid choice"),
        (["--older-than", "30d", "--kubeconfig", "x"], "--kubeconfig=x is for --live-check kubernetes"),
    ]:
        with pytest.raises(SystemExit) as exited:
            cli_main.main(["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", *argv])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------ selection
def test_deletes_exactly_the_ended_old_sessions_and_dry_run_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = KeyLayout("hist")
    old_ended = _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    running = _write_session(tmp_path, DEMO, S2, 40, layout=layout)  # newest: may be running
    young_ended = _write_session(tmp_path, GONE, S1, 10, layout=layout)
    _write_session(tmp_path, GONE, S2, 5, layout=layout)
    foreign = tmp_path / "other-root/cluster-history/raycluster/default/raycluster-demo" / S1 / "x"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"not ours")
    before = _files(tmp_path)

    code, dry = _gc(tmp_path, "--older-than=30d", "--dry-run", "--storage-root-dir=hist", capsys=capsys)
    assert code == 0
    assert _files(tmp_path) == before
    actions = {(row["cluster"], row["session"]): row["action"] for row in dry}
    assert actions == {
        ("raycluster-demo", S1): "would delete",
        ("raycluster-demo", S2): "kept",
        ("gone", S1): "kept",
        ("gone", S2): "kept",
    }
    assert all(row["reason"] for row in dry)

    code, done = _gc(tmp_path, "--older-than=30d", "--storage-root-dir=hist", capsys=capsys)
    assert code == 0
    assert [row["session"] for row in done if row["action"] == "deleted"] == [S1]
    assert _files(tmp_path) == before - set(old_ended)
    assert set(running) <= _files(tmp_path) and set(young_ended) <= _files(tmp_path)


def test_table_output_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_session(tmp_path, DEMO, S1, 40, layout=KeyLayout())
    _write_session(tmp_path, DEMO, S2, 40, layout=KeyLayout())
    argv = ["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--older-than=30d", "--dry-run"]
    assert cli_main.main(argv) == 0
    captured = capsys.readouterr()
    header, first, second = captured.out.splitlines()
    assert header.split()[:3] == ["ACTION", "CLUSTER", "SESSION"]
    assert first.startswith("would delete") and f"a newer session of the cluster exists ({S2})" in first
    assert second.startswith("kept") and "liveness was not checked" in second
    assert "1 kept, 1 would delete" in captured.err


# --------------------------------------------------------------- live check
def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": url}}],
                "users": [{"name": "gc", "user": {"token": "gc-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "stub", "user": "gc"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_live_check_lists_every_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = [raycluster(f"c{i}", "ns") for i in range(7)]
    monkeypatch.setattr("runtime.cli.live_clusters.PAGE_SIZE", 3)
    with api_stub(*clusters) as stub:
        live = list_live_clusters(str(_kubeconfig(tmp_path / "kc", stub.url)))
    assert live == {("ns", f"c{i}") for i in range(7)}
    assert [q.get("continue") for _, q, _ in stub.requests] == [None, ["3"], ["6"]]


@pytest.mark.parametrize(("status", "message"), [(403, "needs list on rayclusters.ray.io"), (500, "answered 500")])
def test_live_check_failures_are_errors_not_an_empty_set(tmp_path: Path, status: int, message: str) -> None:
    with api_stub(raycluster("demo")) as stub:
        stub.fail_status = status
        with pytest.raises(CliError, match=f"--live-check=kubernetes: listing rayclusters.ray.io: .*{message}"):
            list_live_clusters(str(_kubeconfig(tmp_path / "kc", stub.url)))


def test_live_check_unreachable_or_unconfigured(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="is unreachable"):
        list_live_clusters(str(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")))
    with pytest.raises(CliError, match=r"--kubeconfig=.*cannot configure the Kubernetes client"):
        list_live_clusters(str(tmp_path / "missing"))


def test_gc_with_live_check_ends_sessions_of_clusters_that_are_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "bucket"
    running = _write_session(store_dir, DEMO, S1, 40, layout=KeyLayout())
    gone = _write_session(store_dir, GONE, S1, 40, layout=KeyLayout())
    with api_stub(raycluster("raycluster-demo")) as stub:
        kubeconfig = _kubeconfig(tmp_path / "kc", stub.url)
        code, rows = _gc(
            store_dir, "--older-than=30d", "--live-check=kubernetes", f"--kubeconfig={kubeconfig}", capsys=capsys
        )
    assert code == 0
    reasons = {row["cluster"]: (row["action"], row["reason"]) for row in rows}
    assert reasons["gone"] == ("deleted", reasons["gone"][1])
    assert "RayCluster team-a/gone is not live" in reasons["gone"][1]
    assert reasons["raycluster-demo"] == ("kept", "running: the newest session of a live RayCluster")
    assert _files(store_dir) == set(running)
    assert not set(gone) & _files(store_dir)


def test_gc_fails_without_deleting_when_the_live_check_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "bucket"
    _write_session(store_dir, GONE, S1, 40, layout=KeyLayout())
    before = _files(store_dir)
    with api_stub() as stub:
        stub.fail_status = 403
        with pytest.raises(SystemExit) as exited:
            kubeconfig = _kubeconfig(tmp_path / "kc", stub.url)
            cli_main.main(["gc", "--storage-backend=local", f"--local-storage-dir={store_dir}", "--older-than=30d",
                           "--live-check=kubernetes", f"--kubeconfig={kubeconfig}"])  # fmt: skip
    assert exited.value.code == 1
    assert "answered 403" in capsys.readouterr().err
    assert _files(store_dir) == before


# ------------------------------------------------------------------ deletion
class RecordingStore(LocalStore):
    """Records deletes; with ``fail_after``, the n-th and later deletes fail."""

    def __init__(self, root: Path, fail_after: int | None = None) -> None:
        super().__init__(root)
        self.deleted: list[str] = []
        self.fail_after = fail_after
        self._lock = threading.Lock()

    def _delete(self, key: str) -> None:
        with self._lock:
            if self.fail_after is not None and len(self.deleted) >= self.fail_after:
                raise PermanentStorageError("injected", backend="local", bucket="t", key=key)
            self.deleted.append(key)
        super()._delete(key)


def _cutoff(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def test_every_object_goes_and_the_marker_first(tmp_path: Path) -> None:
    layout = KeyLayout()
    keys = _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    store = RecordingStore(tmp_path)
    (record,) = scan(store, layout)
    assert delete_session(store, layout, record, _cutoff(30)) == len(keys)
    assert sorted(store.deleted) == sorted(keys)
    assert store.deleted[0] == layout.marker_key(DEMO, S1)
    assert _files(tmp_path) == set()


def test_a_run_stopped_midway_leaves_an_unlisted_session_the_next_run_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = KeyLayout()
    keys = _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    _write_session(tmp_path, DEMO, S2, 40, layout=layout)
    flaky = RecordingStore(tmp_path, fail_after=2)  # the third delete fails
    decisions = select(scan(flaky, layout), cutoff=_cutoff(30))
    ended = next(d for d in decisions if d.delete)
    with pytest.raises(PermanentStorageError):
        delete_session(flaky, layout, ended.record, _cutoff(30))
    left = _files(tmp_path)
    assert layout.marker_key(DEMO, S1) not in left  # no longer listed by the server
    assert set(keys) & left  # ... though some of its objects remain
    # The next scan finds it by its cluster-history objects alone, still ended and old.
    leftover = next(r for r in scan(LocalStore(tmp_path), layout) if r.session == S1)
    assert not leftover.has_marker and leftover.objects == len(set(keys) & left)
    code, rows = _gc(tmp_path, "--older-than=30d", capsys=capsys)
    assert code == 0
    assert [(r["session"], r["action"]) for r in rows] == [(S1, "deleted"), (S2, "kept")]
    assert not any(S1 in path for path in _files(tmp_path))


def test_a_marker_is_deleted_under_the_key_it_was_listed_by(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The kind segment is read case-insensitively; the key rebuilt from the parsed
    # marker ("raycluster") is not the stored one ("RayCluster").
    layout = KeyLayout()
    store = LocalStore(tmp_path)
    capitalised = f"cluster-metadata/RayCluster/{DEMO.namespace}_{DEMO.name}/{S1}"
    both = [capitalised, layout.marker_key(DEMO, S1), f"cluster-metadata/RayCluster/{DEMO.namespace}_{DEMO.name}/{S2}"]
    when = time.time() - 40 * DAY
    for key in both:
        store.put_bytes(key, b"")
        os.utime(tmp_path / key, (when, when))
    code, rows = _gc(tmp_path, "--older-than=30d", capsys=capsys)
    assert code == 0
    assert [(r["session"], r["action"]) for r in rows] == [(S1, "deleted"), (S2, "kept")]
    assert _files(tmp_path) == {both[2]}


def test_a_failed_delete_is_reported_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    _write_session(tmp_path, DEMO, S1, 40, layout=KeyLayout())
    _write_session(tmp_path, DEMO, S2, 40, layout=KeyLayout())
    monkeypatch.setattr(LocalStore, "_delete", RecordingStore(tmp_path, fail_after=0)._delete)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(
            ["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--older-than=30d", "--json"]
        )
    captured = capsys.readouterr()
    assert exited.value.code == 1
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert rows[0]["action"] == "failed" and "deleting failed" in rows[0]["reason"]
    assert "1 session(s) not deleted" in captured.err


def test_a_session_written_to_since_the_scan_is_kept(tmp_path: Path) -> None:
    layout = KeyLayout()
    _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    store = LocalStore(tmp_path)
    (record,) = scan(store, layout)
    store.put_bytes(layout.log_key(DEMO, S1, NODE, "late.log"), b"shipped late")
    with pytest.raises(_WrittenSinceScanError, match=r"late\.log was written after the cutoff"):
        delete_session(store, layout, record, _cutoff(30))
    assert len(_files(tmp_path)) == 7


# ------------------------------------------------------------ server image
def test_gc_runs_without_rich(tmp_path: Path) -> None:
    """The CronJob runs ``ray-history gc`` in the server image: [server] extra, no rich."""
    _write_session(tmp_path, DEMO, S1, 40, layout=KeyLayout())
    _write_session(tmp_path, DEMO, S2, 40, layout=KeyLayout())
    script = (
        "import sys; sys.modules['rich'] = None\n"
        "from runtime.cli.main import main\n"
        f"code = main(['gc', '--storage-backend=local', '--local-storage-dir={tmp_path}', '--older-than=30d'])\n"
        "assert not [m for m in sys.modules if m.startswith(('flask', 'runtime.server'))], 'heavy imports'\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "deleted" in done.stdout and "1 deleted, 1 kept" in done.stderr


def test_json_lines_are_written_as_each_session_is_done(tmp_path: Path) -> None:
    """The CronJob's Job has an activeDeadlineSeconds: a run killed there (SIGTERM, then
    SIGKILL) must have logged every session it deleted until then, so each JSON line is
    flushed as its session is done. SIGKILL at the second delete stands in for the kill;
    stdout is a pipe, so a line left in Python's buffer would be lost."""
    other = ClusterRef("team-a", "other")
    for cluster in (DEMO, other):
        _write_session(tmp_path, cluster, S1, 40, layout=KeyLayout())
        _write_session(tmp_path, cluster, S2, 40, layout=KeyLayout())
    script = (
        "import os, signal\n"
        "import runtime.cli.gc as gc\n"
        "real, calls = gc.delete_session, []\n"
        "def killed_at_the_second(*args, **kwargs):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 2:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(*args, **kwargs)\n"
        "gc.delete_session = killed_at_the_second\n"
        "from runtime.cli.main import main\n"
        f"main(['gc', '--storage-backend=local', '--local-storage-dir={tmp_path}', '--older-than=30d', '--json'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == -9, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    deleted = [(row["namespace"], row["cluster"], row["session"]) for row in rows if row["action"] == "deleted"]
    assert len(deleted) == 1, done.stdout
    assert not any(deleted[0][2] in path and deleted[0][1] in path for path in _files(tmp_path))


# ------------------------------------------------------------ what gc must survive
def test_a_key_the_tool_cannot_delete_fails_its_session_whole_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log named with a backslash (legal in every bucket, refused by our key rules)
    used to stop the run at that session, after its marker was gone, on every run: the
    namespaces sorting after it were never cleaned again."""
    layout = KeyLayout()
    first, later = ClusterRef("aaa", "c"), ClusterRef("zzz", "c")
    odd = _write_session(tmp_path, first, S1, 40, layout=layout)
    _write_session(tmp_path, first, S2, 40, layout=layout)
    cleaned = _write_session(tmp_path, later, S1, 40, layout=layout)
    _write_session(tmp_path, later, S2, 40, layout=layout)
    bad = tmp_path / layout.session_prefix(first, S1) / NODE / "logs" / "a\\b.log"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"x")
    when = time.time() - 40 * DAY
    os.utime(bad, (when, when))

    with pytest.raises(SystemExit) as exited:
        _gc(tmp_path, "--older-than=30d", capsys=capsys)
    assert exited.value.code == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    actions = {(row["namespace"], row["session"]): (row["action"], row["reason"]) for row in rows}
    action, reason = actions["aaa", S1]
    assert action == "failed" and "holds a key this tool cannot delete" in reason
    assert actions["zzz", S1][0] == "deleted"
    assert set(odd) <= _files(tmp_path)  # whole, marker included: still listed
    assert not set(cleaned) & _files(tmp_path)


def test_a_missing_backend_setting_is_a_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("GCS_BUCKET", "STORAGE_BUCKET", "AZURE_STORAGE_CONTAINER", "AZURE_STORAGE_ACCOUNT_URL"):
        monkeypatch.delenv(name, raising=False)
    for argv in (
        ["gc", "--older-than=1d", "--storage-backend=gcs"],
        ["export", "--namespace=default", "--cluster=c", "--session=latest", "--storage-backend=gcs", "-o",
         str(tmp_path / "a.tar")],
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            cli_main.main(argv)
        assert exited.value.code == 2, argv
        err = capsys.readouterr().err
        assert "bucket" in err.lower() and "Traceback" not in err, err


def test_a_dry_run_never_creates_the_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "mistyped"
    with pytest.raises(SystemExit) as exited:
        cli_main.main(
            ["gc", "--storage-backend=local", f"--local-storage-dir={missing}", "--older-than=30d", "--dry-run",
             "--create-bucket"]
        )  # fmt: skip
    assert exited.value.code == 1
    assert not missing.exists()
    assert "storage is not usable" in capsys.readouterr().err
