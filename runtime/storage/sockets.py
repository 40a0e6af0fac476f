"""Socket options every storage backend's HTTP connections carry.

``SO_LINGER`` on, 0 s: closing a connection resets it (RST) and drops whatever the
kernel still holds unsent or unacknowledged, instead of the default graceful close.
Why: during a network partition an upload on a keep-alive connection sits
unacknowledged in the send queue. When the caller gives up (timeout) or the process
exits, a graceful close leaves an orphaned socket that the kernel keeps
retransmitting for up to ~100 s (``tcp_orphan_retries``). If storage comes back in
that window it receives the whole stale request and stores it, after the restarted
collector already uploaded the newer, longer content: the object silently goes back
to older bytes and nobody re-sends it. With an abortive close a request we gave up
on is discarded, never delivered late. (A close after a complete response loses
nothing: the server has answered; it only skips TIME_WAIT.)

Only stdlib and urllib3 here: the S3 backend does not load ``requests``.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from urllib3.connection import HTTPConnection

#: One (level, option, value) entry for urllib3's ``socket_options``: struct linger {on, 0 s}.
ABORT_ON_CLOSE: tuple[int, int, bytes] = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

SocketOption = tuple[int, int, int | bytes]


def with_abort_on_close(options: Iterable[SocketOption]) -> list[SocketOption]:
    """``options`` (kept, e.g. TCP_NODELAY) plus :data:`ABORT_ON_CLOSE`, once."""
    kept = [opt for opt in options if opt[:2] != ABORT_ON_CLOSE[:2]]
    return [*kept, ABORT_ON_CLOSE]


#: urllib3's defaults (TCP_NODELAY) plus the abortive close: for pools we build ourselves.
SOCKET_OPTIONS: list[SocketOption] = with_abort_on_close(HTTPConnection.default_socket_options)
