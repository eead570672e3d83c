"""The data-parallel step (``parallel.mode = "data"``; DESIGN.md §3), one step on every rank r::

    occupancy update (every training.occupancy_update_every steps): cells and points drawn from
        a generator seeded identically on all ranks; σ all-reduced with MAX, so the grid stays
        identical on every rank (the EMA max-update of identical grids with identical new values)
    R = global rays (adapted: global samples → training.target_samples_per_step × world size,
        weak scaling: the target is per GPU)
    n_r = LoadBalancer split of R (the same on every rank, no communication)
    rays of rank r: its own sampler, seeded training.seed + r; jitter/background from a per-rank
        generator (seed + r)
    loss_r = Σ_{rays of r} ℓ / (3 R)               (global normaliser, see grad_sync's contract)
    backward; GradientSynchronizer sums gradients (bucket_mib, compression, overlap_comm)
    Adam step (skipped on every rank alike when no rank had samples)
    all-gather of [rays, trained samples, compute ms, loss sum, squared-error sum, samples sized
        on (marched, or kept with training.compact_samples)] per rank: the global
        loss (on the device); copied to the host without waiting and read ROWS_READ_LAG steps
        later: global batch sizing, balancing (every parallel.balance_every steps)
    the next step's rays drawn and marched on a side stream (trainer.train.prefetch) while this
        step's kernels run, unless the next step starts with an occupancy update

A rank with zero rays or zero samples still takes part in every collective.

Compute time of a step (for balancing and ``imbalance``) is the time of the step without the
occupancy update (which waits in an all-reduce) and without the gradient-sync wait: CUDA events
read a step later (:class:`~trainer.train.timing.DeviceClock`), the wall clock on the CPU.
"""

from __future__ import annotations

import collections
from typing import Any

import torch
import torch.distributed as dist

from trainer.contract.errors import TrainingError
from trainer.parallel.dist_step import DistributedStep
from trainer.parallel.grad_sync import allreduce_bandwidth_gb_per_s
from trainer.train.dynamic_step import host_training_samples
from trainer.train.hostcopy import HostCopy
from trainer.train.loss import drop_rays, photometric_loss
from trainer.train.phases import (
    alpha_term, appearance_rgb, density_without_grad, distortion_term, field_outputs, render_rgb,
)
from trainer.train.records import Interval
from trainer.train.step import StepOutcome, StepStats
from trainer.train.timing import DeviceClock

__all__ = ["DataParallelStep", "ROWS_READ_LAG"]

ROWS_READ_LAG = 2  # a step's gathered rows are read on the host this many steps later


class DataParallelStep(DistributedStep):
    """One data-parallel step (collective; module docstring).

    Args:
        trainer: the :class:`~trainer.parallel.trainer.DataParallelTrainer` (balancer, gradient
            synchroniser, global batch scale, process group, parts).
    """

    prefetches = True

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        # (rows on their way to the host, global rays, step, compute clock) of unsettled steps
        self.pending: collections.deque[tuple[HostCopy, int, int, DeviceClock]] = collections.deque()
        self.previous_compute_ms = 0.0

    def density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        """The occupancy update's densities [N] at ``positions`` [N, 3], the maximum over ranks."""
        tr = self.trainer
        sigma = density_without_grad(tr.field, positions, tr.device, tr.cfg.training.precision)
        return tr.ranks.all_reduce_density(sigma, dist.ReduceOp.MAX)

    def advance(self) -> StepOutcome:
        """One data-parallel step. Returns this rank's stats and the *global* loss and MSE
        (identical on every rank, device scalars).

        No host synchronisation beyond the march's sample count, and that march usually ran on a
        side stream during the previous step (:mod:`trainer.train.prefetch`). The step's
        all-gathered row is copied to the host without waiting and read :data:`ROWS_READ_LAG`
        steps later (:meth:`settle`), so global batch sizing and balancing run that many steps
        behind and the ranks' hosts never wait for each other inside a step.

        Raises:
            TrainingError: on every rank, when after the occupancy warm-up no rank had a sample.
        """
        tr = self.trainer
        t = tr.cfg.training
        timer = tr.timer
        tr.occupancy_refresh.maybe_update(tr.step, self.density_for_grid, tr.grid_generator)
        clock = DeviceClock(tr.device)
        global_rays = tr.batch_sizing.n_rays
        n_local = tr.balancer.rays_for_rank(global_rays, tr.rank)
        step_input = tr.inputs.take(n_local)
        assert step_input.batch.rays_o.shape[0] == n_local, "a batch must hold the rays the balancer gave this rank"
        n_samples = step_input.n_samples
        tr.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=tr.device)
        sq_err_sum = torch.zeros((), device=tr.device)
        n_trained, sized_on = 0, 0
        if n_samples > 0:
            samples, ray_fits, n_trained, n_kept = host_training_samples(tr, step_input)
            sized_on = n_samples if n_kept is None else n_kept
            with timer.phase("field_forward"):
                sigmas, rgbs = field_outputs(tr.field, samples, tr.device, t.precision)
            with timer.phase("render"):
                rgb = render_rgb(sigmas.float(), rgbs.float(), samples, step_input.background, tr.triton_render)
                rgb = appearance_rgb(tr.field, rgb, step_input.batch.image_index)
                rgb = drop_rays(rgb, ray_fits, step_input.target)
                loss_sum = photometric_loss(rgb, step_input.target, tr.cfg.loss)
                distortion = distortion_term(sigmas.float(), samples, 1, tr.distortion_weight)  # a sum, as loss_sum
                if distortion is not None:
                    loss_sum = loss_sum + distortion * 3  # the backward divides by 3 · global rays
                opacity = alpha_term(sigmas.float(), samples, step_input.batch.alpha, ray_fits, 1, tr.alpha_weight)
                if opacity is not None:
                    loss_sum = loss_sum + opacity * 3
                sq_err_sum = ((rgb.detach() - step_input.target) ** 2).sum()
            with timer.phase("backward"):
                tr.scaler.scale(loss_sum / (3 * global_rays)).backward()
        clock.stop()
        any_grad = n_samples > 0
        if tr.grad_sync is not None:
            with timer.phase("comm"):
                any_grad = tr.grad_sync.finish()
        clock.start()
        skipped = not any_grad
        if any_grad:
            skipped = tr.optim.step(tr.step)
        clock.stop()
        with timer.phase("balance"):
            rows = self.gather_step_rows(n_local, n_trained, loss_sum.detach(), sq_err_sum, sized_on)
            denominator = 3.0 * max(global_rays, 1)
            loss = (rows[:, 3].sum() / denominator).float()
            mse = (rows[:, 4].sum() / denominator).float()
            self.pending.append((HostCopy(rows), global_rays, tr.step, clock))
            tr.step += 1
            self.settle(keep=ROWS_READ_LAG)
        tr.inputs.prefetch_next(tr.balancer.rays_for_rank(tr.batch_sizing.n_rays, tr.rank), tr.step,
                                t.occupancy_update_every)
        return StepOutcome(StepStats(n_local, n_trained, skipped=skipped), loss, mse)

    def gather_step_rows(self, n_local: int, n_trained: int, loss_sum: torch.Tensor, sq_err_sum: torch.Tensor,
                         sized_on: int | torch.Tensor) -> torch.Tensor:
        """[world_size, 6] float64 on the collective device, not read on the host: every rank's
        rays, trained samples (the metrics' samples, as the single-process trainer counts them),
        compute ms *of an earlier step* (see :meth:`settle`), loss sum, squared-error sum, and the
        samples the batch is sized on (marched, or kept before the capacity cut with
        ``training.compact_samples``; a host int or a device scalar)."""
        tr = self.trainer
        ranks = tr.ranks
        device = ranks.comm_device() if ranks.distributed else tr.device
        row = torch.empty(6, dtype=torch.float64, device=device)
        row[0].fill_(float(n_local))  # fills from host scalars launch kernels; a host list would sync
        row[1].fill_(float(n_trained))
        row[2].fill_(self.previous_compute_ms)
        row[3].copy_(loss_sum.to(device))
        row[4].copy_(sq_err_sum.to(device))
        if isinstance(sized_on, torch.Tensor):
            row[5].copy_(sized_on.to(device))
        else:
            row[5].fill_(float(sized_on))
        if not ranks.distributed:
            return row.unsqueeze(0)
        rows = [torch.empty_like(row) for _ in range(ranks.world_size)]
        dist.all_gather(rows, row, async_op=True).wait()  # NCCL: the stream waits, the host does not
        return torch.stack(rows)

    def settle(self, keep: int = 0) -> None:
        """Host bookkeeping of earlier steps, oldest first, until at most ``keep`` are left
        pending: their rows (global rays, samples, loss) into the interval's metrics, the balancer
        (with the per-rank compute times those rows carry), global batch sizing; and this rank's
        compute time for the next row. Each read waits only for its own step's all-gather.

        Raises:
            TrainingError: a settled step after the occupancy warm-up in which no rank had a sample.
        """
        tr = self.trainer
        while len(self.pending) > keep:
            rows_copy, global_rays, step, clock = self.pending.popleft()
            self.previous_compute_ms = clock.elapsed_ms()
            rows = rows_copy.value()
            comm_bytes = tr.grad_sync.last_bytes if tr.grad_sync is not None else 0  # stats() would wait
            times = self.account(rows, comm_bytes)
            if any(v > 0 for v in times):  # the first steps' rows carry no earlier compute time
                tr.balancer.record(times)
            global_samples = int(rows[:, 5].sum())
            if global_samples == 0 and step >= tr.cfg.training.occupancy_warmup_steps:
                raise TrainingError(
                    f"no ray sample of any rank hit an occupied cell at step {step} (after the "
                    f"occupancy warm-up of {tr.cfg.training.occupancy_warmup_steps} steps; occupied fraction "
                    f"{tr.grid.occupancy_fraction():.3g})"
                )
            if global_samples > 0:
                # instant-ngp's rule on global counts, both limits per GPU; a run resumed on another
                # world size keeps the global batch of the run it continues (batch_scale)
                tr.batch_sizing.resize(global_rays, global_samples, scale=tr.batch_scale)

    def interval_values(self, interval: Interval, elapsed_s: float, record: dict[str, Any]) -> dict[str, Any]:
        """The distributed columns, this rank's ray share and, with several ranks, the gradient
        all-reduce's bytes per step and bus bandwidth (over the ``comm`` phase's time)."""
        tr = self.trainer
        comm_bytes = self.counts["comm_bytes"] / max(self.counts["steps"], 1.0)
        values = super().interval_values(interval, elapsed_s, record)
        values["ray_share"] = tr.balancer.shares[tr.rank]
        if tr.grad_sync is not None:
            values["comm_bytes_per_step"] = comm_bytes
            comm_ms = record.get("comm_ms", 0.0)
            if comm_ms > 0:
                values["comm_busbw_gb_per_s"] = allreduce_bandwidth_gb_per_s(int(comm_bytes), comm_ms,
                                                                             tr.world_size)[1]
        return values
