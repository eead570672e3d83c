"""Why a sweep's NCCL parameters did nothing, in one wording for the sweep's heading, its report
and ``best_env.sh``."""

from __future__ import annotations

__all__ = ["nccl_inactive_reason"]


def nccl_inactive_reason(nproc_per_node: int | None) -> str:
    """Why NCCL was inactive in a sweep whose trials ran ``nproc_per_node`` processes each (None:
    not recorded): one process per trial makes no collectives; several ran on the gloo backend
    (no CUDA, or NCCL not available)."""
    return "one process per trial, so no collectives" if nproc_per_node == 1 else "gloo backend"
