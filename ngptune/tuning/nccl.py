"""The NCCL variables a sweep may set, and the ones it never touches (DESIGN.md §5).

NCCL reads its environment once, when a communicator is created, so every NCCL setting is a
property of a whole trial (a fresh launch with its own environment), never of a step.

Allow-list (anything else is rejected when the study file is loaded, before any launch):

    NCCL_ALGO            Ring, Tree
    NCCL_PROTO           Simple, LL            (never LL128: forcing it can corrupt data on some
                                                topologies; NCCL picks it itself where it is safe)
    NCCL_MIN_NCHANNELS   integer 1..32
    NCCL_MAX_NCHANNELS   integer 1..32
    NCCL_BUFFSIZE        bytes, a power of two from 1 MiB to 16 MiB
    NCCL_NTHREADS        64, 128, 256, 512

``NCCL_NVLS_ENABLE`` is always 0 in a trial (NVLink SHARP multicast stays off) and cannot be
swept. ``NCCL_P2P_DISABLE`` / ``NCCL_SHM_DISABLE`` belong to ``distributed.emulate_interconnect``.
Site variables (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``, ...) describe the cluster: they pass from
the sweep's environment to every trial unchanged and are never swept or written to
``best_env.sh``. ``NCCL_DEBUG`` is the sweep's own (INFO, for the read-back below).

Read-back: with ``NCCL_DEBUG=INFO`` NCCL logs ``NCCL INFO NCCL_ALGO set by environment to Ring``
for every variable it took from the environment; :func:`parse_applied` collects those.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ngptune.errors import NcclValueError

__all__ = [
    "ALLOWED",
    "DEBUG_VARIABLES",
    "FORCED",
    "SITE_VARIABLES",
    "NcclValueError",
    "check_nccl_name",
    "check_nccl_value",
    "describe_allowed",
    "is_nccl_name",
    "parse_applied",
    "trial_env",
]

MIB = 1 << 20

# Variable → the values the tuner may set (ints are compared as ints).
ALLOWED: dict[str, tuple[object, ...]] = {
    "NCCL_ALGO": ("Ring", "Tree"),
    "NCCL_PROTO": ("Simple", "LL"),
    "NCCL_MIN_NCHANNELS": tuple(range(1, 33)),
    "NCCL_MAX_NCHANNELS": tuple(range(1, 33)),
    "NCCL_BUFFSIZE": tuple(MIB << k for k in range(5)),  # 1, 2, 4, 8, 16 MiB
    "NCCL_NTHREADS": (64, 128, 256, 512),
}

# Set in every trial's environment, whatever the study says.
FORCED: dict[str, str] = {"NCCL_NVLS_ENABLE": "0"}

# Describe the cluster, not the tuning: passed through from the environment, never swept.
SITE_VARIABLES: tuple[str, ...] = (
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_TC",
    "NCCL_IB_SL",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_TOPO_FILE",
    "NCCL_CROSS_NIC",
)

# Set by the sweep for the read-back of applied values: NCCL_DEBUG=INFO in every NCCL trial, and
# no NCCL_DEBUG_FILE / NCCL_DEBUG_SUBSYS from the environment (the INFO lines must reach the rank logs).
DEBUG_VARIABLES: tuple[str, ...] = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")

_EMULATION_VARIABLES = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")
_APPLIED = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+)")


def is_nccl_name(name: str) -> bool:
    """Whether ``name`` is an NCCL environment variable name (``NCCL_`` prefix)."""
    return name.startswith("NCCL_")


def describe_allowed(name: str) -> str:
    """The allowed values of an allow-listed variable, as a short phrase."""
    values = ALLOWED[name]
    if name == "NCCL_BUFFSIZE":
        return "a power of two from 1 MiB to 16 MiB in bytes (" + ", ".join(str(v) for v in values) + ")"
    if name.endswith("NCHANNELS"):
        return "an integer in [1, 32]"
    return "one of " + ", ".join(str(v) for v in values)


def check_nccl_name(name: str) -> None:
    """Raise :class:`NcclValueError` unless the tuner may set variable ``name``."""
    if name in ALLOWED:
        return
    if name in FORCED:
        raise NcclValueError(f"{name} is always {FORCED[name]} in a trial and cannot be tuned")
    if name in SITE_VARIABLES:
        raise NcclValueError(
            f"{name} is a site variable: it passes from the environment to every trial unchanged and is never swept"
        )
    if name in DEBUG_VARIABLES:
        raise NcclValueError(f"{name} is set by the sweep (NCCL_DEBUG=INFO) to read back the values NCCL applied")
    if name in _EMULATION_VARIABLES:
        raise NcclValueError(
            f"{name} is not a tuning knob; use distributed.emulate_interconnect (pcie, sockets) to emulate another link"
        )
    raise NcclValueError(f"{name} is not on the NCCL allow-list ({', '.join(ALLOWED)})")


def check_nccl_value(name: str, value: object) -> None:
    """Raise :class:`NcclValueError` unless the tuner may set ``name`` to ``value``.

    Integers must be integers (``true`` and ``8.0`` are not); ``LL128`` is refused by name.
    """
    check_nccl_name(name)
    if name == "NCCL_PROTO" and isinstance(value, str) and value.upper() == "LL128":
        raise NcclValueError("NCCL_PROTO=LL128 is never forced (NCCL enables it only where it is safe)")
    allowed = ALLOWED[name]
    if isinstance(value, bool) or not any(type(value) is type(a) and value == a for a in allowed):
        raise NcclValueError(f"{name}: expected {describe_allowed(name)}, got {value!r}")


def trial_env(base: Mapping[str, str], nccl_env: Mapping[str, str], *, nccl_active: bool) -> dict[str, str]:
    """A trial's environment: ``base`` (the sweep's) without the allow-listed and debug NCCL
    variables (the tuner's own), plus ``nccl_env`` and :data:`FORCED`; ``NCCL_DEBUG=INFO`` when
    NCCL is active (read-back). Site variables pass through unchanged."""
    env = {k: v for k, v in base.items() if k not in ALLOWED and k not in DEBUG_VARIABLES}
    env.update(nccl_env)
    env.update(FORCED)
    if nccl_active:
        env["NCCL_DEBUG"] = "INFO"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_applied(log_paths: Iterable[Path]) -> dict[str, str]:
    """NCCL variables NCCL reported as taken from the environment (``NCCL_DEBUG=INFO`` lines
    ``... NCCL_<X> set by environment to <value>``) in the given logs; missing files are skipped.

    Returns:
        variable → value as NCCL printed it (the first report of each variable).
    """
    applied: dict[str, str] = {}
    for path in log_paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in _APPLIED.finditer(text):
            applied.setdefault(match.group(1), match.group(2).rstrip(".,;"))
    return applied
