"""The distributed trainer for ``parallel.mode``: data parallel or subgrid (DESIGN.md §3)."""

from __future__ import annotations

from trainer.contract.config import TrainConfig
from trainer.data import Scene
from trainer.data.images import PixelTable
from trainer.parallel.subgrid_train import SubgridTrainer
from trainer.parallel.trainer import DataParallelTrainer, DistributedTrainerBase
from trainer.contract.rundir import RunDir

__all__ = ["build_distributed_trainer"]


def build_distributed_trainer(
    cfg: TrainConfig, scene: Scene, run_dir: RunDir | None = None, pixel_table: PixelTable | None = None
) -> DistributedTrainerBase:
    """The trainer for ``parallel.mode``: :class:`~trainer.parallel.trainer.DataParallelTrainer` or
    :class:`~trainer.parallel.subgrid_train.SubgridTrainer` (process group already initialised)."""
    if cfg.parallel.mode == "subgrid":
        return SubgridTrainer(cfg, scene, run_dir, pixel_table)
    return DataParallelTrainer(cfg, scene, run_dir, pixel_table)
