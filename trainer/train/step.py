"""The training step as one interface: a :class:`Step` runs one optimiser step of its trainer.

The :class:`~trainer.train.loop.Trainer` composes one Step, chosen in one place
(:func:`trainer.train.step_choice.choose_step`), and its loop calls :meth:`Step.advance` once per
step; records, snapshots and tracing are the loop's, not the step's. The steps:

==========================  =====================================  ===========================================
step                        module                                 runs when
==========================  =====================================  ===========================================
``DynamicStep``             :mod:`trainer.train.dynamic_step`      ``training.cuda_graphs`` ``dynamic``, or
                                                                   ``auto`` where capture is blocked
``FixedCapacityStep``       :mod:`trainer.train.fixed_step`        ``off`` (eager); ``on`` and ``auto`` on
                                                                   CUDA captured in a CUDA graph
                                                                   (:mod:`trainer.train.capture`)
``DataParallelStep``        :mod:`trainer.parallel.data_step`      ``parallel.mode`` ``data``
``SubgridStep``             :mod:`trainer.parallel.subgrid_step`   ``parallel.mode`` ``subgrid``
==========================  =====================================  ===========================================

They share their phases (:mod:`trainer.train.phases`, :mod:`trainer.train.inputs`,
:mod:`trainer.train.optimization`, :mod:`trainer.train.batch_size`) and differ in how they size
their batch, where their counts live (host or device) and which collectives they run.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, NamedTuple

import torch

from trainer.train.records import Interval

__all__ = ["Step", "StepOutcome", "StepStats"]


@dataclasses.dataclass
class StepStats:
    """Host-side numbers of one step (zeros for a step whose counts stay on the device)."""

    n_rays: int
    n_samples: int
    skipped: bool
    trained: bool = True  # False when the step had no sample to train on (loss undefined)


class StepOutcome(NamedTuple):
    """What one step hands the loop: host stats, the loss and the MSE (0-dim device tensors)."""

    stats: StepStats
    loss: torch.Tensor
    mse: torch.Tensor


class Step(abc.ABC):
    """One optimiser step of a trainer, and what the trainer's loop asks of it.

    Attributes:
        prefetches: the step takes its input from the trainer's prefetcher
            (``training.prefetch_march``); a step that never waits for the host has nothing to
            prepare ahead and the trainer keeps no prefetcher for it.
    """

    prefetches = False

    @abc.abstractmethod
    def advance(self) -> StepOutcome:
        """Run one step, the occupancy update at its cadence included, and count it in the
        trainer's ``step``.

        Raises:
            TrainingError: training cannot go on (no sample hit an occupied cell after the
                occupancy warm-up; fp16 overflowing step after step).
        """

    def startup_steps(self) -> int:
        """Steps run before the training clock starts (:mod:`trainer.train.startup`): one, which
        compiles the kernels and runs the first occupancy pass."""
        return 1

    def settle(self) -> None:
        """Finish host bookkeeping left for later (before a record or a checkpoint); nothing by
        default."""

    def interval_values(self, interval: Interval, elapsed_s: float, record: dict[str, Any]) -> dict[str, Any]:
        """The step's own metrics columns for ``interval`` (``elapsed_s`` seconds, the common
        columns already in ``record``); they replace or extend the common ones."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The step's own state for snapshots (empty: none beyond the trainer's)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def forget_graph(self) -> None:
        """The tensors the step reads are about to be replaced (snapshot load, warm start): drop
        whatever holds on to them (a captured CUDA graph)."""

    def close(self) -> None:
        """Release what the step holds (background work, hooks)."""
