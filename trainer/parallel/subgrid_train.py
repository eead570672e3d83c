"""Subgrid model-parallel training (``parallel.mode = "subgrid"``; DESIGN.md §3, NeRF-XL).

Boxes: ``parallel.num_subgrids`` K boxes of equal volume from
:func:`~trainer.parallel.partition.split_boxes` (no occupancy weights: the fields are built before
any occupancy is known, and a later re-cut would throw their training away), owned per
:func:`~trainer.parallel.partition.assign_boxes` for the current world size (so a resume on another
world size re-assigns them). Box k's field is seeded with ``training.seed + k``.

One step, on every rank::

    occupancy update: σ = all-reduce SUM of each rank's box densities (0 outside its boxes), cells
        and points from an identically seeded generator → the same grid everywhere
    the SAME rays on every rank (sampler, jitter and background seeded with training.seed)
    march through the shared occupancy grid (identical samples)
    each rank renders the segments of its boxes; all_gather_segments (O(rays) bytes);
    composite_boxes_in_order → every rank holds the same colours and the same loss
    backward (loss_replicated: no communication), Adam over the rank's own parameters only

``training.target_samples_per_step`` is the job's sample target per step here (every rank sees
every sample and renders those in its boxes). Box ownership is static (no dynamic moves yet).
Evaluation renders on all ranks together; rank 0 scores and writes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainer.errors import SnapshotError, TrainingError
from trainer.parallel.partition import assign_boxes, split_boxes
from trainer.parallel.subgrid import SubgridModel, all_gather_segments, composite_boxes_in_order, render_subgrid, segment_order
from trainer.parallel.trainer import DistributedTrainerBase
from trainer.train.evaluate import evaluate
from trainer.train.loop import StepStats, _autocast, build_field

__all__ = ["SubgridTrainer"]


class SubgridTrainer(DistributedTrainerBase):
    """Subgrid model-parallel trainer (module docstring). ``self.field`` is this rank's
    :class:`~trainer.parallel.subgrid.SubgridModel`.

    Raises:
        ConfigError: ``parallel.num_subgrids`` below the world size (names the key), and as the
            base trainer.
    """

    mode = "subgrid"

    def _build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        k = cfg.parallel.num_subgrids
        owners = assign_boxes(k, self.world_size)
        aabb_cpu = self.aabb.cpu()
        boxes = split_boxes(aabb_cpu, None, k)
        return SubgridModel(
            boxes, owners, self.rank,
            lambda domain: build_field(cfg, domain, self.aabb_scale, self.device),
            aabb_cpu, overlap=cfg.parallel.overlap, device=self.device, seed=cfg.training.seed,
        )

    def _build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the owned boxes: groups (hash-grid entries, MLP weights) as the base trainer."""
        fields = [self.field.fields[str(k)] for k in self.field.local_box_ids]
        return self._adam([p for f in fields for p in f.encoding_parameters()],
                          [p for f in fields for p in f.mlp_weight_parameters()])

    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        return {f"boxes.{k}.{n}": v for k in self.field.local_box_ids
                for n, v in self.field.fields[str(k)].state_dict().items()}

    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        return {f"boxes.{k}.{n}": p for k in self.field.local_box_ids
                for n, p in self.field.fields[str(k)].named_parameters()}

    def _density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            sigma = self.field.density(positions).float()
        return self._all_reduce_density(sigma, dist.ReduceOp.SUM)

    def train_step(self) -> tuple[StepStats, torch.Tensor, torch.Tensor]:
        """One subgrid step (collective). Returns the step's stats, loss and MSE (the same on
        every rank).

        Raises:
            TrainingError: after the occupancy warm-up, when no sample hit an occupied cell.
        """
        t = self.cfg.training
        timer = self.timer
        self._maybe_update_occupancy()
        t0 = time.perf_counter()
        with timer.phase("data"):
            batch = self.sampler.sample(self.n_rays)
            n_rays = batch.rays_o.shape[0]
            background, target = self._background_and_target(batch, n_rays)
        samples, n_samples = self._march_batch(batch)
        if n_samples == 0:  # identical samples on every rank: all skip alike
            if self.step >= t.occupancy_warmup_steps:
                raise TrainingError(f"no ray sample hit an occupied cell at step {self.step} (after the "
                                    f"occupancy warm-up of {t.occupancy_warmup_steps} steps)")
            self.step += 1
            self._account(self._all_gather_rows([n_rays, 0, 0.0]))
            return StepStats(n_rays, 0, skipped=True, trained=False), torch.zeros(()), target.var()
        model = self.field
        with timer.phase("field_forward"), _autocast(self.device, t.precision):
            sample_boxes = model.sample_boxes(samples.positions)
            local = model(samples, sample_boxes)
        compute_ms = self._compute_ms_since(t0)
        with timer.phase("comm"):
            rgb_k, transmittance_k = all_gather_segments(local.rgb.float(), local.transmittance.float(), local.box_ids,
                                                         model.n_boxes, loss_replicated=True)
        t1 = time.perf_counter()
        with timer.phase("render"):
            order = segment_order(samples.t, samples.ray_indices, sample_boxes, n_rays, model.n_boxes)
            rgb, _ = composite_boxes_in_order(rgb_k, transmittance_k, order, background)
            loss, mse = self._loss_and_mse(rgb, target, n_rays)
        self._backward(loss)
        skipped = self._optimizer_step()
        compute_ms += self._compute_ms_since(t1)
        with timer.phase("balance"):
            self._account(self._all_gather_rows([n_rays, n_samples, compute_ms]))
        self.step += 1
        self._resize_batch(n_rays, n_samples)
        return StepStats(n_rays, n_samples, skipped=skipped), loss.detach(), mse

    def _interval_record(self, interval: dict, loss_sum: torch.Tensor, mse_sum: torch.Tensor) -> dict[str, Any]:
        # every rank sees the same rays and samples: the job's throughput is one rank's
        record = super()._interval_record(interval, loss_sum, mse_sum)
        if self.rank == 0:
            for key in ("rays_per_step", "samples_per_step", "rays_per_s", "throughput_samples_per_s"):
                record[key] /= self.world_size
        return record

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
            with _autocast(self.device, self.cfg.training.precision):
                rgb, _ = render_subgrid(self.field, samples, background, loss_replicated=True)
            out[start : start + o.shape[0]] = rgb.float()
        return out

    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True) -> dict[str, Any]:
        """Render the evaluation split on all ranks (every box is needed); rank 0 scores and
        writes (see :func:`trainer.train.evaluate.evaluate`). Collective; every rank returns rank
        0's result."""
        limit = self.cfg.training.eval_max_images if max_images is None else max_images
        result = evaluate(
            self, split, limit, save_renders, render=self.render_rays, score=self.rank == 0
        )
        return self._broadcast_result(result)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_meta(self) -> dict[str, Any]:
        meta = super()._checkpoint_meta()
        meta["boxes"] = [[list(b.lo), list(b.hi)] for b in self.field.boxes]
        meta["owners"] = list(self.field.owners)
        return meta

    def _check_meta(self, folder: Path, meta: dict[str, Any]) -> None:
        mine = [[list(b.lo), list(b.hi)] for b in self.field.boxes]
        theirs = meta.get("boxes")
        if theirs is None or len(theirs) != len(mine) or not np.allclose(np.array(theirs), np.array(mine)):
            raise SnapshotError(f"{folder}: the checkpoint's subgrid boxes differ from this run's "
                                f"parallel.num_subgrids={len(mine)} boxes")

    def _rank_state_source(self, saved_world_size: int) -> int | None:
        return 0  # every rank draws the same rays: rank 0's random states are everyone's
