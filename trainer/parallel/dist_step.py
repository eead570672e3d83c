"""What the data-parallel and subgrid steps share: every step's row of per-rank counts, gathered
from all ranks, summed over the logging interval into the job's columns.

Every rank's record carries the job's throughput (sums over ranks, rates over the interval's
timed steps) beside its own rates (``rank_*``); ``imbalance`` (the slowest rank's compute time over
the mean, :func:`~trainer.parallel.balance.imbalance`) is the job's.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.parallel.balance import imbalance
from trainer.train.records import Interval
from trainer.train.step import Step

__all__ = ["DistributedStep"]


class DistributedStep(Step):
    """A distributed step's interval counts (module docstring).

    Args:
        trainer: the distributed trainer (rank, world size, process group, field, parts).
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.counts = self.new_counts()

    @staticmethod
    def new_counts() -> dict[str, float]:
        """Empty interval sums."""
        return {"global_rays": 0.0, "global_samples": 0.0, "imbalance": 0.0, "comm_bytes": 0.0, "steps": 0.0}

    def account(self, rows: torch.Tensor, comm_bytes: int = 0) -> list[float]:
        """Add one step's gathered rows ([world_size, ≥ 3] on the CPU; columns: rays, samples,
        compute ms, ...) to the interval; returns the per-rank compute ms."""
        times = rows[:, 2].tolist()
        self.counts["global_rays"] += float(rows[:, 0].sum())
        self.counts["global_samples"] += float(rows[:, 1].sum())
        self.counts["imbalance"] += imbalance(times)
        self.counts["comm_bytes"] += comm_bytes
        self.counts["steps"] += 1
        return times

    def interval_values(self, interval: Interval, elapsed_s: float, record: dict[str, Any]) -> dict[str, Any]:
        """``imbalance`` and the job's rays and samples per step and per second (from the gathered
        rows, on every rank; the rank's own rates stay in ``rank_*``). The interval's sums start
        again."""
        counts, self.counts = self.counts, self.new_counts()
        steps = max(counts["steps"], 1.0)
        timed = interval.timed / max(interval.steps, 1)
        return {
            "imbalance": counts["imbalance"] / steps,
            "rays_per_step": counts["global_rays"] / steps,
            "samples_per_step": counts["global_samples"] / steps,
            "rays_per_s": counts["global_rays"] * timed / elapsed_s,
            "throughput_samples_per_s": counts["global_samples"] * timed / elapsed_s,
        }
