"""TCP ports of a job's rendezvous: a free one now, and whether a given one is taken.

Stdlib only, so that a launcher can pick and check its rendezvous port without loading torch
(:mod:`trainer.parallel.local_launch`); :mod:`trainer.parallel.dist_env` re-exports both.
"""

from __future__ import annotations

import errno
import socket

from trainer.contract.errors import LaunchError

__all__ = ["check_port_free", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now (the kernel's choice for port 0).

    Another process may take it before it is used: its user must cope with that
    (:mod:`trainer.parallel.local_launch` starts its ranks again on a new port when rank 0
    cannot bind the one it was given).

    Raises:
        LaunchError: if ``host`` cannot be bound at all.
    """
    try:
        with socket.socket(_family(host), socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    except OSError as exc:
        raise LaunchError(f"{host}: cannot open a TCP socket ({exc.strerror or exc})") from None


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise LaunchError(f"{host}: cannot resolve host name ({exc.strerror or exc})") from None


def check_port_free(host: str, port: int) -> None:
    """Raise if a process on this machine already listens on ``host:port``.

    The test binds the address with ``SO_REUSEADDR`` (as the rendezvous store does), so a
    port held only by connections in TIME_WAIT counts as free. A ``host`` that is not an
    address of this machine cannot be checked here and passes.

    Raises:
        LaunchError: ``"127.0.0.1:29500 is already in use (another job?); choose another
            distributed.master_port or use 0 for an automatic free port"``, or a privileged
            port this user may not bind.
    """
    assert 0 < port <= 65535, f"port {port} out of range"
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LaunchError(
                    f"{host}:{port} is already in use (another job?); choose another "
                    f"distributed.master_port or use 0 for an automatic free port"
                ) from None
            if exc.errno == errno.EACCES:
                raise LaunchError(
                    f"{host}:{port}: permission denied (ports below 1024 need root); choose "
                    f"another distributed.master_port"
                ) from None
            # EADDRNOTAVAIL and the like: the address belongs to another machine.
