"""The distortion regulariser of packed samples: it pulls each ray's compositing weights together
into one compact interval, so haze spread along a ray (the fog a capture with background leaves
in front of the cameras) costs loss, and the occupancy grid can empty the cells it filled.

Reference: Barron et al. 2022, *Mip-NeRF 360*, eq. 15 (the loss) and its O(N) form from
sorted intervals (their supplement): for a ray with weights ``w_i`` on intervals of midpoint
``s_i`` and length ``δs_i`` (front to back),

.. math::
    L = \\sum_{i,j} w_i w_j |s_i - s_j| + \\frac{1}{3} \\sum_i w_i^2 δs_i
      = 2 \\sum_i w_i \\big(s_i W_{<i} - S_{<i}\\big) + \\frac{1}{3} \\sum_i w_i^2 δs_i,

with ``W_{<i} = Σ_{j<i} w_j`` and ``S_{<i} = Σ_{j<i} w_j s_j``. Distances are normalised so that
the background does not dominate: ``s = t / (1 + t)`` (``t`` in scene-box units), linear near the
camera and tending to 1 far away, as mip-NeRF 360 measures the loss in a normalised ray distance
rather than in metres. :func:`distortion_loss` computes the O(N) form with packed prefix sums;
:func:`distortion_reference` the double sum per ray, its slow twin.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["distortion_loss", "distortion_reference", "normalised_distance"]


def normalised_distance(t: Tensor) -> Tensor:
    """``s = t / (1 + t)`` of distances ``t`` >= 0 (scene-box units), in [0, 1)."""
    return t / (1.0 + t)


def distortion_loss(weights: Tensor, t: Tensor, dt: Tensor, ray_indices: Tensor, n_rays: int) -> Tensor:
    """Per-ray distortion of packed samples (module docstring), differentiable in ``weights``.

    Args:
        weights: [S] compositing weights ``w_i`` (float32; 0 for padding and early-stopped samples).
        t: [S] distance of each sample's interval midpoint along its ray (scene-box units).
        dt: [S] the interval's length (scene-box units; 0 for padding).
        ray_indices: [S] int64, sorted ascending (packed layout).
        n_rays: number of rays.

    Returns:
        [n_rays] float32, each ray's distortion (0 for rays without samples). The prefix sums run
        over all samples in float64 and subtract their value at the ray's first sample, as
        :func:`trainer.render.volrend.render_weights` does; nothing is read on the host.

    Raises:
        ValueError: if the shapes do not match.
    """
    if not (weights.ndim == 1 and t.shape == weights.shape == dt.shape == ray_indices.shape):
        raise ValueError(f"distortion_loss: weights, t, dt and ray_indices must all be [S], got "
                         f"{tuple(weights.shape)}, {tuple(t.shape)}, {tuple(dt.shape)}, {tuple(ray_indices.shape)}")
    s_start = normalised_distance((t - 0.5 * dt).clamp_min(0.0))
    s_end = normalised_distance(t + 0.5 * dt)
    s_mid = 0.5 * (s_start + s_end)
    w = weights.double()
    first = torch.searchsorted(ray_indices, ray_indices)

    def exclusive(values: Tensor) -> Tensor:  # Σ over the earlier samples of the same ray
        before = torch.cumsum(values, dim=0) - values
        return before - before[first]

    s = s_mid.double()
    cross = 2.0 * w * (s * exclusive(w) - exclusive(w * s))
    own = w * w * (s_end - s_start).double() / 3.0
    per_ray = torch.zeros(n_rays, dtype=torch.float64, device=weights.device)
    return per_ray.index_add(0, ray_indices, cross + own).to(weights.dtype)


def distortion_reference(weights: Tensor, t: Tensor, dt: Tensor, ray_indices: Tensor, n_rays: int) -> Tensor:
    """:func:`distortion_loss` from its definition: the double sum over each ray's intervals
    (``|s_i − s_j|`` between midpoints, plus ``w_i² δs_i / 3``), one ray at a time in float64.
    Slow; for tests."""
    s_start = normalised_distance((t - 0.5 * dt).clamp_min(0.0)).double()
    s_end = normalised_distance(t + 0.5 * dt).double()
    s_mid = 0.5 * (s_start + s_end)
    w = weights.double()
    out = torch.zeros(n_rays, dtype=torch.float64, device=weights.device)
    for ray in range(n_rays):
        mine = (ray_indices == ray).nonzero().squeeze(-1)
        if mine.numel() == 0:
            continue
        wi, si = w[mine], s_mid[mine]
        pairs = (wi[:, None] * wi[None, :] * (si[:, None] - si[None, :]).abs()).sum()
        out[ray] = pairs + (wi * wi * (s_end[mine] - s_start[mine])).sum() / 3.0
    return out.to(weights.dtype)
