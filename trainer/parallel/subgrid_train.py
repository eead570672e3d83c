"""Subgrid model-parallel training (``parallel.mode = "subgrid"``; DESIGN.md §3, NeRF-XL).

Boxes: ``parallel.num_subgrids`` K boxes from :func:`~trainer.parallel.partition.split_boxes`.
Before any occupancy is known they have equal volumes. At the end of the occupancy warm-up (step
``training.occupancy_warmup_steps``, when that is > 0) the scene box is cut again by recursive
median splits balanced by the *occupied cells* of the occupancy grid
(:func:`~trainer.parallel.partition.occupancy_weights`, :meth:`SubgridTrainer.recut_boxes`): the
box fields and their optimiser state start afresh there (a hash grid cannot be carried over to
another domain), while the occupancy grid, the step count and the random states go on. Box k's
field is seeded with ``training.seed + k``, so its start does not depend on the world size or on
the rank that owns it.

Ownership: contiguous runs of boxes per rank, sized by the static shares of
``distributed.gpu_capabilities`` (equal without them; :func:`~trainer.parallel.partition.assign_boxes`).
With ``parallel.balance_every`` N > 0 and K > world size, every N steps from the re-cut on (from
step 0 without one) the ranks' measured compute times (waits excluded) decide box moves toward
equal finish times
(:class:`~trainer.parallel.balance.BoxBalancer`); a moving box takes its parameters and Adam
state along (:meth:`~trainer.parallel.subgrid.SubgridModel.move_box`), so training goes on
exactly as without the move.

The step is :class:`~trainer.parallel.subgrid_step.SubgridStep` (the same rays on every rank,
each rank rendering the segments of its boxes, ordered compositing of every rank's segments).

``training.target_samples_per_step`` is the job's sample target per step here (every rank sees
every sample and renders those in its boxes). Evaluation renders on all ranks together; rank 0
scores and writes. Checkpoints hold the boxes and their owners: a resume adopts the checkpoint's
boxes, and its owners when the world size is the same (else the initial assignment for the new
world size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainer.contract.config import TrainConfig
from trainer.contract.errors import SnapshotError
from trainer.contract.rundir import RunDir
from trainer.data import Scene
from trainer.data.images import PixelTable
from trainer.parallel.balance import BoxBalancer, shares_from_capabilities
from trainer.parallel.partition import Box, assign_boxes, occupancy_weights, split_boxes
from trainer.parallel.subgrid import SubgridModel, render_subgrid
from trainer.parallel.subgrid_step import SubgridStep
from trainer.parallel.trainer import DistributedTrainerBase
from trainer.train.build import build_field
from trainer.train.evaluate import evaluate
from trainer.train.optimization import build_adam
from trainer.train.precision import autocast

__all__ = ["SubgridTrainer"]


class SubgridTrainer(DistributedTrainerBase):
    """Subgrid model-parallel trainer (module docstring). ``self.field`` is this rank's
    :class:`~trainer.parallel.subgrid.SubgridModel`.

    Attributes:
        box_balancer: the :class:`~trainer.parallel.balance.BoxBalancer` (moves nothing with
            ``parallel.balance_every`` 0 or one box per rank).

    Raises:
        ConfigError: ``parallel.num_subgrids`` below the world size (names the key), and as the
            base trainer.
    """

    mode = "subgrid"
    parallel_step = SubgridStep

    def __init__(self, cfg: TrainConfig, scene: Scene, run_dir: RunDir | None = None,
                 pixel_table: PixelTable | None = None) -> None:
        super().__init__(cfg, scene, run_dir, pixel_table)
        self.box_balancer = BoxBalancer(self.world_size, cfg.parallel.num_subgrids, cfg.parallel.balance_every)

    def build_model(self) -> torch.nn.Module:
        """This rank's boxes of the K equal-volume boxes, owned by :meth:`initial_owners`."""
        boxes = split_boxes(self.aabb.cpu(), None, self.cfg.parallel.num_subgrids)
        return self._make_model(boxes, self.initial_owners())

    def initial_owners(self) -> list[int]:
        """Owner of each box before any move: contiguous runs sized by the static shares of
        ``distributed.gpu_capabilities`` (equal runs without them)."""
        k = self.cfg.parallel.num_subgrids
        capabilities = self.cfg.distributed.gpu_capabilities
        if not capabilities:
            return assign_boxes(k, self.world_size)
        return assign_boxes(k, self.world_size, rank_shares=shares_from_capabilities(capabilities, self.world_size))

    def _make_model(self, boxes: list[Box], owners: list[int]) -> SubgridModel:
        cfg = self.cfg
        return SubgridModel(
            boxes, owners, self.rank,
            lambda domain: build_field(cfg, domain, self.aabb_scale, self.device, self.footprint_resolution),
            self.aabb.cpu(), overlap=cfg.parallel.overlap, device=self.device, seed=cfg.training.seed,
        )

    def _install_boxes(self, boxes: list[Box], owners: list[int]) -> None:
        """Replace the model by fresh fields over ``boxes`` owned by ``owners``, with a fresh
        optimiser; the balancer's open round is dropped."""
        self.field = self._make_model(boxes, owners)
        self.optim.optimizer = self.build_optimizer()
        self.box_balancer.reset_window()

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the owned boxes: groups (hash-grid entries, MLP weights) as the base trainer."""
        fields = [self.field.fields[str(k)] for k in self.field.local_box_ids]
        return build_adam(self.cfg.optimizer, [p for f in fields for p in f.encoding_parameters()],
                          [p for f in fields for p in f.mlp_weight_parameters()], self.device, self.l2_reg)

    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        return {f"boxes.{k}.{n}": v for k in self.field.local_box_ids
                for n, v in self.field.fields[str(k)].state_dict().items()}

    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        return {f"boxes.{k}.{n}": p for k in self.field.local_box_ids
                for n, p in self.field.fields[str(k)].named_parameters()}

    # ------------------------------------------------------------------ boxes
    def recut_boxes(self, resolution: int | None = None) -> list[Box]:
        """Cut the scene box again into K boxes balanced by occupied cells of the occupancy grid
        and start their fields afresh (collective; the grid is identical on every rank, and rank
        0's cut values are broadcast so every rank locates samples alike).

        Args:
            resolution: cells per axis of the occupancy resampling
                (:func:`~trainer.parallel.partition.occupancy_weights`); default
                ``training.occupancy_resolution``.

        Returns:
            The new boxes (owners: :meth:`initial_owners`).
        """
        resolution = resolution or self.cfg.training.occupancy_resolution
        aabb = self.aabb.cpu()
        weights = occupancy_weights(self.grid, aabb, resolution, source="bitfield")
        boxes = split_boxes(aabb, weights, self.cfg.parallel.num_subgrids)
        if self.distributed:
            corners = torch.tensor([[b.lo, b.hi] for b in boxes], dtype=torch.float64, device=self.ranks.comm_device())
            dist.broadcast(corners, src=0)
            boxes = [Box(tuple(lo), tuple(hi), k) for k, (lo, hi) in enumerate(corners.cpu().tolist())]
        self._install_boxes(boxes, self.initial_owners())
        if self.rank == 0 and self.distributed:
            print(f"step {self.step}: subgrid boxes re-cut by occupied cells "
                  f"({float(weights.sum()):.0f} of {weights.numel()} cells occupied)", flush=True)
        return boxes

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def render_rays(self, rays_o: torch.Tensor, rays_d: torch.Tensor, background: torch.Tensor,
                    chunk_rays: int | None = None) -> torch.Tensor:
        """Render rays [n, 3] with every rank's boxes (collective; same rays on every rank).

        Returns:
            rgb [n, 3] float32.
        """
        if chunk_rays is None:
            chunk_rays = 2**14 if self.device.type == "cuda" else 2**11
        out = torch.empty(rays_o.shape[0], 3, device=rays_o.device)
        for start in range(0, rays_o.shape[0], chunk_rays):
            o, d = rays_o[start : start + chunk_rays], rays_d[start : start + chunk_rays]
            samples = self.march(o, d, jitter=False)
            if samples.ray_indices.shape[0] == 0:
                out[start : start + o.shape[0]] = background
                continue
            with autocast(self.device, self.cfg.training.precision):
                rgb, _ = render_subgrid(self.field, samples, background, loss_replicated=True)
            out[start : start + o.shape[0]] = rgb.float()
        return out

    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True) -> dict[str, Any]:
        """Render the evaluation split on all ranks (every box is needed); rank 0 scores and
        writes (see :func:`trainer.train.evaluate.evaluate`). Collective; every rank returns rank
        0's result."""
        limit = self.cfg.training.eval_max_images if max_images is None else max_images
        with self.inference_weights():
            result = evaluate(
                self, split, limit, save_renders, render=self.render_rays, score=self.rank == 0
            )
        return self.ranks.broadcast_result(result)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_meta(self) -> dict[str, Any]:
        meta = super().checkpoint_meta()
        meta["boxes"] = [[list(b.lo), list(b.hi)] for b in self.field.boxes]
        meta["owners"] = list(self.field.owners)
        meta["box_balancer"] = self.box_balancer.state_dict()
        return meta

    def check_checkpoint_meta(self, folder: Path, meta: dict[str, Any]) -> None:
        """Adopt the checkpoint's boxes (re-cut by occupancy after the warm-up) and, with the same
        world size, its owners (moved by the balancer); fields are rebuilt when either differs.

        Raises:
            SnapshotError: another number of boxes or ``parallel.overlap``, or malformed
                boxes/owners (names the folder).
        """
        k = self.cfg.parallel.num_subgrids
        saved_overlap = ((meta.get("config") or {}).get("parallel") or {}).get("overlap")
        if saved_overlap is not None and float(saved_overlap) != self.cfg.parallel.overlap:
            raise SnapshotError(f"{folder}: parallel.overlap is {self.cfg.parallel.overlap:g} in this run but "
                                f"{float(saved_overlap):g} in the checkpoint (its boxes' encoding domains); "
                                "resume with the same overlap")
        theirs = meta.get("boxes")
        try:
            corners = np.asarray(theirs, dtype=np.float64)
        except (TypeError, ValueError):
            corners = np.zeros(0)
        if corners.shape != (len(theirs or []), 2, 3) or not np.isfinite(corners).all():
            raise SnapshotError(f"{folder}: meta.json holds no readable subgrid boxes")
        if corners.shape[0] != k:
            raise SnapshotError(f"{folder}: the checkpoint has {corners.shape[0]} subgrid boxes, this run's "
                                f"parallel.num_subgrids is {k}")
        boxes = [Box(tuple(lo), tuple(hi), i) for i, (lo, hi) in enumerate(corners.tolist())]
        owners = self.initial_owners()
        saved = meta.get("owners")
        if meta.get("world_size") == self.world_size:
            if not (isinstance(saved, list) and len(saved) == k and sorted(set(saved)) == list(range(self.world_size))):
                raise SnapshotError(f"{folder}: meta.json owners {saved!r} do not give every one of "
                                    f"{self.world_size} ranks a box")
            owners = [int(r) for r in saved]
        mine = np.asarray([[b.lo, b.hi] for b in self.field.boxes], dtype=np.float64)
        if not np.array_equal(mine, corners) or owners != list(self.field.owners):
            self._install_boxes(boxes, owners)

    def after_checkpoint_load(self, meta: dict[str, Any]) -> None:
        state = meta.get("box_balancer")
        if state is not None:
            self.box_balancer.load_state_dict(state)

    def rank_state_source(self, saved_world_size: int) -> int | None:
        return 0  # every rank draws the same rays: rank 0's random states are everyone's
