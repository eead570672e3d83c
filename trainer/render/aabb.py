"""Ray / axis-aligned box intersection (the slab method).

Reference: Kay & Kajiya, *Ray tracing complex scenes*, SIGGRAPH 1986 (slabs); instant-ngp
``BoundingBox::ray_intersect`` (``include/neural-graphics-primitives/bounding_box.cuh``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def scene_aabb(aabb_scale: float, *, device: torch.device | str | None = None) -> Tensor:
    """The scene box of instant-ngp: the unit cube scaled by ``aabb_scale`` around (0.5, 0.5, 0.5).

    Args:
        aabb_scale: side length of the box in unit-cube world units (a power of two in scenes).
        device: where the result lives.

    Returns:
        aabb: [2, 3] float32, row 0 the min corner, row 1 the max corner.
    """
    half = 0.5 * float(aabb_scale)
    return torch.tensor([[0.5 - half] * 3, [0.5 + half] * 3], dtype=torch.float32, device=device)


def ray_aabb_intersect(
    rays_o: Tensor, rays_d: Tensor, aabb: Tensor, near: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """Distances at which rays enter and leave an axis-aligned box.

    Per axis the ray is inside the slab ``lo ≤ o + t·d ≤ hi`` for ``t`` between
    ``(lo − o)/d`` and ``(hi − o)/d``; the ray is inside the box on the intersection of the
    three intervals. A direction component equal to zero gives the whole real line when the
    origin lies inside that slab (boundary included) and the empty set otherwise (no 0·∞).

    The entry distance is clamped at ``near`` (a ray that starts inside the box enters at
    ``near``); a ray hits the box when its clamped interval is not empty and finite,
    ``t_near < t_far``. For missed rays both distances are set to ``near``, so ``t_far − t_near``
    is 0 and no sample is marched on them.

    Args:
        rays_o: [n_rays, 3] float, ray origins in world units.
        rays_d: [n_rays, 3] float, ray directions; distances are in units of ``|rays_d|`` (world
            units for unit directions, as :class:`trainer.data.sampler.RayBatch` gives).
        aabb: [2, 3] float, the box's min corner (row 0) and max corner (row 1).
        near: smallest distance along a ray that counts (≥ 0).

    Returns:
        t_near: [n_rays], same dtype as ``rays_o``: entry distance (≥ ``near``).
        t_far: [n_rays]: exit distance.
        hit: [n_rays] bool: True where ``near ≤ t_near < t_far < ∞``.

    Raises:
        ValueError: if the shapes are not as above or ``near`` is negative.

    Example:
        >>> o = torch.tensor([[-1.0, 0.5, 0.5]]); d = torch.tensor([[1.0, 0.0, 0.0]])
        >>> ray_aabb_intersect(o, d, torch.tensor([[0.0] * 3, [1.0] * 3]))
        (tensor([1.]), tensor([2.]), tensor([True]))
    """
    if rays_o.ndim != 2 or rays_o.shape[-1] != 3 or rays_d.shape != rays_o.shape:
        raise ValueError(
            f"ray_aabb_intersect: rays_o and rays_d must both be [n_rays, 3], "
            f"got {tuple(rays_o.shape)} and {tuple(rays_d.shape)}"
        )
    if aabb.shape != (2, 3):
        raise ValueError(f"ray_aabb_intersect: aabb must be [2, 3], got {tuple(aabb.shape)}")
    if not near >= 0.0:
        raise ValueError(f"ray_aabb_intersect: near must be >= 0, got {near!r}")

    aabb = aabb.to(device=rays_o.device, dtype=rays_o.dtype)
    lo, hi = aabb[0], aabb[1]
    parallel = rays_d == 0
    safe_d = torch.where(parallel, torch.ones_like(rays_d), rays_d)
    t_lo = (lo - rays_o) / safe_d
    t_hi = (hi - rays_o) / safe_d
    inf = torch.full_like(t_lo, float("inf"))
    in_slab = (rays_o >= lo) & (rays_o <= hi)
    t_enter_axis = torch.where(parallel, torch.where(in_slab, -inf, inf), torch.minimum(t_lo, t_hi))
    t_exit_axis = torch.where(parallel, torch.where(in_slab, inf, -inf), torch.maximum(t_lo, t_hi))

    t_near = t_enter_axis.amax(dim=-1).clamp_min(near)
    t_far = t_exit_axis.amin(dim=-1)
    hit = (t_near < t_far) & torch.isfinite(t_far)
    near_t = torch.full_like(t_near, near)
    return torch.where(hit, t_near, near_t), torch.where(hit, t_far, near_t), hit
