"""The collectives the distributed trainers and their steps run, for one rank of a job (or rank 0
of 1 without a process group, where each is the identity on this rank's values).

Collectives go through the collective device (:func:`~trainer.parallel.grad_sync.collective_device`:
the rank's GPU with NCCL, the CPU with gloo).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from trainer.parallel.grad_sync import collective_device

__all__ = ["RankGroup", "rank_and_world"]


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class RankGroup:
    """This rank's view of the job's process group.

    Args:
        rank: this process's rank.
        world_size: processes in the job (1: no collective runs).
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    @property
    def distributed(self) -> bool:
        """Whether there are several ranks."""
        return self.world_size > 1

    def comm_device(self) -> torch.device:
        """Where collective buffers live (the CPU with one rank)."""
        return collective_device() if self.distributed else torch.device("cpu")

    def all_gather_rows(self, values: list[float]) -> torch.Tensor:
        """[world_size, len(values)] float64 on the CPU: every rank's ``values`` in rank order."""
        local = torch.tensor(values, dtype=torch.float64, device=self.comm_device())
        if not self.distributed:
            return local.unsqueeze(0).cpu()
        rows = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(rows, local)
        return torch.stack(rows).cpu()

    def all_reduce_(self, tensor: torch.Tensor, op: Any) -> torch.Tensor:
        """All-reduce ``tensor`` in place with ``op`` (a ``dist.ReduceOp``); returns it."""
        if self.distributed:
            dist.all_reduce(tensor, op=op)
        return tensor

    def all_reduce_density(self, sigma: torch.Tensor, op: Any) -> torch.Tensor:
        """Occupancy densities [N] all-reduced with ``op`` across ranks (through the collective
        device), on ``sigma``'s device."""
        sigma = sigma.contiguous()
        if self.distributed:
            on_comm = sigma.to(self.comm_device())
            dist.all_reduce(on_comm, op=op)
            sigma = on_comm.to(sigma.device)
        return sigma

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            dist.barrier()

    def broadcast_result(self, result: dict[str, Any] | None) -> dict[str, Any]:
        """Rank 0's ``result`` (a picklable dict) on every rank."""
        if not self.distributed:
            return result or {}
        box = [result]
        dist.broadcast_object_list(box, src=0)
        return box[0]
