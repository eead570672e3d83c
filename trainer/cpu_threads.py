"""How many intra-op threads each rank of a CPU run uses: one rule for single-process runs and
for every rank of a launched job.

The rule: ``training.cpu_threads`` (``--cpu-threads N``) when it is >= 1; with 0 (the default,
``auto``) the cores this process may run on divided by the ranks sharing the host, at least 1.
Several ranks each taking every core oversubscribe the host: OpenMP workers spin while they
wait for a core, and one step can take many times longer than with one thread per core.
"""

from __future__ import annotations

import os

AUTO = 0
"""``training.cpu_threads`` value that selects the rule (``cores // ranks``)."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else
    ``os.cpu_count()``), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def cpu_threads_per_rank(requested: int, local_ranks: int, cores: int | None = None) -> int:
    """Intra-op threads of one rank.

    Args:
        requested: ``training.cpu_threads``: >= 1 is taken as given; 0 (:data:`AUTO`) applies
            the rule ``max(1, cores // local_ranks)``.
        local_ranks: ranks sharing this host (>= 1).
        cores: cores of the host, or None for :func:`available_cores`.

    Raises:
        ValueError: ``requested`` below 0 or ``local_ranks`` below 1.
    """
    if requested < 0 or local_ranks < 1:
        raise ValueError(f"cpu threads: expected requested >= 0 and local_ranks >= 1, got {requested}, {local_ranks}")
    if requested >= 1:
        return requested
    return max(1, (available_cores() if cores is None else cores) // local_ranks)


def describe_cpu_threads(requested: int, local_ranks: int, setting: str = "training.cpu_threads") -> str:
    """Words for the opening line, e.g. ``"1 CPU thread per rank (training.cpu_threads)"``
    (``setting``: what set ``requested`` when it is >= 1, e.g. ``"--cpu-threads"``)."""
    n = cpu_threads_per_rank(requested, local_ranks)
    source = setting if requested >= 1 else f"{available_cores()} cores // {local_ranks} rank{'s' if local_ranks != 1 else ''}"
    return f"{n} CPU thread{'s' if n != 1 else ''} per rank ({source})"


def apply_cpu_threads(requested: int, local_ranks: int) -> int:
    """Set torch's intra-op thread count of this process by :func:`cpu_threads_per_rank`;
    returns it."""
    import torch

    n = cpu_threads_per_rank(requested, local_ranks)
    torch.set_num_threads(n)
    return n
