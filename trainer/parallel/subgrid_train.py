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

One step, on every rank::

    occupancy update: σ = all-reduce SUM of each rank's box densities (0 outside its boxes), cells
        and points from an identically seeded generator → the same grid everywhere
    (at the end of the warm-up: re-cut the boxes by occupied cells)
    the SAME rays on every rank (sampler, jitter and background seeded with training.seed)
    march through the shared occupancy grid (identical samples)              "shared" time
    each rank renders the segments of its boxes; all_gather_segments (O(rays) bytes);
    composite_boxes_in_order → every rank holds the same colours and the same loss
    backward (loss_replicated: no communication), Adam over the rank's own parameters only
                                                                             "box" time
    all-gather of [rays, samples, compute ms, shared ms, box ms, samples per owned box]:
        imbalance metric; every balance_every steps, box moves

``training.target_samples_per_step`` is the job's sample target per step here (every rank sees
every sample and renders those in its boxes). Evaluation renders on all ranks together; rank 0
scores and writes. Checkpoints hold the boxes and their owners: a resume adopts the checkpoint's
boxes, and its owners when the world size is the same (else the initial assignment for the new
world size).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainer.contract.errors import SnapshotError, TrainingError
from trainer.parallel.balance import BoxBalancer, shares_from_capabilities
from trainer.parallel.partition import Box, assign_boxes, occupancy_weights, split_boxes
from trainer.parallel.subgrid import (
    SubgridModel, all_gather_segments, composite_boxes_in_order, render_subgrid, segment_order,
)
from trainer.parallel.trainer import DistributedTrainerBase
from trainer.train.evaluate import evaluate
from trainer.train.loop import StepStats, build_field
from trainer.train.precision import autocast

__all__ = ["SubgridTrainer"]

# Columns of the per-step row every rank all-gathers (then one column per box).
_ROW_RAYS, _ROW_SAMPLES, _ROW_COMPUTE_MS, _ROW_SHARED_MS, _ROW_BOX_MS, _ROW_BOXES = range(6)


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

    def _build_model(self) -> torch.nn.Module:
        boxes = split_boxes(self.aabb.cpu(), None, self.cfg.parallel.num_subgrids)
        return self._make_model(boxes, self.initial_owners())

    def _after_init(self) -> None:
        super()._after_init()
        self.box_balancer = BoxBalancer(self.world_size, self.cfg.parallel.num_subgrids, self.cfg.parallel.balance_every)

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
        self.optimizer = self._build_optimizer()
        self.box_balancer.reset_window()

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
            corners = torch.tensor([[b.lo, b.hi] for b in boxes], dtype=torch.float64, device=self._comm_device())
            dist.broadcast(corners, src=0)
            boxes = [Box(tuple(lo), tuple(hi), k) for k, (lo, hi) in enumerate(corners.cpu().tolist())]
        self._install_boxes(boxes, self.initial_owners())
        if self.rank == 0 and self.distributed:
            print(f"step {self.step}: subgrid boxes re-cut by occupied cells "
                  f"({float(weights.sum()):.0f} of {weights.numel()} cells occupied)", flush=True)
        return boxes

    def _recut_step(self) -> int | None:
        """The step at whose start the boxes are re-cut by occupancy (None: never)."""
        warmup = self.cfg.training.occupancy_warmup_steps
        return warmup if self.cfg.parallel.num_subgrids > 1 and warmup > 0 else None

    def _recut_due(self) -> bool:
        return self.step == self._recut_step()

    def _balancing(self) -> bool:
        """Whether box moves are considered this step: not before the re-cut (it would discard them)."""
        recut = self._recut_step()
        return recut is None or self.step >= recut

    def _gather_step(self, n_rays: int, n_samples: int, shared_ms: float, box_ms: float,
                     box_samples: list[float]) -> torch.Tensor:
        """The step's row of every rank (columns ``_ROW_*``), ``[world_size, 5 + K]``."""
        return self._all_gather_rows([n_rays, n_samples, shared_ms + box_ms, shared_ms, box_ms, *box_samples])

    def _balance(self, rows: torch.Tensor) -> None:
        """Feed the step's rows to the box balancer and make the moves it returns (collective)."""
        model = self.field
        moves = self.box_balancer.record(
            model.owners, rows[:, _ROW_SHARED_MS].tolist(), rows[:, _ROW_BOX_MS].tolist(),
            rows[:, _ROW_BOXES:].sum(dim=0).tolist(),
        )
        for move in moves:
            model.move_box(move.box, move.src, move.dst, self.optimizer)
            if self.rank == 0:
                print(f"step {self.step}: subgrid box {move.box} moves from rank {move.src} to rank {move.dst} "
                      f"(predicted slowest rank {move.makespan_before_ms:.1f} -> {move.makespan_after_ms:.1f} ms "
                      "per step)", flush=True)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> tuple[StepStats, torch.Tensor, torch.Tensor]:
        """One subgrid step (collective). Returns the step's stats, loss and MSE (the same on
        every rank).

        Raises:
            TrainingError: after the occupancy warm-up, when no sample hit an occupied cell.
        """
        t = self.cfg.training
        timer = self.timer
        self._maybe_update_occupancy()
        if self._recut_due():
            with timer.phase("balance"):
                self.recut_boxes()
        model = self.field
        t0 = time.perf_counter()
        step_input = self._prepare_input(self.n_rays)  # the same rays on every rank: no prefetch
        samples, n_rays, n_samples = step_input.samples, step_input.n_rays, step_input.n_samples
        background, target = step_input.background, step_input.target
        shared_ms = (time.perf_counter() - t0) * 1e3  # the march read its sample count: the device is done
        if n_samples == 0:  # identical samples on every rank: all skip alike
            if self.step >= t.occupancy_warmup_steps:
                raise TrainingError(f"no ray sample hit an occupied cell at step {self.step} (after the "
                                    f"occupancy warm-up of {t.occupancy_warmup_steps} steps)")
            self.step += 1
            self._account(self._gather_step(n_rays, 0, 0.0, 0.0, [0.0] * model.n_boxes))
            return StepStats(n_rays, 0, skipped=True, trained=False), torch.zeros(()), target.var()
        t_box = time.perf_counter()
        with timer.phase("field_forward"), autocast(self.device, t.precision):
            sample_boxes = model.sample_boxes(samples.positions)
            local = model(samples, sample_boxes)
        box_ms = self._compute_ms_since(t_box)
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
        box_ms += self._compute_ms_since(t1)
        with timer.phase("balance"):
            counts = torch.bincount(sample_boxes, minlength=model.n_boxes).double()
            owned = torch.tensor([o == self.rank for o in model.owners], device=counts.device)
            rows = self._gather_step(n_rays, n_samples, shared_ms, box_ms, (counts * owned).tolist())
            self._account(rows)
            if self._balancing():
                self._balance(rows)
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
        return self._broadcast_result(result)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_meta(self) -> dict[str, Any]:
        meta = super()._checkpoint_meta()
        meta["boxes"] = [[list(b.lo), list(b.hi)] for b in self.field.boxes]
        meta["owners"] = list(self.field.owners)
        meta["box_balancer"] = self.box_balancer.state_dict()
        return meta

    def _check_meta(self, folder: Path, meta: dict[str, Any]) -> None:
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

    def _after_load(self, meta: dict[str, Any]) -> None:
        state = meta.get("box_balancer")
        if state is not None:
            self.box_balancer.load_state_dict(state)

    def _rank_state_source(self, saved_world_size: int) -> int | None:
        return 0  # every rank draws the same rays: rank 0's random states are everyone's
