"""The subgrid step (``parallel.mode = "subgrid"``; DESIGN.md §3, NeRF-XL), one step on every rank::

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

The boxes, their re-cut and their owners are the trainer's (:mod:`trainer.parallel.subgrid_train`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from trainer.contract.errors import TrainingError
from trainer.parallel.dist_step import DistributedStep
from trainer.parallel.subgrid import all_gather_segments, composite_boxes_in_order, segment_order
from trainer.train.phases import loss_and_mse
from trainer.train.precision import autocast
from trainer.train.records import Interval
from trainer.train.step import StepOutcome, StepStats

__all__ = ["SubgridStep"]

# Columns of the per-step row every rank all-gathers (then one column per box).
ROW_RAYS, ROW_SAMPLES, ROW_COMPUTE_MS, ROW_SHARED_MS, ROW_BOX_MS, ROW_BOXES = range(6)


class SubgridStep(DistributedStep):
    """One subgrid step (collective; module docstring). The same rays on every rank: nothing is
    prepared ahead.

    Args:
        trainer: the :class:`~trainer.parallel.subgrid_train.SubgridTrainer` (boxes, box
            balancer, process group, parts).
    """

    def density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        """The occupancy update's densities [N] at ``positions`` [N, 3]: each rank's boxes',
        summed over ranks."""
        tr = self.trainer
        with torch.no_grad():
            sigma = tr.field.density(positions).float()
        return tr.ranks.all_reduce_density(sigma, dist.ReduceOp.SUM)

    def recut_step(self) -> int | None:
        """The step at whose start the boxes are re-cut by occupancy (None: never)."""
        cfg = self.trainer.cfg
        warmup = cfg.training.occupancy_warmup_steps
        return warmup if cfg.parallel.num_subgrids > 1 and warmup > 0 else None

    def balancing(self) -> bool:
        """Whether box moves are considered this step: not before the re-cut (it would discard them)."""
        recut = self.recut_step()
        return recut is None or self.trainer.step >= recut

    def compute_ms_since(self, t0: float) -> float:
        """Milliseconds of device work since ``t0`` (``time.perf_counter``), after a device sync."""
        self.trainer.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def gather_row(self, n_rays: int, n_samples: int, shared_ms: float, box_ms: float,
                   box_samples: list[float]) -> torch.Tensor:
        """The step's row of every rank (columns ``ROW_*``), ``[world_size, 5 + K]``."""
        return self.trainer.ranks.all_gather_rows([n_rays, n_samples, shared_ms + box_ms, shared_ms, box_ms,
                                                   *box_samples])

    def move_boxes(self, rows: torch.Tensor) -> None:
        """Feed the step's rows to the box balancer and make the moves it returns (collective)."""
        tr = self.trainer
        model = tr.field
        moves = tr.box_balancer.record(
            model.owners, rows[:, ROW_SHARED_MS].tolist(), rows[:, ROW_BOX_MS].tolist(),
            rows[:, ROW_BOXES:].sum(dim=0).tolist(),
        )
        for move in moves:
            model.move_box(move.box, move.src, move.dst, tr.optimizer)
            if tr.rank == 0:
                print(f"step {tr.step}: subgrid box {move.box} moves from rank {move.src} to rank {move.dst} "
                      f"(predicted slowest rank {move.makespan_before_ms:.1f} -> {move.makespan_after_ms:.1f} ms "
                      "per step)", flush=True)

    def advance(self) -> StepOutcome:
        """One subgrid step. Returns the step's stats, loss and MSE (the same on every rank).

        Raises:
            TrainingError: after the occupancy warm-up, when no sample hit an occupied cell.
        """
        tr = self.trainer
        t = tr.cfg.training
        timer = tr.timer
        tr.occupancy_refresh.maybe_update(tr.step, self.density_for_grid, tr.grid_generator)
        if tr.step == self.recut_step():
            with timer.phase("balance"):
                tr.recut_boxes()
        model = tr.field
        t0 = time.perf_counter()
        step_input = tr.inputs.prepare(tr.batch_sizing.n_rays)  # the same rays on every rank: no prefetch
        samples, n_rays, n_samples = step_input.samples, step_input.n_rays, step_input.n_samples
        background, target = step_input.background, step_input.target
        shared_ms = (time.perf_counter() - t0) * 1e3  # the march read its sample count: the device is done
        if n_samples == 0:  # identical samples on every rank: all skip alike
            if tr.step >= t.occupancy_warmup_steps:
                raise TrainingError(f"no ray sample hit an occupied cell at step {tr.step} (after the "
                                    f"occupancy warm-up of {t.occupancy_warmup_steps} steps)")
            tr.step += 1
            self.account(self.gather_row(n_rays, 0, 0.0, 0.0, [0.0] * model.n_boxes))
            return StepOutcome(StepStats(n_rays, 0, skipped=True, trained=False), torch.zeros(()), target.var())
        t_box = time.perf_counter()
        with timer.phase("field_forward"), autocast(tr.device, t.precision):
            sample_boxes = model.sample_boxes(samples.positions)
            local = model(samples, sample_boxes)
        box_ms = self.compute_ms_since(t_box)
        with timer.phase("comm"):
            rgb_k, transmittance_k = all_gather_segments(local.rgb.float(), local.transmittance.float(), local.box_ids,
                                                         model.n_boxes, loss_replicated=True)
        t1 = time.perf_counter()
        with timer.phase("render"):
            order = segment_order(samples.t, samples.ray_indices, sample_boxes, n_rays, model.n_boxes)
            rgb, _ = composite_boxes_in_order(rgb_k, transmittance_k, order, background)
            loss, mse = loss_and_mse(rgb, target, n_rays, tr.cfg.loss)
        tr.optim.backward(loss)
        skipped = tr.optim.step(tr.step)
        box_ms += self.compute_ms_since(t1)
        with timer.phase("balance"):
            counts = torch.bincount(sample_boxes, minlength=model.n_boxes).double()
            owned = torch.tensor([o == tr.rank for o in model.owners], device=counts.device)
            rows = self.gather_row(n_rays, n_samples, shared_ms, box_ms, (counts * owned).tolist())
            self.account(rows)
            if self.balancing():
                self.move_boxes(rows)
        tr.step += 1
        tr.batch_sizing.resize(n_rays, n_samples)
        return StepOutcome(StepStats(n_rays, n_samples, skipped=skipped), loss.detach(), mse)

    def interval_values(self, interval: Interval, elapsed_s: float, record: dict[str, Any]) -> dict[str, Any]:
        """The distributed columns; every rank sees the same rays and samples, so the job's
        throughput is one rank's (the sums over ranks divided by the world size, on every rank)."""
        values = super().interval_values(interval, elapsed_s, record)
        for key in ("rays_per_step", "samples_per_step", "rays_per_s", "throughput_samples_per_s"):
            values[key] /= self.trainer.world_size
        return values
