"""Where a step's input comes from: the training rays, their backgrounds and targets, and their
marched samples ("data" and "march" phases), prepared in line or one step ahead.

:func:`build_sampler` makes the trainer's :class:`~trainer.data.sampler.RaySampler` (``data``
block: placement, decoding, memory budget). :class:`StepInputs` draws from it and from the
step generator in a fixed order (pixels, sub-pixel jitter, background, march jitter), so a run
with ``training.prefetch_march`` draws exactly what a run without it draws
(:mod:`trainer.train.prefetch` says what may run ahead and why).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from trainer.contract.config import TrainConfig
from trainer.data import Frame
from trainer.data.images import PixelTable, load_pixel_table, pixel_table_nbytes
from trainer.data.sampler import MAX_DIRECTION_MAP_PIXELS, RayBatch, RaySampler, choose_placement, placement_note
from trainer.render.march import PackedSamples
from trainer.train.build import use_triton_kernels
from trainer.train.prefetch import InputPrefetcher, StepInput
from trainer.train.timing import PhaseTimer

__all__ = ["StepInputs", "build_sampler"]


def build_sampler(cfg: TrainConfig, frames: list[Frame], downscale: int, device: torch.device, seed: int,
                  pixel_table: PixelTable | None = None) -> RaySampler:
    """The ray sampler of the training ``frames``: ``data.placement`` (``auto`` from the pixel
    table's size and ``data.memory_budget_gib``; a warning says why a table that does not fit is
    streamed and names the ``--downscale`` that fits), the pixels decoded here unless
    ``pixel_table`` is given or the placement streams them, ``training.rays_backend`` resolved on
    ``device``."""
    t = cfg.training
    budget = None if cfg.data.memory_budget_gib is None else int(cfg.data.memory_budget_gib * 2**30)
    placement = cfg.data.placement
    if placement == "auto":
        nbytes = pixel_table_nbytes(frames, downscale=downscale)
        placement = choose_placement(nbytes, device, budget)
        note = placement_note(placement, nbytes, device, budget, downscale)
        if note:
            warnings.warn(note, stacklevel=3)
    if pixel_table is None and placement != "stream":
        pixel_table = load_pixel_table(
            frames,
            downscale=downscale,
            threads=cfg.data.decode_threads,
            cache_dir=Path(cfg.data.cache_dir) if cfg.data.cache_dir else None,
        )
    sampler = RaySampler(
        frames,
        pixel_table if placement != "stream" else None,
        placement=placement,
        device=device,
        seed=seed,
        memory_budget_bytes=budget,
        downscale=downscale,
        subpixel_jitter=t.subpixel_jitter,
        triton_rays=use_triton_kernels("rays_backend", t.rays_backend, device),
    )
    if t.rays_backend == "triton" and not sampler.triton_rays:
        warnings.warn(f"training.rays_backend: 'triton' does not apply to these cameras: they have lens distortion "
                      f"and their direction maps would take more than {MAX_DIRECTION_MAP_PIXELS:,} pixels; the "
                      "PyTorch path undistorts each batch", stacklevel=3)
    return sampler


class StepInputs:
    """The "data" and "march" phases of the steps that march on the host's count (module docstring).

    Args:
        sampler: the training rays.
        generator: the step generator (background colours; the march's jitter through ``march``).
        background: ``training.background``: ``random`` (a colour per ray), ``white`` or ``black``.
        device: the training device.
        timer: the run's phase timer.
        march: ``march(rays_o, rays_d, jitter=True)`` → :class:`PackedSamples` (the trainer's march).
        prefetcher: the :class:`InputPrefetcher` of ``training.prefetch_march``, else None.
    """

    def __init__(self, sampler: RaySampler, generator: torch.Generator, background: str, device: torch.device,
                 timer: PhaseTimer, march: Callable[..., PackedSamples], prefetcher: InputPrefetcher | None) -> None:
        self.sampler = sampler
        self.generator = generator
        self.device = device
        self.timer = timer
        self.march = march
        self.prefetcher = prefetcher
        self.random_background = background == "random"
        self.fixed_background = torch.tensor([1.0, 1.0, 1.0] if background == "white" else [0.0, 0.0, 0.0],
                                             device=device)

    def draw_batch(self, n_rays: int) -> RayBatch:
        """The step's ``n_rays`` training rays (0: an empty batch, nothing drawn; a data-parallel
        rank may get no rays)."""
        if n_rays > 0:
            return self.sampler.sample(n_rays)
        z3 = torch.zeros(0, 3, device=self.device)
        return RayBatch(z3, z3.clone(), z3.clone(), torch.zeros(0, 1, device=self.device),
                        torch.zeros(0, dtype=torch.long, device=self.device))

    def background_and_target(self, batch: RayBatch, n_rays: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The background colours [n_rays, 3] float32 of the step and the batch's colours
        composited on them (``rgb·alpha + bg·(1 − alpha)``), [n_rays, 3]."""
        if self.random_background:
            background = torch.rand(n_rays, 3, device=self.device, generator=self.generator)
        else:
            background = self.fixed_background.expand(n_rays, 3)
        target = batch.rgb * batch.alpha + background * (1.0 - batch.alpha)
        return background, target

    def prepare(self, n_rays: int) -> StepInput:
        """The "data" and "march" phases: ``n_rays`` rays, their backgrounds and targets, and their
        jittered samples with the sample count read on the host (a sync on the current stream)."""
        with self.timer.phase("data"):
            batch = self.draw_batch(n_rays)
            background, target = self.background_and_target(batch, n_rays)
        with self.timer.phase("march"):
            samples = self.march(batch.rays_o, batch.rays_d, jitter=True)
            n_samples = int(samples.ray_indices.shape[0])
        return StepInput(batch, n_rays, background, target, samples, n_samples)

    def take(self, n_rays: int) -> StepInput:
        """The input of the current step: the one prefetched during the previous step when it
        holds ``n_rays`` rays, else prepared now (a mismatching prefetch is rewound first)."""
        if self.prefetcher is not None:
            step_input = self.prefetcher.take(n_rays)
            if step_input is not None:
                return step_input
            self.rewind()
        return self.prepare(n_rays)

    def prefetch_next(self, n_rays: int, next_step: int, occupancy_update_every: int) -> None:
        """Prepare the input of step ``next_step`` now (``training.prefetch_march``), unless that
        step starts with an occupancy update (the march must see the updated grid)."""
        if self.prefetcher is None or next_step % occupancy_update_every == 0:
            return
        self.prefetcher.prefetch(lambda: self.prepare(n_rays), self.draw_state())

    def draw_state(self) -> dict[str, Any]:
        """States of the generators a step input draws from (step generator, sampler)."""
        return {"generator": self.generator.get_state(), "sampler": self.sampler.rng_state()}

    def rewind(self) -> None:
        """Drop a pending prefetched input and rewind the random draws it made."""
        dropped = self.prefetcher.drop() if self.prefetcher is not None else None
        if dropped is not None and dropped.rng_before is not None:
            self.generator.set_state(dropped.rng_before["generator"])
            self.sampler.set_rng_state(dropped.rng_before["sampler"])

    def drop(self) -> None:
        """Forget a pending prefetched input without rewinding (random states about to be set)."""
        if self.prefetcher is not None:
            self.prefetcher.drop()

    def grid_written(self) -> None:
        """The occupancy grid was just updated (queued on the current stream): a later prefetch
        waits for that point."""
        if self.prefetcher is not None:
            self.prefetcher.mark_shared_state_written()
