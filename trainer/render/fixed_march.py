"""Ray marching into buffers of a fixed sample capacity (the march of a fixed-capacity step).

:func:`~trainer.render.march.march_rays` sizes its output on the host (the total sample count is
read back), so every step's tensors have another shape. A step that a CUDA graph replays needs
shapes that never change and no host read. :func:`march_fixed` marches ``n_rays`` rays (a fixed
number; rays the step does not use carry NaN origins, which every march treats as a miss) into
:class:`MarchBuffers` of ``capacity`` slots:

* rays are taken in order while their samples fit whole; the others get no sample, are marked in
  ``ray_fits`` and their samples counted in ``n_clipped`` (never read on the host here);
* the unused slots after the last sample (the tail) hold what earlier steps marched there (finite
  points: the buffers start at zero and only ever receive marched samples, distinct positions for
  the hash-grid kernels), with ``dt = 0``, so they carry zero weight and zero gradient; their ray
  index is the last ray's (the sorted layout stays valid) and ``packed_info`` leaves them out, so
  both compositing paths ignore them. Nothing is copied per step: the samples are the buffers.

The Triton backend (:func:`trainer.render.triton_march.march_fixed_triton`) does this in two
launches and no host read. The PyTorch backend (the twin) marches with
:func:`~trainer.render.march.march_rays` and copies its output into the buffers, which reads the
sample count on the host: it is for the CPU, where no device waits.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from trainer.render.march import PackedSamples, march_rays
from trainer.render.occupancy import OccupancyGrid

__all__ = ["FixedSamples", "MarchBuffers", "march_fixed"]


class MarchBuffers:
    """The marched-sample buffers of one fixed-capacity step, allocated once.

    Args:
        capacity: C, samples the buffers hold (>= 1).
        device: where they live.

    Attributes:
        t, dt: [C] float32; ray_indices: [C] int64; positions, directions: [C, 3] float32
            (zeros at first, so an unused slot is always a finite point).
        slot: [C] int64, ``arange(C)``.
    """

    def __init__(self, capacity: int, device: torch.device) -> None:
        if capacity < 1:
            raise ValueError(f"MarchBuffers: capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.t = torch.zeros(capacity, device=device)
        self.dt = torch.zeros(capacity, device=device)
        self.ray_indices = torch.zeros(capacity, dtype=torch.int64, device=device)
        self.positions = torch.zeros(capacity, 3, device=device)
        self.directions = torch.zeros(capacity, 3, device=device)
        self.slot = torch.arange(capacity, device=device)

    def outputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(t, dt, ray_indices, positions, directions)``, the order the march writes."""
        return self.t, self.dt, self.ray_indices, self.positions, self.directions


@dataclasses.dataclass
class FixedSamples:
    """The output of :func:`march_fixed` (every tensor on the device, shapes fixed).

    Attributes:
        samples: :class:`PackedSamples` of ``capacity`` slots over the ``n_rays`` rays; the tail
            slots (``~valid``) have ``dt = 0`` and are not in ``packed_info``.
        valid: [C] bool, the slots holding marched samples.
        ray_fits: [n_rays] bool, whether all of the ray's samples are in ``samples``.
        n_valid: [] int64, samples in the buffers.
        n_clipped: [] int64, samples of the rays that did not fit.
    """

    samples: PackedSamples
    valid: Tensor
    ray_fits: Tensor
    n_valid: Tensor
    n_clipped: Tensor


def march_fixed(
    rays_o: Tensor,
    rays_d: Tensor,
    aabb: Tensor,
    grid: OccupancyGrid | None,
    buffers: MarchBuffers,
    *,
    step_size: float,
    cone_angle: float,
    max_steps: int,
    max_step_size: float,
    generator: torch.Generator | None,
    backend: str = "torch",
    rule: Tensor | None = None,
    near: float = 0.0,
    background_steps: int = 0,
) -> FixedSamples:
    """March ``rays_o``/``rays_d`` [n_rays, 3] float32 into ``buffers`` (module docstring).

    The step rule and the jitter are those of :func:`~trainer.render.march.march_rays` (one
    uniform draw per ray from ``generator``, none with ``generator`` None).

    Args:
        backend: ``"triton"`` (two launches, no host read; needs ``rule`` from
            :func:`trainer.render.triton_march.march_rule_tensor`) or ``"torch"``.
        near: smallest distance along a ray (>= 0), as in ``march_rays``.
        background_steps: steps past the box, uniform in disparity (the unbounded scene model),
            as in ``march_rays``; 0 stops at the box.

    Raises:
        ValueError: for rays of another shape, or an unknown backend.
    """
    n_rays = rays_o.shape[0]
    if rays_o.ndim != 2 or rays_o.shape[-1] != 3 or rays_d.shape != rays_o.shape or n_rays < 1:
        raise ValueError(f"march_fixed: rays must be [n_rays >= 1, 3], got {tuple(rays_o.shape)} and {tuple(rays_d.shape)}")
    device = rays_o.device
    if backend == "triton":
        from trainer.render.triton_march import march_fixed_triton

        u = torch.rand(n_rays, device=device, dtype=rays_o.dtype, generator=generator) if generator is not None else None
        box = aabb.to(device=device, dtype=torch.float32).reshape(6)
        counts, all_counts = march_fixed_triton(rays_o, rays_d, box, rule, u, grid, buffers.outputs(),
                                                cone_angle=cone_angle, max_steps=max_steps, near=near,
                                                background_steps=background_steps)
    elif backend == "torch":
        counts, all_counts = _march_fixed_torch(rays_o, rays_d, aabb, grid, buffers, step_size=step_size,
                                                cone_angle=cone_angle, max_steps=max_steps,
                                                max_step_size=max_step_size, generator=generator, near=near,
                                                background_steps=background_steps)
    else:
        raise ValueError(f"march_fixed: backend must be 'torch' or 'triton', got {backend!r}")
    n_valid = counts.sum()
    n_clipped = all_counts.sum() - n_valid
    start = torch.cumsum(counts, 0) - counts
    valid = buffers.slot < n_valid
    samples = PackedSamples(
        positions=buffers.positions,
        directions=buffers.directions,
        t=buffers.t,
        dt=torch.where(valid, buffers.dt, 0.0),
        ray_indices=torch.where(valid, buffers.ray_indices, n_rays - 1),
        packed_info=torch.stack((start, counts), dim=-1),
        n_rays=n_rays,
    )
    return FixedSamples(samples, valid, counts == all_counts, n_valid, n_clipped)


def _march_fixed_torch(rays_o: Tensor, rays_d: Tensor, aabb: Tensor, grid: OccupancyGrid | None,
                       buffers: MarchBuffers, *, step_size: float, cone_angle: float, max_steps: int,
                       max_step_size: float, generator: torch.Generator | None,
                       near: float = 0.0, background_steps: int = 0) -> tuple[Tensor, Tensor]:
    """The PyTorch twin of ``march_fixed_triton``: the reference march, its whole rays copied in."""
    marched = march_rays(rays_o, rays_d, aabb, grid, step_size=step_size, cone_angle=cone_angle,
                         max_steps=max_steps, max_step_size=max_step_size, jitter=generator is not None,
                         generator=generator, near=near, backend="torch", background_steps=background_steps)
    all_counts = marched.packed_info[:, 1]
    counts = torch.where(torch.cumsum(all_counts, 0) <= buffers.capacity, all_counts, 0)
    n = int(counts.sum())  # the host read of the twin (module docstring)
    if n:
        buffers.t[:n] = marched.t[:n]
        buffers.dt[:n] = marched.dt[:n]
        buffers.ray_indices[:n] = marched.ray_indices[:n]
        buffers.positions[:n] = marched.positions[:n]
        buffers.directions[:n] = marched.directions[:n]
    return counts, all_counts
