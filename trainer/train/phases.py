"""The phases every training step shares, as functions of their inputs (DESIGN.md §2): the field's
outputs, densities without gradient, compaction of marched samples, compositing, the per-image
colour map of ``training.appearance``, the photometric loss, and the occupancy-grid refresh at its
cadence.

Each step (:mod:`trainer.train.step`) arranges these with its own batch, its own counts and its
own collectives; what they compute is the same in all of them.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from trainer.contract.config import LossConfig, TrainingConfig
from trainer.render.compact import compact_samples, kept_counts
from trainer.render.march import PackedSamples
from trainer.render.occupancy import OccupancyGrid
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE, composite
from trainer.train.loss import photometric_loss
from trainer.train.precision import autocast
from trainer.train.prefetch import StepInput
from trainer.train.timing import PhaseTimer

__all__ = ["OccupancyRefresh", "alpha_term", "appearance_rgb", "compacted_samples", "density_without_grad",
           "distortion_term", "field_outputs", "loss_and_mse", "render_rgb"]


def field_outputs(field: torch.nn.Module, samples: PackedSamples, device: torch.device,
                  precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The field's densities [S] and colours [S, 3] at ``samples`` (with gradients, under the
    autocast of ``training.precision``)."""
    with autocast(device, precision):
        return field(samples.positions, samples.directions)


def density_without_grad(field: torch.nn.Module, positions: torch.Tensor, device: torch.device, precision: str,
                         count: torch.Tensor | None = None) -> torch.Tensor:
    """Densities [N] float32 at ``positions`` [N, 3] without gradient (occupancy update,
    compaction); with ``count`` (device scalar) only the first ``count`` rows are read."""
    with torch.no_grad(), autocast(device, precision):
        if count is None:
            return field.density(positions).float()
        return field.density(positions, count).float()


def render_rgb(sigmas: torch.Tensor, rgbs: torch.Tensor, samples: PackedSamples, background: torch.Tensor,
               triton: bool) -> torch.Tensor:
    """Ray colours [n_rays, 3] of densities ``sigmas`` [S] and colours ``rgbs`` [S, 3] (float32)
    at ``samples`` over ``background`` [n_rays, 3]: the Triton compositing kernels
    (``training.render_backend``) or :func:`~trainer.render.volrend.composite`, their twin."""
    if triton:
        from trainer.render.triton_volrend import composite_rgb_triton

        return composite_rgb_triton(sigmas, rgbs, samples.dt, samples.packed_info, background,
                                    EARLY_STOP_TRANSMITTANCE)
    return composite(sigmas, rgbs, samples.dt, samples.ray_indices, samples.n_rays, background).rgb


def appearance_rgb(field: torch.nn.Module, rgb: torch.Tensor, image_index: torch.Tensor) -> torch.Tensor:
    """Ray colours ``rgb`` [n_rays, 3] as their training images record them: the field's per-image
    colour map (``training.appearance``, :mod:`trainer.model.appearance`) for rays of images
    ``image_index`` [n_rays] int64, float32; ``rgb`` unchanged when the field has none (appearance
    off, or a subgrid model)."""
    appearance = getattr(field, "appearance", None)
    return rgb if appearance is None else appearance(rgb, image_index)


def loss_and_mse(rgb: torch.Tensor, target: torch.Tensor, n_rays: int | torch.Tensor,
                 loss_cfg: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of rendered colours ``rgb`` [n, 3] against ``target`` [n, 3], normalised per
    channel and ray (``/ (3 · n_rays)``), and their mean squared error (detached), 0-dim each."""
    loss = photometric_loss(rgb, target, loss_cfg) / (n_rays * 3)
    mse = ((rgb.detach() - target) ** 2).mean()
    return loss, mse


def distortion_term(sigmas: torch.Tensor, samples: PackedSamples, n_rays: int | torch.Tensor,
                    weight: float) -> torch.Tensor | None:
    """``weight`` (the trainer's resolved ``loss.distortion_weight``) times the distortion of
    densities ``sigmas`` [S] float32 at ``samples``
    (:func:`trainer.render.distortion.distortion_loss` over the compositing weights, early stop
    included) summed over the rays and divided by ``n_rays``, a 0-dim tensor; None when the weight
    is 0."""
    if weight <= 0:
        return None
    from trainer.render.distortion import distortion_loss
    from trainer.render.volrend import render_weights

    weights, _, _ = render_weights(sigmas, samples.dt, samples.ray_indices, samples.n_rays)
    per_ray = distortion_loss(weights, samples.t, samples.dt, samples.ray_indices, samples.n_rays)
    return per_ray.sum() * (weight / n_rays)


def alpha_term(sigmas: torch.Tensor, samples: PackedSamples, alpha: torch.Tensor, ray_ok: torch.Tensor | None,
               n_rays: int | torch.Tensor, weight: float) -> torch.Tensor | None:
    """``weight`` (the trainer's resolved ``loss.alpha_weight``) times the squared difference
    between each ray's accumulated opacity ``1 − exp(−Σ σ·Δt)`` over ``samples`` (densities
    ``sigmas`` [S] float32, padding with Δt = 0 adds nothing) and its pixel's alpha ``alpha``
    [n_rays, 1] in [0, 1], summed over the rays ``ray_ok`` [n_rays] bool (None: all) and divided
    by ``n_rays``: a 0-dim tensor; None when the weight is 0. The opacity is the compositing's
    ``1 − T`` (volume rendering, Max 1995) up to the early stop's T < 1e-4."""
    if weight <= 0:
        return None
    optical_depth = torch.zeros(samples.n_rays, dtype=torch.float32, device=sigmas.device)
    optical_depth = optical_depth.index_add(0, samples.ray_indices, sigmas * samples.dt)
    opacity = 1.0 - torch.exp(-optical_depth)
    squared = (opacity - alpha.reshape(-1).float()) ** 2
    if ray_ok is not None:
        squared = torch.where(ray_ok, squared, 0.0)
    return squared.sum() * (weight / n_rays)


def compacted_samples(
    step_input: StepInput, density: Callable[[torch.Tensor], torch.Tensor], capacity: Callable[[int, int], int],
    triton: bool, timer: PhaseTimer,
) -> tuple[PackedSamples, torch.Tensor, int, torch.Tensor]:
    """The "compact" phase (``training.compact_samples``, :mod:`trainer.render.compact`): a
    density pass without gradients over the marched samples, each ray's samples in front of its
    early stop (T ≥ 1e-4), whole rays of them in a batch of ``capacity(n_rays, n_marched)``
    samples. Needs at least one marched sample.

    Args:
        step_input: the step's rays and marched samples.
        density: densities [S] float32 without gradient at positions [S, 3].
        capacity: samples of the batch from the rays and the marched count (host ints).
        triton: the Triton kernels of ``training.render_backend``.
        timer: the run's phase timer.

    Returns:
        The batch's samples, ``ray_fits`` [n_rays] bool (the rays in the batch), the batch's
        capacity (host int) and the kept count before the capacity cut (device scalar; it sizes a
        later step's rays).
    """
    samples = step_input.samples
    with timer.phase("compact"):
        with torch.no_grad():
            sigmas = density(samples.positions)
            if triton:
                from trainer.render.triton_volrend import kept_counts_triton

                kept = kept_counts_triton(sigmas, samples.dt, samples.packed_info, EARLY_STOP_TRANSMITTANCE)
            else:
                kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
            n_capacity = capacity(step_input.n_rays, step_input.n_samples)
            compacted = compact_samples(samples, kept, n_capacity, triton=triton)
    return compacted.samples, compacted.ray_fits, n_capacity, compacted.n_kept


class OccupancyRefresh:
    """The "occupancy_update" phase: every ``training.occupancy_update_every`` steps, at the start
    of the step, the grid's EMA max-update from the field's densities
    (:meth:`~trainer.render.occupancy.OccupancyGrid.update`).

    Args:
        grid: the occupancy grid.
        t: the ``training`` block (cadence, warm-up).
        timer: the run's phase timer.
        inputs: the step inputs (a prefetched input is rewound before the grid changes, and later
            prefetches wait for the update), or None.
    """

    def __init__(self, grid: OccupancyGrid, t: TrainingConfig, timer: PhaseTimer, inputs: Any = None) -> None:
        self.grid = grid
        self.every = t.occupancy_update_every
        self.warmup_steps = t.occupancy_warmup_steps
        self.timer = timer
        self.inputs = inputs

    def due(self, step: int) -> bool:
        """Whether step ``step`` starts with an update."""
        return step % self.every == 0

    def maybe_update(self, step: int, density: Callable[[torch.Tensor], torch.Tensor],
                     generator: torch.Generator) -> None:
        """Update the grid when step ``step`` is due: cells and points drawn from ``generator``,
        densities [N] from ``density`` at positions [N, 3]."""
        if not self.due(step):
            return
        if self.inputs is not None:
            self.inputs.rewind()  # (none is made for such a step; the grid is about to change)
        with self.timer.phase("occupancy_update"):
            self.grid.update(step, density, warmup_steps=self.warmup_steps, generator=generator)
        if self.inputs is not None:
            self.inputs.grid_written()
