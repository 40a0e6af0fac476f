"""Linux network namespaces for a two-node Ray cluster on one machine.

Three namespaces per run, all named ``rhmn-<run>-*``: ``head`` and ``worker``
(one Ray node and its collector each) and ``switch``, which holds the bridge both
veth pairs are plugged into. Every interface and every address (198.51.100.0/24,
RFC 5737's documentation range) is created *inside* those namespaces: the root
namespace gets nothing, and no namespace has a default route, so nothing can leave.
Deleting the namespaces deletes the veths and the bridge with them.

Privileges: root, or passwordless ``sudo`` (GitHub's ubuntu runners). Without root,
only the namespace commands run through ``sudo -n``; the processes inside drop back
to the caller's uid/gid (``setpriv``), so the test can signal them and delete their
files.

The test process itself stays in the root namespace. It reaches an address inside
through :class:`Tunnel` (a Unix socket is not bound to a network namespace).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.integration.emulators.base import REPO_ROOT, free_port

SUBNET_BITS = 24
HEAD_IP = "198.51.100.1"
WORKER_IP = "198.51.100.2"
LAUNCHER = Path(__file__).with_name("launch.py")


def _privilege_prefix() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def _drop_prefix() -> list[str]:
    """Inside a namespace, run as the test's own user (nothing to drop as root)."""
    if os.geteuid() == 0:
        return []
    return ["setpriv", f"--reuid={os.getuid()}", f"--regid={os.getgid()}", "--clear-groups"]


class PrivilegedCommandFailed(subprocess.CalledProcessError):
    """A failed ``ip`` (or other root) command, with what it said on stderr in its message."""

    def __str__(self) -> str:
        said = (self.stderr or "").strip()[:500]
        return f"{super().__str__()} It said: {said or '(nothing)'}"


def privileged(args: Sequence[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    command = [*_privilege_prefix(), *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise PrivilegedCommandFailed(done.returncode, command, done.stdout, done.stderr)
    return done


def unavailable_reason() -> str | None:
    """Why this machine cannot build the namespaces (None: it can). Tries for real:
    a namespace is added and deleted again."""
    missing = [tool for tool in ("ip", "setpriv") if shutil.which(tool) is None]
    if os.geteuid() != 0 and shutil.which("sudo") is None:
        missing.append("sudo")
    if missing:
        return f"needs root or passwordless sudo to create network namespaces (ip netns add); missing: {missing}"
    probe = f"rhmn-probe-{uuid.uuid4().hex[:6]}"
    try:
        added = privileged(["ip", "netns", "add", probe], check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"needs root or passwordless sudo to create network namespaces (ip netns add): {exc}"
    if added.returncode != 0:
        privileged(["ip", "netns", "del", probe], check=False)
        return (
            "needs root or passwordless sudo to create network namespaces (ip netns add); "
            f"`{' '.join([*_privilege_prefix(), 'ip', 'netns', 'add'])}` said: {added.stderr.strip()[:200]}"
        )
    privileged(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class Topology:
    """``head`` and ``worker`` namespaces on one bridge (in ``switch``)."""

    run: str

    @property
    def head(self) -> str:
        return f"rhmn-{self.run}-head"

    @property
    def worker(self) -> str:
        return f"rhmn-{self.run}-wrk"

    @property
    def switch(self) -> str:
        return f"rhmn-{self.run}-sw"

    def names(self) -> tuple[str, str, str]:
        return (self.head, self.worker, self.switch)

    def create(self) -> None:
        for name in self.names():
            privileged(["ip", "netns", "add", name])
        sw = self.switch
        privileged(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        for node, ip, port in ((self.head, HEAD_IP, "p-head"), (self.worker, WORKER_IP, "p-wrk")):
            # Both ends are created directly in their namespaces: the root namespace never sees them.
            privileged(["ip", "link", "add", "eth0", "netns", node, "type", "veth", "peer", "name", port, "netns", sw])
            privileged(["ip", "-n", sw, "link", "set", port, "master", "br0"])
            privileged(["ip", "-n", sw, "link", "set", port, "up"])
            privileged(["ip", "-n", node, "addr", "add", f"{ip}/{SUBNET_BITS}", "dev", "eth0"])
            privileged(["ip", "-n", node, "link", "set", "eth0", "up"])
            privileged(["ip", "-n", node, "link", "set", "lo", "up"])
        privileged(["ip", "-n", sw, "link", "set", "br0", "up"])

    def pids(self, name: str) -> list[int]:
        found = privileged(["ip", "netns", "pids", name], check=False)
        return [int(p) for p in found.stdout.split() if p.strip().isdigit()]

    def kill_all(self, name: str) -> None:
        """SIGKILL every process inside one namespace (a pod that is gone)."""
        pids = self.pids(name)
        if pids:
            privileged(["kill", "-KILL", *map(str, pids)], check=False)

    def destroy(self) -> None:
        for name in self.names():
            self.kill_all(name)
        for name in self.names():
            privileged(["ip", "netns", "del", name], check=False)


def new_topology() -> Topology:
    return Topology(uuid.uuid4().hex[:6])


# ------------------------------------------------------------------ processes
class NsProcess:
    """A command inside a namespace, started through ``launch.py`` (its own session,
    its pid in a file, its environment from a file: ``sudo`` would reset it)."""

    def __init__(
        self, ns: str, cmd: Sequence[str], env: dict[str, str], log_path: Path, *, cwd: Path = REPO_ROOT
    ) -> None:
        self.ns = ns
        self.cmd = list(cmd)
        self.env = env
        self.log_path = log_path
        self.cwd = cwd
        self.pid = 0
        self._wrapper: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> NsProcess:
        stem = self.log_path.with_suffix("")
        pidfile, envfile = stem.with_suffix(".pid"), stem.with_suffix(".env.json")
        pidfile.unlink(missing_ok=True)
        envfile.write_text(json.dumps(self.env))
        args = [
            *_privilege_prefix(), "ip", "netns", "exec", self.ns, *_drop_prefix(),
            sys.executable, str(LAUNCHER), str(pidfile), str(envfile), str(self.cwd), *self.cmd,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self._wrapper = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not (pidfile.exists() and pidfile.read_text().strip()):
            if self._wrapper.poll() is not None:
                raise RuntimeError(f"{self.cmd[0]} in {self.ns} exited with {self._wrapper.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.cmd} in {self.ns} did not start")
            time.sleep(0.05)
        self.pid = int(pidfile.read_text())
        return self

    def running(self) -> bool:
        return self._wrapper is not None and self._wrapper.poll() is None

    def send(self, sig: signal.Signals, *, group: bool = False) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        assert self._wrapper is not None
        return self._wrapper.wait(timeout)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0, *, group: bool = False) -> int | None:
        """``sig``, wait, then SIGKILL the whole process group; the exit code of the first stop."""
        if self._wrapper is None:
            return None
        code: int | None = None
        self.send(sig, group=group)
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self._wrapper.wait(timeout)
        self.send(signal.SIGKILL, group=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._wrapper.wait(10)
        return code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def run_in(ns: str, cmd: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """A short command inside ``ns``, to completion."""
    return subprocess.run(
        [*_privilege_prefix(), "ip", "netns", "exec", ns, *_drop_prefix(), *cmd],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def port_open(ns: str, host: str, port: int) -> bool:
    probe = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"
    return run_in(ns, [sys.executable, "-c", probe, host, str(port)]).returncode == 0


# --------------------------------------------------------------------- tunnel
def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy bytes one way until EOF, then half-close the other side."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def serve(listener: socket.socket, connect: Callable[[], socket.socket], stop: threading.Event) -> None:
    """Accept on ``listener``; splice every connection to a fresh ``connect()``."""
    listener.settimeout(0.5)
    while not stop.is_set():
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        client.settimeout(None)
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue

        def splice(a: socket.socket = client, b: socket.socket = upstream) -> None:
            pair = threading.Thread(target=pump, args=(b, a), daemon=True)
            pair.start()
            pump(a, b)
            pair.join()
            a.close()
            b.close()

        threading.Thread(target=splice, daemon=True).start()


class Tunnel:
    """``127.0.0.1:<port>`` in the root namespace -> ``host:port`` inside ``ns``:
    a TCP listener here, a Unix socket in between (``tunnel_ns.py`` inside)."""

    def __init__(self, ns: str, host: str, port: int, workdir: Path) -> None:
        self.sock_path = workdir / f"tunnel-{ns}-{port}.sock"
        self.sock_path.unlink(missing_ok=True)
        self.inner = NsProcess(
            ns,
            [sys.executable, "-m", "tests.integration.multinode.tunnel_ns", str(self.sock_path), host, str(port)],
            dict(os.environ),
            workdir / f"tunnel-{ns}-{port}.log",
        )
        self.port = free_port()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Tunnel:
        self.inner.start()
        deadline = time.monotonic() + 30
        while not self.sock_path.exists():
            if time.monotonic() > deadline or not self.inner.running():
                raise RuntimeError(f"tunnel into {self.inner.ns} did not start: {self.inner.log()}")
            time.sleep(0.05)

        def connect() -> socket.socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(self.sock_path))
            return sock

        threading.Thread(target=serve, args=(self._listener, connect, self._stop), daemon=True).start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self.inner.stop(signal.SIGKILL, timeout=5)
