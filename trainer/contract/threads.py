"""How many intra-op threads each process of a CPU run uses, and the words that say so: one rule
for training (one process, or each rank of a job), render and export, and for the driver's
commands that start them (``ngptune profile``, ``ngptune train-many``), whose first lines name it.

The rule: ``training.cpu_threads`` (``--cpu-threads N``) when it is >= 1, taken as given; with 0
(the default, ``auto``) the cores this process may run on, less the cores other processes keep
busy, divided by the ranks sharing the host, at least 1. Several ranks each taking every core
oversubscribe the host, and so does a process taking every core of a host others keep busy:
OpenMP workers spin while they wait for a core, and one step takes many times longer (on 2 cores
at a load of 4, a trainer's start-up took 353 s with 2 threads and 8 s with 1).

The busy cores (:func:`host_load`): the host's 1-minute load average (``os.getloadavg``) less this
process's own part of it (its CPU seconds over that minute), no more than the threads of other
processes that are runnable now (``/proc/loadavg``: a load that lingers in the average after its
processes ended, such as the previous job of a sequence, keeps no core busy), the share of it on
this process's cores when it may run on only some of the host's, rounded. The first line of each
command says the count and, when the load lowered it, the load: ``1 CPU thread per rank (2 cores,
load 3.8)``. :data:`LOAD_ENV` replaces the measured load (0: an idle host).

Stdlib only: the driver reads it through the contract.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

from trainer.contract.textlines import counted

__all__ = ["AUTO", "LOAD_ENV", "CpuThreads", "HostLoad", "available_cores", "cpu_threads", "cpu_threads_per_rank",
           "describe_cpu_threads", "host_load", "runnable_others"]

AUTO = 0
"""``training.cpu_threads`` value that selects the rule (the cores free of other work // ranks)."""

LOAD_ENV = "TRAINER_HOST_LOAD"
"""Environment variable: the load other processes put on the host (a number >= 0, in runnable
threads as a load average counts them), used instead of the measured one; 0 counts the host as
idle (the test suite sets it so; a run that wants every core whatever the load gives
``training.cpu_threads``)."""

LOAD_WINDOW_S = 60.0
"""The span of the load average the rule reads (the 1-minute one), s."""

RUNNABLE_SAMPLES = 3
"""Looks at the threads runnable now (the most of them counts), :data:`RUNNABLE_GAP_S` apart."""

RUNNABLE_GAP_S = 0.005


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else
    ``os.cpu_count()``), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class HostLoad:
    """What other processes ask of the host's CPUs.

    Attributes:
        average: the host's 1-minute load average, as ``uptime`` shows it (or :data:`LOAD_ENV`'s).
        busy_cores: the cores of this process's that other processes keep busy (module docstring).
    """

    average: float
    busy_cores: int


IDLE = HostLoad(0.0, 0)


def _rounded(value: float) -> int:
    """``value`` to the nearest integer, halves up (``round`` takes 2.5 to 2)."""
    return max(0, math.floor(value + 0.5))


def runnable_others() -> int | None:
    """The threads of other processes runnable now: the most of :data:`RUNNABLE_SAMPLES` looks at
    the fourth field of ``/proc/loadavg`` (runnable/total, this reading thread included) less this
    one; None where there is no such file."""
    seen = []
    for i in range(RUNNABLE_SAMPLES):
        if i:
            time.sleep(RUNNABLE_GAP_S)
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                seen.append(int(f.read().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            return None
    return max(0, max(seen) - 1)


def host_load(cores: int | None = None) -> HostLoad:
    """The host's load and the cores of ``cores`` (default :func:`available_cores`) that other
    processes keep busy (module docstring); :data:`IDLE` where the OS gives no load average.

    Raises:
        ValueError: :data:`LOAD_ENV` is set to something other than a number >= 0.
    """
    cores = available_cores() if cores is None else cores
    given = os.environ.get(LOAD_ENV, "").strip()
    if given:
        try:
            average = float(given)
        except ValueError:
            average = -1.0
        if not average >= 0:
            raise ValueError(f"{LOAD_ENV}={given!r}: expected a load average >= 0")
        return HostLoad(average, min(cores, _rounded(average)))
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return IDLE
    spent = os.times()
    own = min(average, (spent.user + spent.system) / LOAD_WINDOW_S)  # this process's part of the average
    others = average - own
    runnable = runnable_others()
    if runnable is not None:
        others = min(others, runnable)
    share = min(1.0, cores / max(os.cpu_count() or cores, 1))  # the part of the host this process may run on
    return HostLoad(average, min(cores, _rounded(others * share)))


@dataclasses.dataclass(frozen=True)
class CpuThreads:
    """The intra-op threads of one rank and why.

    Attributes:
        count: threads (>= 1).
        words: the first line's words, e.g. ``2 CPU threads per rank (2 cores // 1 rank)``,
            ``1 CPU thread per rank (2 cores, load 3.8)``, ``3 CPU threads per rank (--cpu-threads)``;
            no bracket inside another.
    """

    count: int
    words: str


def cpu_threads(requested: int, local_ranks: int, setting: str = "training.cpu_threads", cores: int | None = None,
                load: HostLoad | None = None) -> CpuThreads:
    """The threads of one rank by the rule (module docstring) and the words that say so.

    Args:
        requested: ``training.cpu_threads``: >= 1 is taken as given up to the host's cores (more
            is capped there, and the words say so); 0 (:data:`AUTO`) applies the rule
            ``max(1, (cores - busy cores) // local_ranks)``.
        local_ranks: ranks sharing this host (>= 1).
        setting: what set ``requested`` when it is >= 1, for the words (e.g. ``--cpu-threads``).
        cores: cores of the host, or None for :func:`available_cores`.
        load: the host's load, or None for :func:`host_load` (read only for the rule).

    Raises:
        ValueError: ``requested`` below 0 or ``local_ranks`` below 1; a bad :data:`LOAD_ENV`.
    """
    if requested < 0 or local_ranks < 1:
        raise ValueError(f"cpu threads: expected requested >= 0 and local_ranks >= 1, got {requested}, {local_ranks}")
    cores = available_cores() if cores is None else cores
    if requested > cores:  # more threads than cores only slow this rank and everything else on the host
        return CpuThreads(cores, f"{counted(cores, 'CPU thread')} per rank ({setting} {requested}, "
                                 f"capped at the host's {counted(cores, 'core')})")
    if requested >= 1:
        return CpuThreads(requested, f"{counted(requested, 'CPU thread')} per rank ({setting})")
    load = host_load(cores) if load is None else load
    idle = max(1, cores // local_ranks)
    free = max(1, cores - load.busy_cores)
    n = max(1, free // local_ranks)
    ranks = counted(local_ranks, "rank")
    if n >= idle:
        return CpuThreads(idle, f"{counted(idle, 'CPU thread')} per rank ({cores} cores // {ranks})")
    why = f"{cores} cores, load {load.average:.1f}" + (f": {free} free // {ranks}" if local_ranks > 1 else "")
    return CpuThreads(n, f"{counted(n, 'CPU thread')} per rank ({why})")


def cpu_threads_per_rank(requested: int, local_ranks: int, cores: int | None = None,
                         load: HostLoad | None = None) -> int:
    """The count of :func:`cpu_threads` (same arguments; raises the same)."""
    return cpu_threads(requested, local_ranks, cores=cores, load=load).count


def describe_cpu_threads(requested: int, local_ranks: int, setting: str = "training.cpu_threads") -> str:
    """The words of :func:`cpu_threads` for the first line of a command, e.g. ``1 CPU thread per
    rank (training.cpu_threads)``; raises as it does."""
    return cpu_threads(requested, local_ranks, setting).words
