"""Every HTTP backend's connections reset on close (SO_LINGER on, 0 s).

Why (runtime/storage/sockets.py): a request given up on during a network partition
must be discarded with its socket, not retransmitted by the kernel from an orphaned
socket and stored after newer content. Each test drives a real store against the
repo's emulator (fake-gcs-server, moto, Azurite) and inspects the sockets it used:
every TCP connection this process holds to the emulator, found through
/proc/self/fd, whatever library opened it. fake-gcs-server and Azurite keep
connections alive, so the store's pool still holds them after the calls; moto's
server speaks HTTP/1.0 and closes each one, so for S3 the sockets are looked at
while a download's response body is still unread (botocore's after-call event).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.oauth2.credentials import Credentials as UserCredentials

from runtime.storage.errors import PermanentStorageError
from runtime.storage.gcs import GCSSettings, GCSStore
from runtime.storage.requests_adapter import AbortOnCloseAdapter
from runtime.storage.retry import RetryPolicy
from runtime.storage.sockets import ABORT_ON_CLOSE
from tests.integration.emulators.base import ProcessEmulator
from tests.integration.emulators.registry import EmulatorPool

RETRY = RetryPolicy(attempts=2, initial_delay=0.05, max_delay=0.2, deadline=10)
ABORT = struct.unpack("ii", ABORT_ON_CLOSE[2])
#: Above every backend's single-request limit (GCS 1 MiB, Azure 1 MiB blocks, S3's
#: multipart threshold), so the chunked upload path runs too.
BIG = 9 * 1024 * 1024


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorPool]:
    emulators = EmulatorPool(tmp_path_factory.mktemp("emulators"))
    yield emulators
    emulators.stop_all()


def tcp_sockets_to(port: int) -> dict[int, tuple[int, int, int]]:
    """This process's TCP sockets connected to 127.0.0.1:port: fd -> (l_onoff, l_linger, TCP_NODELAY)."""
    found: dict[int, tuple[int, int, int]] = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            # A duplicate of the descriptor: closing it leaves the store's socket open.
            with socket.socket(fileno=os.dup(fd)) as sock:
                if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                    continue
                if sock.getpeername() != ("127.0.0.1", port):
                    continue
                linger = sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.calcsize("ii"))
                nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                found[fd] = (*struct.unpack("ii", linger), nodelay)
        except OSError:  # closed meanwhile, or not connected
            continue
    return found


@pytest.mark.integration  # starts the emulators
@pytest.mark.parametrize("backend", ["gcs", "s3", "azureblob"])
def test_connections_reset_on_close(backend: str, pool: EmulatorPool, tmp_path: Path) -> None:
    emulator = pool.get(backend)
    assert isinstance(emulator, ProcessEmulator)
    bucket = f"t-{uuid.uuid4().hex[:20]}"
    emulator.create_bucket(bucket)
    before = set(tcp_sockets_to(emulator.port))  # the set-up client's, if it pools any

    big = tmp_path / "big.log"
    big.write_bytes(os.urandom(BIG))
    with emulator.make_store(bucket, retry=RETRY) as store:  # built from env, as production does
        during: dict[int, tuple[int, int, int]] = {}
        if backend == "s3":

            def snapshot(**_: object) -> None:
                during.update(tcp_sockets_to(emulator.port))

            store._client.meta.events.register("after-call.s3.GetObject", snapshot)
        store.put_bytes("small", b"x" * 1000)
        store.put_file("big", big)
        assert store.get_bytes("small") == b"x" * 1000
        assert store.stat("big").size == BIG

        during.update(tcp_sockets_to(emulator.port))
        used = {fd: opts for fd, opts in during.items() if fd not in before}
        assert used, f"the {backend} store kept no connection to its emulator open to inspect"
        assert all(opts[:2] == ABORT for opts in used.values()), (
            f"{backend}: SO_LINGER (on, seconds) per socket should all be {ABORT}: {used}"
        )
        # The libraries' own default stays: the option is added, not swapped in.
        assert all(opts[2] for opts in used.values()), f"{backend}: TCP_NODELAY lost: {used}"


def test_gcs_with_application_default_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Off the emulator the client still runs on ADC (here a user-credentials file)
    and ADC's project, through the session that carries the option. No request is made."""
    key = tmp_path / "adc.json"
    key.write_text(
        json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "s", "refresh_token": "r"})
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "adc-project")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_API_USE_CLIENT_CERTIFICATE", raising=False)

    with GCSStore(GCSSettings(bucket="ray-history")) as store:
        client = store._client
        assert client.project == "adc-project"
        assert isinstance(client._credentials, UserCredentials)
        assert client._http.credentials is client._credentials
        for prefix in ("https://", "http://"):
            assert isinstance(client._http.get_adapter(prefix + "storage.googleapis.com/"), AbortOnCloseAdapter)


def test_gcs_without_credentials_is_a_permanent_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    with pytest.raises(PermanentStorageError, match="no usable Google credentials"):
        GCSStore(GCSSettings(bucket="ray-history"))
