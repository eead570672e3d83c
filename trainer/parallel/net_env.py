"""The communication libraries' environment: socket interface names checked against the host,
and the ``NCCL_*`` / ``GLOO_*`` variables every rank must agree on.

``NCCL_SOCKET_IFNAME`` (NCCL's environment-variable documentation): a comma-separated list of
interface-name prefixes (``eth`` matches ``eth0``, ``eth1``); ``=`` before the list makes every
entry an exact name; ``^`` before it (also ``^=``) excludes the listed interfaces instead, and
NCCL uses the others; an entry may end in ``:port``. ``GLOO_SOCKET_IFNAME`` (PyTorch's
distributed documentation): a comma-separated list of exact interface names.

Stdlib only.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

from trainer.contract.errors import ConfigError, LaunchError

__all__ = ["COMM_ENV_PREFIXES", "check_same_comm_env", "check_socket_ifnames", "comm_env", "host_interfaces",
           "matching_interfaces"]

COMM_ENV_PREFIXES = ("NCCL_", "GLOO_")
"""Variables that shape collectives: a rank with other values than its peers can hang NCCL."""


def host_interfaces() -> list[str]:
    """Names of this host's network interfaces (``socket.if_nameindex``), sorted."""
    return sorted(name for _, name in socket.if_nameindex())


def matching_interfaces(variable: str, value: str, interfaces: Sequence[str]) -> list[str]:
    """The interfaces of ``interfaces`` that ``value`` of ``variable`` selects (module docstring:
    NCCL's prefix, ``=`` exact and ``^`` exclusion syntax; Gloo's exact names)."""
    text = value.strip()
    if variable.startswith("GLOO_"):
        wanted = {name.strip() for name in text.split(",") if name.strip()}
        return [i for i in interfaces if i in wanted]
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [entry.split(":", 1)[0].strip() for entry in text.split(",") if entry.strip()]

    def listed(interface: str) -> bool:
        return any(interface == n if exact else interface.startswith(n) for n in names)

    return [i for i in interfaces if listed(i) != exclude]


def check_socket_ifnames(environ: Mapping[str, str], interfaces: Sequence[str] | None = None) -> None:
    """Refuse an ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` that selects no interface of this
    host (``interfaces``, default :func:`host_interfaces`), before any rank starts.

    Raises:
        ConfigError: naming the variable, its value and the host's interfaces.
    """
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = environ.get(variable)
        if value is None or not value.strip():
            continue
        found = host_interfaces() if interfaces is None else list(interfaces)
        if not matching_interfaces(variable, value, found):
            raise ConfigError(f"{variable}={value!r} selects no network interface of {socket.gethostname()}; "
                              f"its interfaces: {', '.join(found) or 'none'}")


def comm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``NCCL_*`` and ``GLOO_*`` variables of ``environ``."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(COMM_ENV_PREFIXES)}


def check_same_comm_env(per_rank: Sequence[Mapping[str, str]]) -> None:
    """Refuse a job whose ranks (``per_rank[r]``: rank r's :func:`comm_env`) differ in a variable.
    Interface names (``*_SOCKET_IFNAME``) may differ between hosts and are not compared.

    Raises:
        LaunchError: naming the first differing variable and which ranks hold which value.
    """
    names = sorted({k for env in per_rank for k in env if not k.endswith("_SOCKET_IFNAME")})
    for name in names:
        values: dict[str, list[int]] = {}
        for rank, env in enumerate(per_rank):
            values.setdefault(env.get(name, "(unset)"), []).append(rank)
        if len(values) > 1:
            held = "; ".join(f"rank{'s' if len(r) > 1 else ''} {','.join(map(str, r))}: {v!r}" for v, r in values.items())
            raise LaunchError(f"{name} differs across ranks ({held}): NCCL can hang when ranks disagree; "
                              "give every rank the same environment")
