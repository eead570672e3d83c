"""The deliberate faults of the ``faults`` block (:class:`~trainer.contract.config.FaultsConfig`): the
phase slow-downs a :class:`~trainer.train.timing.PhaseTimer` applies and the step faults
(simulated OOM, crash, hang) a trainer raises at their step, on the ranks they apply to."""

from __future__ import annotations

import time

import torch

from trainer.contract.config import FaultsConfig
from trainer.train.timing import PhaseFaults

__all__ = ["inject_step_faults", "phase_faults"]


def phase_faults(faults: FaultsConfig, rank: int) -> PhaseFaults | None:
    """The phase slow-downs of ``faults`` for ``rank``, or None where they do not apply.

    ``faults.ranks`` was checked against the world size with the other world-size rules
    (:func:`trainer.contract.world.check_world_size`).
    """
    if not faults.applies_to(rank):
        return None
    return PhaseFaults(data_delay_ms=faults.data_delay_ms, compute_slowdown=faults.compute_slowdown)


def inject_step_faults(faults: FaultsConfig, rank: int, step: int) -> None:
    """The step faults of ``faults`` due at ``step`` on ``rank``.

    Raises:
        torch.OutOfMemoryError: at ``faults.oom_at_step`` (a simulated CUDA OOM).
        RuntimeError: at ``faults.crash_at_step``.

    At ``faults.hang_at_step`` it prints one line and never returns.
    """
    if not faults.applies_to(rank):
        return
    if faults.oom_at_step == step:
        raise torch.OutOfMemoryError(f"CUDA out of memory. (simulated by faults.oom_at_step={step} on rank {rank})")
    if faults.crash_at_step == step:
        raise RuntimeError(f"simulated crash (faults.crash_at_step={step} on rank {rank})")
    if faults.hang_at_step == step:
        print(f"rank {rank}: hanging at step {step} (faults.hang_at_step)", flush=True)
        while True:
            time.sleep(3600)
