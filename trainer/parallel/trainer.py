"""Distributed training: the data-parallel trainer and what it shares with the subgrid trainer
(DESIGN.md §3): rank and world size, the process group's collectives
(:mod:`trainer.parallel.collectives`), rank-0 evaluation and sharded checkpoints. The subgrid
trainer is in :mod:`trainer.parallel.subgrid_train`, the choice between them in
:mod:`trainer.parallel.build`.

Data parallel (``parallel.mode = "data"``): every rank holds the whole field and trains on its
share of the global rays; the step is :class:`~trainer.parallel.data_step.DataParallelStep`, the
subgrid trainer's :class:`~trainer.parallel.subgrid_step.SubgridStep` (both chosen by
:func:`~trainer.train.step_choice.choose_step` through :attr:`Trainer.parallel_step`).

Metrics: every rank writes ``metrics.rank<R>.jsonl``, rank 0 also ``metrics.jsonl``: the job's
throughput (sums over ranks) in ``rays_per_s`` and ``throughput_samples_per_s``, the rank's own
beside it (``rank_*``). ``loss`` and ``train_psnr_db`` are global on every rank. Evaluation and
renders run on rank 0; the others wait at a barrier.

Checkpoints (:mod:`trainer.parallel.checkpoint`) replace the single-process snapshots: every
``training.snapshot_every`` steps (``--checkpoint-every``) and at the end of the CLI run.
"""

from __future__ import annotations

import abc
import signal
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.contract.config import TrainConfig, config_to_dict
from trainer.contract.errors import SnapshotError
from trainer.contract.metrics import truncate_metrics_after
from trainer.contract.rundir import RunDir
from trainer.contract.signals import signals_held
from trainer.data import Scene
from trainer.data.images import PixelTable
from trainer.parallel import checkpoint as ckpt
from trainer.parallel.balance import LoadBalancer
from trainer.parallel.collectives import RankGroup, rank_and_world
from trainer.parallel.data_step import DataParallelStep
from trainer.parallel.grad_sync import GradientSynchronizer
from trainer.train.budget import BudgetAgreement
from trainer.train.divergence import check_state_dict
from trainer.train.hostcopy import HostCopy
from trainer.train.loop import Trainer
from trainer.train.snapshot_state import (
    check_finest_resolution, check_hash_grid, check_scene_model, hash_grid_state, restore_counters, rng_state,
    set_rng_state, warn_config_differences,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "DataParallelTrainer",
    "DistributedTrainerBase",
    "GRID_SEED_OFFSET",
]

CHECKPOINT_FORMAT = "ngptune-dist-checkpoint"
CHECKPOINT_VERSION = 1
GRID_SEED_OFFSET = 0x5EED  # occupancy-grid generator seed = training.seed + this (all ranks)
DEFAULT_KEEP_CHECKPOINTS = 3
_ADAM_KEYS = ("exp_avg", "exp_avg_sq", "step")


COMPLETE_MARKER_HINT = f"checkpoints/step_N/{ckpt.COMPLETE_MARKER} in it or below it"


class DistributedTrainerBase(Trainer, metaclass=abc.ABCMeta):
    """What the data-parallel and subgrid trainers share: rank/world size from the initialised
    process group (rank 0 of 1 without one) and its collectives (:attr:`ranks`), the shared
    occupancy-grid generator, the agreed time budget and sharded checkpoints. Their steps are
    :attr:`~trainer.train.loop.Trainer.parallel_step`.

    Args: as :class:`~trainer.train.loop.Trainer`; the process group must be initialised first
    (:func:`trainer.parallel.dist_env.init_distributed`) when there are several ranks.

    Raises:
        ConfigError: as the base trainer (the world-size rules, :func:`trainer.contract.world.check_world_size`).
    """

    mode = ""

    def __init__(self, cfg: TrainConfig, scene: Scene, run_dir: RunDir | None = None,
                 pixel_table: PixelTable | None = None) -> None:
        self.rank, self.world_size = rank_and_world()
        self.ranks = RankGroup(self.rank, self.world_size)
        super().__init__(cfg, scene, run_dir, pixel_table)
        self.grid_generator = torch.Generator(device=self.device)
        self.grid_generator.manual_seed(self.cfg.training.seed + GRID_SEED_OFFSET)
        self.keep_checkpoints = DEFAULT_KEEP_CHECKPOINTS
        self.last_checkpoint: tuple[int, Path] | None = None  # (step, folder) of the newest save
        self.budget_agreement = BudgetAgreement()
        self.budget_agreed: tuple[int, HostCopy] | None = None  # NCCL: (step, values) agreed at the last check

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def agreed_train_time_s(self) -> float:
        """Rank 0's ``train_time_s`` on every rank (an all-reduce at a metrics record, where the
        device is synchronised anyway; every rank calls it at the same steps): the clock of rank
        0's metrics records, which a sweep reads, and of the checkpoints, which a resume starts
        from."""
        if not self.distributed:
            return super().agreed_train_time_s()
        value = torch.tensor([self.train_time_s if self.rank == 0 else 0.0], dtype=torch.float64,
                             device=self.ranks.comm_device())
        return float(self.ranks.all_reduce_(value, dist.ReduceOp.SUM).item())

    def time_budget_spent(self, time_budget_s: float) -> bool:
        """All ranks stop together, within one step of the budget: at the checks of
        :class:`~trainer.train.budget.BudgetAgreement` (rare far from the budget, every step near
        it) the ranks agree on the slowest rank's projected training time
        (:meth:`~trainer.train.loop.Trainer.projected_train_time_s`) and the longest expected step.
        Over NCCL the decision uses the values agreed at the previous check, carried forward by
        that step per step since, so the check never waits for the GPU."""
        if not self.distributed:
            return super().time_budget_spent(time_budget_s)
        if not self.budget_agreement.due(self.step):
            return False
        spent = torch.tensor([self.projected_train_time_s(), self.step_durations.longest_s()], dtype=torch.float64,
                             device=self.ranks.comm_device())
        agreed = HostCopy(self.ranks.all_reduce_(spent, dist.ReduceOp.MAX))
        if spent.device.type != "cuda":
            values = (self.step, *agreed.value().tolist())
        else:  # NCCL: the previous check's copy has landed by now; this one is read at the next check
            previous, self.budget_agreed = self.budget_agreed, (self.step, agreed)
            values = None if previous is None else (previous[0], *previous[1].value().tolist())
        return self.budget_agreement.decide(self.step, values, time_budget_s)

    # ------------------------------------------------------------------ checkpoints
    @abc.abstractmethod
    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        """Checkpoint names → this rank's model tensors (live, so loading fills them in place)."""

    @abc.abstractmethod
    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        """Checkpoint names (without the ``optimizer.`` prefix) → this rank's trained parameters."""

    def checkpoint_meta(self) -> dict[str, Any]:
        """The checkpoint's ``meta.json`` (the modes add their own entries)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "mode": self.mode,
            "step": self.step,
            "world_size": self.world_size,
            "config": config_to_dict(self.cfg),
            "scaler": self.scaler.state_dict(),
            "trainer_state": {
                "n_rays": self.n_rays,
                "samples_per_ray_ema": self.samples_per_ray_ema,
                "train_time_s": self.train_time_s,
                "finest_resolution": self.finest_resolution,
                "scene_model": self.scene_model,
                "hash_grid": hash_grid_state(self.hash_grid),
            },
        }

    def rank_state(self) -> dict[str, Any]:
        """This rank's random states (``rank<R>.pt``), the shared occupancy-grid generator's too."""
        return rng_state(self, grid_generator=self.grid_generator.get_state())

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """Everything tensor-valued a checkpoint holds for this rank: ``model``/``boxes`` entries,
        ``optimizer.<param>.<exp_avg|exp_avg_sq|step>`` (Adam, by parameter name, so they re-map
        to any rank that holds the parameter) and ``occupancy.<density|bitfield>``."""
        tensors = dict(self.named_model_tensors())
        for name, p in self.named_parameters_for_optimizer().items():
            state = self.optimizer.state.get(p, {})
            for key in _ADAM_KEYS:
                if key in state:
                    tensors[f"optimizer.{name}.{key}"] = state[key]
        for name, buf in self.grid.state_dict().items():
            tensors[f"occupancy.{name}"] = buf
        return tensors

    def save_checkpoint(self, folder: Path | None = None) -> Path:
        """Write a sharded checkpoint (collective; see :mod:`trainer.parallel.checkpoint`) and
        keep the newest ``keep_checkpoints``. Default folder: ``checkpoints/step_<N>``.

        Raises:
            SnapshotError: with neither ``folder`` nor a run directory.
            DivergedError: this rank's model holds a NaN or infinite tensor (nothing is written:
                the newest checkpoint stays the run's model).
        """
        check_state_dict(self.named_model_tensors(), self.step)
        self.stepper.settle()  # batch size and balancer state as of this step
        if folder is None:
            if self.run_dir is None:
                raise SnapshotError("save_checkpoint: no folder given and the trainer has no run directory")
            folder = ckpt.checkpoint_dir(self.run_dir, self.step)
        path = ckpt.save_checkpoint(folder, self.checkpoint_tensors(), self.rank_state(), self.checkpoint_meta(), rank=self.rank)
        if self.rank == 0:
            ckpt.prune_checkpoints(Path(folder).parent, self.keep_checkpoints)
        self.last_checkpoint = (self.step, path)
        return path

    def periodic_save(self) -> None:
        """The checkpoint written every ``snapshot_every`` steps. A Ctrl-C or SIGTERM that arrives
        while it is written waits for its end and then acts (its handler runs): inside, torch's
        distributed checkpoint catches the KeyboardInterrupt of a rank's own write and waits on
        peers that have stopped. A write that fails while such a signal is held (its peers stopped
        for the same signal) ends as that signal, not as the collective's error."""
        with signals_held() as noted:
            try:
                self.save_checkpoint()
            except Exception:
                if not noted:
                    raise
        if noted:
            signal.raise_signal(noted[0])

    def load_checkpoint(self, path: Path) -> Path:
        """Resume from the newest complete checkpoint at ``path`` (a checkpoint folder, a
        ``checkpoints`` folder or a run directory); collective. Works with another world size:
        every rank loads the tensors it holds now; per-rank random states of ranks that did not
        exist are left freshly seeded; load-balancer shares of another world size are reset.

        Returns:
            The checkpoint folder used.

        Raises:
            SnapshotError: no complete checkpoint; another mode; a missing entry or another shape.
        """
        folder = ckpt.latest_checkpoint(Path(path))
        if folder is None:
            path = Path(path)
            if not path.exists():
                raise SnapshotError(f"{path}: not found (--resume takes a run directory or a checkpoint folder "
                                    "of a distributed run)")
            if path.is_file():
                raise SnapshotError(f"{path}: a single-process snapshot; a distributed run resumes from the "
                                    "checkpoints of a distributed run (its run directory or a checkpoints/step_N "
                                    "folder); resume this file without --nproc-per-node")
            hint = ""
            if list((path / "snapshots").glob("step_*.pt")):
                hint = ("; its snapshots/ hold single-process snapshots: resume them without --nproc-per-node")
            raise SnapshotError(f"{path}: no complete checkpoint found (looked for {COMPLETE_MARKER_HINT}){hint}")
        meta = ckpt.load_meta(folder)
        if self.rank == 0:
            for skipped in ckpt.skipped_incomplete(folder):
                warnings.warn(f"{skipped}: incomplete checkpoint (no {ckpt.COMPLETE_MARKER} marker: the run stopped "
                              f"while writing it) skipped; resuming from {folder.name}", stacklevel=2)
        if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
            raise SnapshotError(f"{folder}: not an ngptune distributed checkpoint of version {CHECKPOINT_VERSION}")
        if meta["mode"] != self.mode:
            raise SnapshotError(
                f"{folder}: checkpoint of parallel.mode {meta['mode']!r}, this run uses {self.mode!r}"
            )
        self.check_checkpoint_meta(folder, meta)
        check_finest_resolution(folder, meta.get("trainer_state"), self.finest_resolution, meta.get("config"), self.cfg)
        check_scene_model(folder, meta.get("trainer_state"), self.scene_model, meta.get("config"), self.cfg)
        check_hash_grid(folder, meta.get("trainer_state"), meta.get("config"), self.hash_grid, self.cfg)
        if self.rank == 0:  # after the refusals, which name the differences themselves
            warn_config_differences(folder, meta.get("config"), self.cfg, meta.get("trainer_state"), self.hash_grid,
                                    self.derived_settings())
        stored = ckpt.checkpoint_keys(folder)
        for name, p in self.named_parameters_for_optimizer().items():
            if f"optimizer.{name}.step" in stored and p not in self.optimizer.state:
                self.optimizer.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        wanted = {k: v for k, v in self.checkpoint_tensors().items() if not k.startswith("optimizer.") or k in stored}
        ckpt.load_tensors(folder, wanted)
        self.load_rank_state(folder, int(meta["world_size"]))
        if self.scaler.is_enabled() and meta["scaler"]:  # fp16 both then and now; else a fresh scale
            self.scaler.load_state_dict(meta["scaler"])
        state = meta["trainer_state"]
        ema = state["samples_per_ray_ema"]
        restore_counters(self, meta["step"], state, None if ema is None else float(ema))
        self.after_checkpoint_load(meta)
        if self.run_dir is not None:  # resuming into the run it came from: forget the lost steps
            truncate_metrics_after(self.run_dir.metrics_path(self.rank), self.step)
        return folder

    def check_checkpoint_meta(self, folder: Path, meta: dict[str, Any]) -> None:
        """Mode-specific checks of a checkpoint's metadata before loading."""

    def after_checkpoint_load(self, meta: dict[str, Any]) -> None:
        """Mode-specific state restored after the tensors."""

    def rank_state_source(self, saved_world_size: int) -> int | None:
        """Which rank's ``rank<R>.pt`` this rank restores its random states from."""
        return self.rank if self.rank < saved_world_size else None

    def load_rank_state(self, folder: Path, saved_world_size: int) -> None:
        """The random states of ``folder``'s checkpoint (the shared grid generator's from rank 0)."""
        source = self.rank_state_source(saved_world_size)
        shared = ckpt.load_rank_state(folder, 0)
        if shared is not None:
            self.grid_generator.set_state(shared["grid_generator"])
        state = None if source is None else ckpt.load_rank_state(folder, source)
        if state is not None:
            set_rng_state(self, state)

    def save(self, path: Path) -> Path:
        """``--save-snapshot`` in a distributed run writes a sharded checkpoint folder."""
        return self.save_checkpoint(Path(path))


class DataParallelTrainer(DistributedTrainerBase):
    """Data-parallel instant-NGP trainer (``parallel.mode = "data"``; module docstring).

    Every rank holds the whole field; rank r trains on its share of the global rays and the
    gradients are summed. With one process (no process group) it is a plain trainer with the
    global-batch rules, used as the single-process reference in tests.

    Attributes:
        balancer: the :class:`LoadBalancer` (ray shares).
        grad_sync: the :class:`GradientSynchronizer`, None with one process.
    """

    mode = "data"
    parallel_step = DataParallelStep

    def __init__(self, cfg: TrainConfig, scene: Scene, run_dir: RunDir | None = None,
                 pixel_table: PixelTable | None = None) -> None:
        super().__init__(cfg, scene, run_dir, pixel_table)
        self.generator.manual_seed(cfg.training.seed + self.rank)
        self.balancer = LoadBalancer.from_config(cfg, self.world_size)
        # the global batch targets batch_scale × training.target_samples_per_step: the world size,
        # or after a resume on another world size the run's original one (the global batch is kept)
        self.batch_scale = float(self.world_size)
        self.grad_sync: GradientSynchronizer | None = None
        if self.distributed:
            p = cfg.parallel
            self.grad_sync = GradientSynchronizer(
                list(self.field.parameters()), bucket_mib=p.bucket_mib, compression=p.compression, overlap=p.overlap_comm
            )

    def sampler_seed(self) -> int:
        return self.cfg.training.seed + self.rank

    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        return {f"model.{k}": v for k, v in self.field.state_dict().items()}

    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        return {f"model.{k}": p for k, p in self.field.named_parameters()}

    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True) -> dict[str, Any]:
        """Evaluate on rank 0 (the fields are identical); other ranks wait at a barrier and get
        rank 0's result (collective)."""
        result = super().evaluate(split, max_images, save_renders) if self.rank == 0 else None
        self.ranks.barrier()
        return self.ranks.broadcast_result(result)

    def checkpoint_meta(self) -> dict[str, Any]:
        meta = super().checkpoint_meta()
        meta["balancer"] = self.balancer.state_dict()
        meta["trainer_state"]["batch_scale"] = self.batch_scale
        return meta

    def after_checkpoint_load(self, meta: dict[str, Any]) -> None:
        self.balancer.load_state_dict(meta["balancer"])
        saved = meta["trainer_state"].get("batch_scale", meta["world_size"])  # older checkpoints: their world size
        self.batch_scale = float(saved)

    def close(self) -> None:
        if self.grad_sync is not None:
            self.grad_sync.close()
        super().close()
