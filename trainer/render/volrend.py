"""Volume rendering of packed samples: transmittance, weights, colour, background.

Reference: Max, *Optical models for direct volume rendering*, 1995; Mildenhall et al. 2020, *NeRF*,
eq. 3; instant-ngp ``src/testbed_nerf.cu`` (``compute_loss_kernel_train_nerf``: compositing with
early termination at transmittance < 1e-4); nerfacc ``volrend.py`` for the packed formulation;
Li et al. 2024, *NeRF-XL*, eq. 5-7 for compositing ray segments rendered separately (DESIGN.md §3).

Samples are packed (see :class:`trainer.render.march.PackedSamples`): ``ray_indices`` [S] is
sorted ascending and a ray's samples are contiguous and ordered front to back. Every function here
is differentiable with respect to ``sigmas`` and ``rgbs``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

#: instant-ngp stops compositing a ray once its transmittance falls below this.
EARLY_STOP_TRANSMITTANCE = 1e-4


class RenderedRays(NamedTuple):
    """Per-ray results of :func:`composite`.

    Attributes:
        rgb: [n_rays, 3] colour ``Σ_i w_i c_i + T_final·bg``.
        opacity: [n_rays] accumulated weight ``Σ_i w_i`` (= 1 − T_final).
        depth: [n_rays] expected distance ``Σ_i w_i t_i`` (not divided by the opacity), or None
            when no ``t`` was given.
        transmittance: [n_rays] ``T_final``, the transmittance left after the last composited
            sample (1 for rays without samples).
    """

    rgb: Tensor
    opacity: Tensor
    depth: Tensor | None
    transmittance: Tensor


def _check_packed(sigmas: Tensor, dt: Tensor, ray_indices: Tensor, n_rays: int, where: str) -> None:
    if sigmas.ndim != 1 or dt.shape != sigmas.shape or ray_indices.shape != sigmas.shape:
        raise ValueError(
            f"{where}: sigmas, dt and ray_indices must all be [S], got {tuple(sigmas.shape)}, "
            f"{tuple(dt.shape)} and {tuple(ray_indices.shape)}"
        )
    if n_rays < 0:
        raise ValueError(f"{where}: n_rays must be >= 0, got {n_rays}")


def render_weights(
    sigmas: Tensor,
    dt: Tensor,
    ray_indices: Tensor,
    n_rays: int,
    early_stop_transmittance: float = EARLY_STOP_TRANSMITTANCE,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compositing weights of packed samples.

    .. math::
        α_i = 1 − \\exp(−σ_i Δt_i), \\quad
        T_i = \\prod_{j<i} (1 − α_j) = \\exp\\Big(−\\sum_{j<i} σ_j Δt_j\\Big), \\quad
        w_i = T_i α_i,

    with ``j`` running over the earlier samples of the same ray. The exclusive sum is one
    cumulative sum over all samples minus its value at the ray's first sample, computed in
    float64 so that the subtraction does not cancel across rays. Samples with
    ``T_i < early_stop_transmittance`` get weight 0, as if marching had stopped there
    (instant-ngp); pass 0 to composite every sample.

    Args:
        sigmas: [S] densities σ ≥ 0 (1/world units).
        dt: [S] step lengths Δt (world units).
        ray_indices: [S] int64, sorted ascending (packed layout).
        n_rays: number of rays (rays without samples included).
        early_stop_transmittance: transmittance below which samples no longer contribute.

    Returns:
        weights: [S] w_i, dtype of ``sigmas``.
        transmittance: [S] T_i, the transmittance in front of each sample.
        alphas: [S] α_i.

    Raises:
        ValueError: if the shapes do not match.

    Example:
        >>> w, t, a = render_weights(torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.5]),
        ...                          torch.tensor([0, 0]), n_rays=1)
        >>> torch.allclose(w, torch.tensor([0.3935, 0.2387]), atol=1e-4)
        True
    """
    _check_packed(sigmas, dt, ray_indices, n_rays, "render_weights")
    optical_thickness = sigmas * dt
    inclusive = torch.cumsum(optical_thickness.double(), dim=0)
    exclusive = inclusive - optical_thickness.double()
    # first sample of each sample's ray: ray_indices is sorted, so a binary search finds it without
    # the host sync of bincount (which reads the largest index back to size its output)
    ray_first_sample = torch.searchsorted(ray_indices, ray_indices)
    optical_depth = exclusive - exclusive[ray_first_sample]
    transmittance = torch.exp(-optical_depth).to(sigmas.dtype)
    alphas = -torch.expm1(-optical_thickness)
    weights = transmittance * alphas
    if early_stop_transmittance > 0:
        weights = weights * (transmittance >= early_stop_transmittance)
    return weights, transmittance, alphas


def _sum_per_ray(values: Tensor, ray_indices: Tensor, n_rays: int) -> Tensor:
    """[n_rays, ...] sums of the samples' ``values`` [S, ...] per ray (differentiable)."""
    out = torch.zeros((n_rays, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add(0, ray_indices, values)


def _background(background: Tensor | None, n_rays: int, like: Tensor) -> Tensor | None:
    if background is None:
        return None
    if background.shape == (3,):
        return background.to(like).expand(n_rays, 3)
    if background.shape == (n_rays, 3):
        return background.to(like)
    raise ValueError(f"composite: background must be [3] or [{n_rays}, 3], got {tuple(background.shape)}")


def composite(
    sigmas: Tensor,
    rgbs: Tensor,
    dt: Tensor,
    ray_indices: Tensor,
    n_rays: int,
    background: Tensor | None = None,
    *,
    t: Tensor | None = None,
    early_stop_transmittance: float = EARLY_STOP_TRANSMITTANCE,
) -> RenderedRays:
    """Composite packed samples into ray colours (NeRF eq. 3 with a background term).

    .. math::
        C = \\sum_i w_i c_i + T_{final} · bg, \\quad T_{final} = \\exp\\Big(−\\sum_{i \\in kept}
        σ_i Δt_i\\Big),

    where the kept samples are those with ``T_i ≥ early_stop_transmittance`` (all with 0), so that
    ``Σ w_i + T_final = 1``. ``T_final`` is summed in float64.

    Args:
        sigmas: [S] densities σ ≥ 0.
        rgbs: [S, 3] sample colours in [0, 1].
        dt: [S] step lengths.
        ray_indices: [S] int64 sorted ascending.
        n_rays: number of rays.
        background: [3] or [n_rays, 3] background colour, or None for none (black).
        t: [S] sample distances, for the depth output.
        early_stop_transmittance: see :func:`render_weights`.

    Returns:
        :class:`RenderedRays` (rgb [n_rays, 3], opacity [n_rays], depth [n_rays] or None,
        transmittance [n_rays]).

    Raises:
        ValueError: if the shapes do not match.
    """
    if rgbs.shape != (sigmas.shape[0], 3):
        raise ValueError(f"composite: rgbs must be [{sigmas.shape[0]}, 3], got {tuple(rgbs.shape)}")
    if t is not None and t.shape != sigmas.shape:
        raise ValueError(f"composite: t must be [{sigmas.shape[0]}], got {tuple(t.shape)}")
    bg = _background(background, n_rays, rgbs)
    weights, transmittance, _ = render_weights(sigmas, dt, ray_indices, n_rays, early_stop_transmittance)

    rgb = _sum_per_ray(weights.unsqueeze(-1) * rgbs, ray_indices, n_rays)
    opacity = _sum_per_ray(weights, ray_indices, n_rays)
    depth = None if t is None else _sum_per_ray(weights * t, ray_indices, n_rays)
    kept_thickness = (sigmas * dt).double()
    if early_stop_transmittance > 0:
        kept_thickness = kept_thickness * (transmittance >= early_stop_transmittance)
    total_depth = _sum_per_ray(kept_thickness, ray_indices, n_rays)
    final_transmittance = torch.exp(-total_depth).to(weights.dtype)
    if bg is not None:
        rgb = rgb + final_transmittance.unsqueeze(-1) * bg
    return RenderedRays(rgb, opacity, depth, final_transmittance)


def composite_segment(
    sigmas: Tensor, rgbs: Tensor, dt: Tensor, ray_indices: Tensor, n_rays: int
) -> tuple[Tensor, Tensor]:
    """Composite one segment of each ray (the samples inside one subgrid box, DESIGN.md §3).

    .. math::
        C_k = \\sum_{i \\in k} T_i^{(k)} α_i c_i, \\quad A_k = \\prod_{i \\in k} (1 − α_i),

    with the transmittance ``T^{(k)}`` restarted at 1 where the ray enters the segment and no
    background. No early termination: a segment cannot know the transmittance in front of it,
    and compositing the segments with :func:`composite_segments` is then exact.

    Args:
        sigmas, rgbs, dt, ray_indices, n_rays: the segment's packed samples, as for
            :func:`composite`.

    Returns:
        rgb: [n_rays, 3] C_k (0 for rays without samples in the segment).
        transmittance: [n_rays] A_k (1 for rays without samples in the segment).
    """
    out = composite(sigmas, rgbs, dt, ray_indices, n_rays, None, early_stop_transmittance=0.0)
    return out.rgb, out.transmittance


def composite_segments(
    segment_rgb: Tensor, segment_transmittance: Tensor, background: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Composite per-segment results front to back (NeRF-XL, Li et al. 2024, eq. 7).

    .. math::
        C = \\sum_k \\Big(\\prod_{j<k} A_j\\Big) C_k + \\Big(\\prod_k A_k\\Big) · bg

    Args:
        segment_rgb: [K, n_rays, 3] C_k of each segment, segments in front-to-back order along
            every ray (see :func:`composite_segment`).
        segment_transmittance: [K, n_rays] A_k (K ≥ 1).
        background: [3] or [n_rays, 3] or None (black).

    Returns:
        rgb: [n_rays, 3] C.
        transmittance: [n_rays] Π_k A_k.

    Raises:
        ValueError: if the shapes do not match.
    """
    if (
        segment_rgb.ndim != 3
        or segment_rgb.shape[0] < 1
        or segment_rgb.shape[-1] != 3
        or segment_transmittance.shape != segment_rgb.shape[:2]
    ):
        raise ValueError(
            "composite_segments: expected segment_rgb [K, n_rays, 3] and segment_transmittance "
            f"[K, n_rays] with K >= 1, got {tuple(segment_rgb.shape)} and {tuple(segment_transmittance.shape)}"
        )
    n_rays = segment_rgb.shape[1]
    through = torch.cumprod(segment_transmittance, dim=0)
    in_front = torch.cat((torch.ones_like(through[:1]), through[:-1]), dim=0)
    rgb = (in_front.unsqueeze(-1) * segment_rgb).sum(dim=0)
    final_transmittance = through[-1]
    bg = _background(background, n_rays, segment_rgb)
    if bg is not None:
        rgb = rgb + final_transmittance.unsqueeze(-1) * bg
    return rgb, final_transmittance


def composite_reference(
    sigmas: Tensor,
    rgbs: Tensor,
    dt: Tensor,
    ray_indices: Tensor,
    n_rays: int,
    background: Tensor | None = None,
    *,
    t: Tensor | None = None,
    early_stop_transmittance: float = EARLY_STOP_TRANSMITTANCE,
) -> RenderedRays:
    """Slow twin of :func:`composite`: a Python loop over rays and samples (tests only).

    Walks each ray front to back as instant-ngp does: stop when ``T < early_stop_transmittance``,
    else ``α = 1 − exp(−σΔt)``, ``w = Tα``, accumulate ``w·c``, ``T ← T(1 − α)``; finally add
    ``T·bg``. Same arguments and result as :func:`composite`; differentiable.
    """
    bg = _background(background, n_rays, rgbs)
    rows_rgb, rows_opacity, rows_depth, rows_t = [], [], [], []
    for ray in range(n_rays):
        samples = (ray_indices == ray).nonzero().flatten().tolist()
        transmittance = torch.ones((), dtype=sigmas.dtype, device=sigmas.device)
        color = torch.zeros(3, dtype=rgbs.dtype, device=rgbs.device)
        opacity = torch.zeros((), dtype=sigmas.dtype, device=sigmas.device)
        depth = torch.zeros((), dtype=sigmas.dtype, device=sigmas.device)
        for i in samples:
            if early_stop_transmittance > 0 and transmittance < early_stop_transmittance:
                break
            alpha = 1 - torch.exp(-sigmas[i] * dt[i])
            weight = transmittance * alpha
            color = color + weight * rgbs[i]
            opacity = opacity + weight
            if t is not None:
                depth = depth + weight * t[i]
            transmittance = transmittance * (1 - alpha)
        if bg is not None:
            color = color + transmittance * bg[ray]
        rows_rgb.append(color)
        rows_opacity.append(opacity)
        rows_depth.append(depth)
        rows_t.append(transmittance)
    if n_rays == 0:
        empty = torch.zeros(0, dtype=sigmas.dtype, device=sigmas.device)
        return RenderedRays(empty.reshape(0, 3), empty, empty if t is not None else None, empty)
    return RenderedRays(
        torch.stack(rows_rgb),
        torch.stack(rows_opacity),
        torch.stack(rows_depth) if t is not None else None,
        torch.stack(rows_t),
    )
