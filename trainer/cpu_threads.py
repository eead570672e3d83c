"""The intra-op threads of this process on a CPU, set by the rule of
:mod:`trainer.contract.threads` (``training.cpu_threads``, else the cores free of other work //
the ranks on the host): one rule for single-process runs, every rank of a launched job, render and
export. The count is chosen once; the words the first line prints come with it.
"""

from __future__ import annotations

from trainer.contract.threads import CpuThreads, cpu_threads

__all__ = ["apply_cpu_threads"]


def apply_cpu_threads(requested: int, local_ranks: int, setting: str = "training.cpu_threads") -> CpuThreads:
    """Set torch's intra-op thread count of this process by
    :func:`trainer.contract.threads.cpu_threads` and return that choice (its ``count``, and the
    ``words`` the first line says it with).

    Raises:
        ValueError: as :func:`~trainer.contract.threads.cpu_threads`.
    """
    import torch

    chosen = cpu_threads(requested, local_ranks, setting)
    torch.set_num_threads(chosen.count)
    return chosen
