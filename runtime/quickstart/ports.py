"""Port checks done before anything starts, so a taken port is refused with the
flag that chooses it instead of a half-started cluster."""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping


class PortInUseError(Exception):
    """One or more ports the quickstart needs are taken; the message names the flags."""


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:  # noqa: S104 - probing every interface on purpose
    """Whether binding ``host:port`` fails because something holds it.

    Binding the wildcard address also fails when another process listens on
    only one interface (e.g. 127.0.0.1), which is what the Ray processes do.
    ``SO_REUSEADDR`` keeps sockets in TIME_WAIT from counting as taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def check_ports_free(ports_by_flag: Mapping[str, int]) -> None:
    """Raise :class:`PortInUseError` listing every taken port with its flag."""
    taken = [(flag, port) for flag, port in ports_by_flag.items() if port_in_use(port)]
    if not taken:
        return
    lines = [f"  port {port} ({flag}) is already in use" for flag, port in taken]
    hint = " ".join(f"{flag}=<free port>" for flag, _ in taken)
    raise PortInUseError(
        "cannot start: " + ("a port is" if len(taken) == 1 else "ports are") + " taken\n" + "\n".join(lines) + "\n"
        f"stop what uses it (another Ray: `ray stop`; another quickstart: Ctrl-C it) or choose others: {hint}"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for Ray's internal ports nobody types)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
