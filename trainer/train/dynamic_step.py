"""The dynamic step: as many rays as the batch sizing asks for, every tensor sized on the march's
sample count read on the host (DESIGN.md §2).

One step: occupancy update (at its cadence) → the step's rays and samples (usually prepared
during the previous step, :mod:`trainer.train.prefetch`) → compaction (``training.compact_samples``)
→ field forward → compositing over the background → the per-image colour map
(``training.appearance``) → loss → backward → Adam step → batch sizing
on the marched count, or on the kept count of the step :data:`~trainer.train.batch_size.KEPT_READ_LAG`
steps back → the next step's input prefetched. The march's sample count is the one host read of
the step's own work.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.contract.errors import TrainingError
from trainer.render.march import PackedSamples
from trainer.train.batch_size import KEPT_READ_LAG
from trainer.train.loss import drop_rays
from trainer.train.phases import (
    alpha_term, appearance_rgb, compacted_samples, density_without_grad, distortion_term, field_outputs, loss_and_mse,
    render_rgb,
)
from trainer.train.prefetch import StepInput
from trainer.train.step import Step, StepOutcome, StepStats

__all__ = ["DynamicStep", "host_training_samples"]


def host_training_samples(
    trainer: Any, step_input: StepInput
) -> tuple[PackedSamples, torch.Tensor | None, int, torch.Tensor | None]:
    """The samples a step sized on the host trains on, which rays they cover whole (None: every
    ray), how many there are (host int) and how many were kept before the capacity cut (device
    scalar, None without ``training.compact_samples``).

    Without ``training.compact_samples``: the marched samples. With it:
    :func:`~trainer.train.phases.compacted_samples` into a batch of
    :meth:`~trainer.train.batch_size.BatchSizer.compact_capacity` samples; the caller sends the
    kept count to the host without waiting. Needs at least one marched sample.
    """
    if not trainer.compact:
        return step_input.samples, None, step_input.n_samples, None
    precision = trainer.cfg.training.precision

    def density(positions: torch.Tensor) -> torch.Tensor:
        return density_without_grad(trainer.field, positions, trainer.device, precision)

    return compacted_samples(step_input, density, trainer.batch_sizing.compact_capacity, trainer.triton_render,
                             trainer.timer)


class DynamicStep(Step):
    """The dynamic step of a single-process trainer (module docstring).

    Args:
        trainer: the :class:`~trainer.train.loop.Trainer` whose field, grid, inputs, optimiser and
            batch sizing the step uses.
    """

    prefetches = True

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        """The occupancy update's densities [N] at ``positions`` [N, 3]."""
        tr = self.trainer
        return density_without_grad(tr.field, positions, tr.device, tr.cfg.training.precision)

    def advance(self) -> StepOutcome:
        """One step (module docstring). Returns host stats, the loss and the MSE.

        Raises:
            TrainingError: when, after the occupancy warm-up, no ray sample hits an occupied cell.
        """
        tr = self.trainer
        t = tr.cfg.training
        timer = tr.timer
        tr.occupancy_refresh.maybe_update(tr.step, self.density_for_grid, tr.grid_generator)
        step_input = tr.inputs.take(tr.batch_sizing.n_rays)
        n_rays, n_samples = step_input.n_rays, step_input.n_samples
        if n_samples == 0:
            if tr.step >= t.occupancy_warmup_steps:
                raise TrainingError(
                    f"no ray sample hit an occupied cell at step {tr.step} (after the occupancy "
                    f"warm-up of {t.occupancy_warmup_steps} steps; occupied fraction "
                    f"{tr.grid.occupancy_fraction():.3g}): the scene box {tr.scene.aabb.tolist()} "
                    "may not be crossed by any camera ray, or the density is zero everywhere"
                )
            tr.step += 1
            zero = torch.zeros((), device=tr.device)
            return StepOutcome(StepStats(n_rays, 0, skipped=True, trained=False), zero, step_input.target.var())
        samples, ray_fits, n_trained, n_kept = host_training_samples(tr, step_input)
        if n_kept is not None:
            tr.batch_sizing.note_kept(n_rays, n_kept)
        with timer.phase("field_forward"):
            sigmas, rgbs = field_outputs(tr.field, samples, tr.device, t.precision)
        with timer.phase("render"):
            rgb = render_rgb(sigmas.float(), rgbs.float(), samples, step_input.background, tr.triton_render)
            rgb = appearance_rgb(tr.field, rgb, step_input.batch.image_index)
            rgb = drop_rays(rgb, ray_fits, step_input.target)
            loss, mse = loss_and_mse(rgb, step_input.target, n_rays, tr.cfg.loss)
            distortion = distortion_term(sigmas.float(), samples, n_rays, tr.distortion_weight)
            if distortion is not None:
                loss = loss + distortion
            opacity = alpha_term(sigmas.float(), samples, step_input.batch.alpha, ray_fits, n_rays, tr.alpha_weight)
            if opacity is not None:
                loss = loss + opacity
        tr.optim.backward(loss)
        skipped = tr.optim.step(tr.step)
        tr.step += 1
        if tr.compact:
            tr.batch_sizing.settle_kept(keep=KEPT_READ_LAG)
        else:
            tr.batch_sizing.resize(n_rays, n_samples)
        tr.inputs.prefetch_next(tr.batch_sizing.n_rays, tr.step, t.occupancy_update_every)
        return StepOutcome(StepStats(n_rays, n_trained, skipped=skipped), loss.detach(), mse)
