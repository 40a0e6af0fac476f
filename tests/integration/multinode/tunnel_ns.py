"""Inside a namespace: a Unix socket whose connections are spliced to ``host:port``
(the namespace side of :class:`~tests.integration.multinode.netns.Tunnel`).

``python -m tests.integration.multinode.tunnel_ns SOCKET HOST PORT``
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from tests.integration.multinode.netns import serve


def main() -> None:
    path, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.tmp"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(64)
    os.replace(tmp, path)  # appears only once it accepts
    serve(listener, lambda: socket.create_connection((host, port), timeout=10), threading.Event())


if __name__ == "__main__":
    main()
