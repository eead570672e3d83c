"""Training-time compositing of packed samples in two Triton kernels (forward, backward).

The fast twin of :func:`trainer.render.volrend.composite` for what a training step needs, the ray
colour with its background; the reference takes ~40 kernel launches forward and ~30 backward.
One program handles ``BLOCK`` rays, one lane per ray, and walks each ray's samples front to back
(instant-ngp ``composite_kernel_nerf`` and its backward pass in ``testbed_nerf.cu``):

Forward (NeRF eq. 3 with the reference's early stop): ``τ_i = σ_i Δt_i``, ``T_i = exp(−Σ_{j<i} τ_j)``
(float64 sum), ``α_i = 1 − exp(−τ_i)``, ``w_i = T_i α_i`` for kept samples (``T_i ≥ ε``), else 0;
``C = Σ_i w_i c_i + T_final · bg`` with ``T_final = exp(−Σ_{kept} τ_i)``.

Backward, for a kept sample (others get zero gradient, as in the reference where their weight is
multiplied by a constant 0):

.. math::
    ∂C/∂c_i = w_i, \\qquad ∂C/∂σ_i = Δt_i \\big(T_{i+1} c_i − (C − C_{≤i})\\big),

with ``C_{≤i} = Σ_{j≤i} w_j c_j`` (derivation: the ``j = i`` term gives ``T_i e^{−τ_i} c_i``, every later
kept term and the background term are multiplied by ``e^{−τ_i}``). Accumulations are float32 except
the optical depths (float64, like the reference's cumulative sum), so the values match the reference
to float32 rounding, not bitwise.

:func:`kept_counts_triton` walks the rays the same way without colours and counts each ray's kept
samples (the fast twin of :func:`trainer.render.compact.kept_counts`).

Interpretation on CPU: ``TRITON_INTERPRET=1`` before this module is first imported.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

__all__ = ["COMPOSITE_BLOCK", "composite_buffers_triton", "composite_rgb_triton", "kept_counts_triton"]

COMPOSITE_BLOCK = 64  # rays per program (one lane each)


@triton.jit
def _composite_kernel(
    sigma_ptr, rgb_ptr, dt_ptr, start_ptr, count_ptr, bg_ptr, bg_stride, out_ptr, grad_out_ptr,
    grad_sigma_ptr, grad_rgb_ptr, n_rays, early_stop,
    BACKWARD: tl.constexpr, BLOCK: tl.constexpr,
    t_ptr=None, opacity_ptr=None, depth_ptr=None, transmittance_ptr=None, BUFFERS: tl.constexpr = False,
):
    ray = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = ray < n_rays
    start = tl.load(start_ptr + ray, mask=valid, other=0)
    count = tl.load(count_ptr + ray, mask=valid, other=0)
    n_steps = tl.max(count, axis=0)
    if BACKWARD:
        g_r = tl.load(grad_out_ptr + ray * 3 + 0, mask=valid, other=0.0)
        g_g = tl.load(grad_out_ptr + ray * 3 + 1, mask=valid, other=0.0)
        g_b = tl.load(grad_out_ptr + ray * 3 + 2, mask=valid, other=0.0)
        total_r = tl.load(out_ptr + ray * 3 + 0, mask=valid, other=0.0)
        total_g = tl.load(out_ptr + ray * 3 + 1, mask=valid, other=0.0)
        total_b = tl.load(out_ptr + ray * 3 + 2, mask=valid, other=0.0)
    depth = tl.zeros([BLOCK], dtype=tl.float64)
    depth_kept = tl.zeros([BLOCK], dtype=tl.float64)
    acc_r = tl.zeros([BLOCK], dtype=tl.float32)
    acc_g = tl.zeros([BLOCK], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK], dtype=tl.float32)
    acc_w = tl.zeros([BLOCK], dtype=tl.float32)
    acc_t = tl.zeros([BLOCK], dtype=tl.float32)
    i = 0
    while i < n_steps:  # (a while loop: Triton's interpreter of some versions rejects range(tensor))
        m = valid & (i < count)
        s = start + i
        sigma = tl.load(sigma_ptr + s, mask=m, other=0.0)
        dt = tl.load(dt_ptr + s, mask=m, other=0.0)
        r = tl.load(rgb_ptr + s * 3 + 0, mask=m, other=0.0)
        g = tl.load(rgb_ptr + s * 3 + 1, mask=m, other=0.0)
        b = tl.load(rgb_ptr + s * 3 + 2, mask=m, other=0.0)
        tau = (sigma * dt).to(tl.float64)
        transmittance = tl.exp(-depth).to(tl.float32)
        alpha = (1.0 - tl.exp(-tau)).to(tl.float32)
        kept = m & (transmittance >= early_stop)
        w = tl.where(kept, transmittance * alpha, 0.0)
        acc_r += w * r
        acc_g += w * g
        acc_b += w * b
        if BUFFERS:
            acc_w += w
            acc_t += w * tl.load(t_ptr + s, mask=m, other=0.0)
        if BACKWARD:
            t_next = tl.exp(-(depth + tau)).to(tl.float32)
            d_tau = (g_r * (t_next * r - (total_r - acc_r)) + g_g * (t_next * g - (total_g - acc_g))
                     + g_b * (t_next * b - (total_b - acc_b)))
            tl.store(grad_sigma_ptr + s, tl.where(kept, dt * d_tau, 0.0), mask=m)
            tl.store(grad_rgb_ptr + s * 3 + 0, w * g_r, mask=m)
            tl.store(grad_rgb_ptr + s * 3 + 1, w * g_g, mask=m)
            tl.store(grad_rgb_ptr + s * 3 + 2, w * g_b, mask=m)
        depth += tau
        depth_kept += tl.where(kept, tau, 0.0)
        i += 1
    if not BACKWARD:
        final = tl.exp(-depth_kept).to(tl.float32)
        bg_r = tl.load(bg_ptr + ray * bg_stride + 0, mask=valid, other=0.0)
        bg_g = tl.load(bg_ptr + ray * bg_stride + 1, mask=valid, other=0.0)
        bg_b = tl.load(bg_ptr + ray * bg_stride + 2, mask=valid, other=0.0)
        tl.store(out_ptr + ray * 3 + 0, acc_r + final * bg_r, mask=valid)
        tl.store(out_ptr + ray * 3 + 1, acc_g + final * bg_g, mask=valid)
        tl.store(out_ptr + ray * 3 + 2, acc_b + final * bg_b, mask=valid)
        if BUFFERS:
            tl.store(opacity_ptr + ray, acc_w, mask=valid)
            tl.store(depth_ptr + ray, acc_t, mask=valid)
            tl.store(transmittance_ptr + ray, final, mask=valid)


def _launch(sigmas, rgbs, dt, start, count, background, out, grad_out, grad_sigmas, grad_rgbs,
            early_stop: float, backward: bool, block: int) -> None:
    n_rays = start.shape[0]
    if n_rays == 0:
        return
    with torch.cuda.device(sigmas.device) if sigmas.is_cuda else contextlib.nullcontext():
        _composite_kernel[(triton.cdiv(n_rays, block),)](
            sigmas, rgbs, dt, start, count, background, background.stride(0), out, grad_out,
            grad_sigmas, grad_rgbs, n_rays, float(early_stop), BACKWARD=backward, BLOCK=block, num_warps=2,
        )


class CompositeRGBFunction(torch.autograd.Function):
    """Autograd wrapper of the two kernels; gradients for ``sigmas`` and ``rgbs`` only."""

    @staticmethod
    def forward(ctx, sigmas, rgbs, dt, start, count, background, early_stop, block):  # type: ignore[override]
        out = torch.empty(start.shape[0], 3, dtype=torch.float32, device=sigmas.device)
        _launch(sigmas, rgbs, dt, start, count, background, out, out, sigmas, rgbs, early_stop, False, block)
        ctx.save_for_backward(sigmas, rgbs, dt, start, count, background, out)
        ctx.early_stop, ctx.block = early_stop, block
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        sigmas, rgbs, dt, start, count, background, out = ctx.saved_tensors
        grad_sigmas = torch.empty_like(sigmas)
        grad_rgbs = torch.empty_like(rgbs)
        _launch(sigmas, rgbs, dt, start, count, background, out, grad_out.float().contiguous(), grad_sigmas,
                grad_rgbs, ctx.early_stop, True, ctx.block)
        return grad_sigmas, grad_rgbs, None, None, None, None, None, None


def composite_rgb_triton(
    sigmas: torch.Tensor,
    rgbs: torch.Tensor,
    dt: torch.Tensor,
    packed_info: torch.Tensor,
    background: torch.Tensor,
    early_stop_transmittance: float,
    block: int = COMPOSITE_BLOCK,
) -> torch.Tensor:
    """Ray colours of packed samples over their background (differentiable in σ and c).

    Args:
        sigmas: [S] float32 densities (1/world units).
        rgbs: [S, 3] float32 sample colours.
        dt: [S] float32 step lengths (world units).
        packed_info: [n_rays, 2] int64 (first sample, sample count) of each ray; every sample
            belongs to exactly one ray (the marcher's layout).
        background: [n_rays, 3] or [3] float32, no gradient.
        early_stop_transmittance: samples with ``T_i`` below it get zero weight (the reference's ε).
        block: rays per program.

    Returns:
        rgb: [n_rays, 3] float32.

    Raises:
        ValueError: for mismatched shapes or dtypes, or a background that requires a gradient.
    """
    sigmas, rgbs, dt, start, count, background = _prepared(sigmas, rgbs, dt, packed_info, background,
                                                            "composite_rgb_triton")
    return CompositeRGBFunction.apply(sigmas, rgbs, dt, start, count, background, float(early_stop_transmittance),
                                      block)


def _prepared(sigmas: torch.Tensor, rgbs: torch.Tensor, dt: torch.Tensor, packed_info: torch.Tensor,
              background: torch.Tensor, where: str) -> tuple[torch.Tensor, ...]:
    """The compositing kernel's inputs checked and laid out: contiguous samples, first sample and
    count per ray, a [n_rays, 3] background with unit column stride.

    Raises:
        ValueError: for mismatched shapes or dtypes, or a background that requires a gradient.
    """
    n_samples = sigmas.shape[0]
    if sigmas.dtype != torch.float32 or rgbs.dtype != torch.float32 or dt.dtype != torch.float32:
        raise ValueError(f"{where}: float32 inputs expected, got {sigmas.dtype}, {rgbs.dtype}, {dt.dtype}")
    if rgbs.shape != (n_samples, 3) or dt.shape != (n_samples,) or packed_info.ndim != 2 or packed_info.shape[1] != 2:
        raise ValueError(
            f"{where}: expected sigmas [S], rgbs [S, 3], dt [S], packed_info [n, 2]; got "
            f"{tuple(sigmas.shape)}, {tuple(rgbs.shape)}, {tuple(dt.shape)}, {tuple(packed_info.shape)}"
        )
    n_rays = packed_info.shape[0]
    if background.requires_grad:
        raise ValueError(f"{where}: the background gets no gradient here; use volrend.composite")
    background = background.to(device=sigmas.device, dtype=torch.float32)
    if background.shape == (3,):
        background = background.reshape(1, 3).expand(n_rays, 3)
    if background.shape != (n_rays, 3) or background.stride(1) != 1:
        background = background.expand(n_rays, 3).contiguous()
    return (sigmas.contiguous(), rgbs.contiguous(), dt.contiguous(), packed_info[:, 0].contiguous(),
            packed_info[:, 1].contiguous(), background)


def composite_buffers_triton(
    sigmas: torch.Tensor,
    rgbs: torch.Tensor,
    dt: torch.Tensor,
    t: torch.Tensor,
    packed_info: torch.Tensor,
    background: torch.Tensor,
    early_stop_transmittance: float,
    block: int = COMPOSITE_BLOCK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What rendering a view needs of packed samples, in one launch and without gradients: the
    values of :func:`trainer.render.volrend.composite` (its fast twin for inference).

    Args:
        sigmas, rgbs, dt, packed_info, background, early_stop_transmittance, block: as
            :func:`composite_rgb_triton`.
        t: [S] float32 sample distances along their rays.

    Returns:
        rgb [n_rays, 3] (``Σ w_i c_i + T_final·bg``), opacity [n_rays] (``Σ w_i``), depth [n_rays]
        (``Σ w_i t_i``), transmittance [n_rays] (``T_final``); float32.

    Raises:
        ValueError: for mismatched shapes or dtypes.
    """
    n_samples = sigmas.shape[0]
    if t.dtype != torch.float32 or t.shape != (n_samples,):
        raise ValueError(f"composite_buffers_triton: t must be [{n_samples}] float32, got {tuple(t.shape)} {t.dtype}")
    sigmas, rgbs, dt, start, count, background = _prepared(sigmas.detach(), rgbs.detach(), dt, packed_info,
                                                            background, "composite_buffers_triton")
    n_rays = start.shape[0]
    rgb = torch.empty(n_rays, 3, dtype=torch.float32, device=sigmas.device)
    opacity, depth, transmittance = (torch.empty(n_rays, dtype=torch.float32, device=sigmas.device) for _ in range(3))
    if n_rays:
        with torch.cuda.device(sigmas.device) if sigmas.is_cuda else contextlib.nullcontext():
            _composite_kernel[(triton.cdiv(n_rays, block),)](
                sigmas, rgbs, dt, start, count, background, background.stride(0), rgb, rgb, sigmas, rgbs, n_rays,
                float(early_stop_transmittance), BACKWARD=False, BLOCK=block, t_ptr=t.contiguous(),
                opacity_ptr=opacity, depth_ptr=depth, transmittance_ptr=transmittance, BUFFERS=True, num_warps=2,
            )
    return rgb, opacity, depth, transmittance


@triton.jit
def _kept_count_kernel(sigma_ptr, dt_ptr, start_ptr, count_ptr, out_ptr, n_rays, early_stop, BLOCK: tl.constexpr):
    ray = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = ray < n_rays
    start = tl.load(start_ptr + ray, mask=valid, other=0)
    count = tl.load(count_ptr + ray, mask=valid, other=0)
    n_steps = tl.max(count, axis=0)
    depth = tl.zeros([BLOCK], dtype=tl.float64)
    kept = tl.zeros([BLOCK], dtype=tl.int64)
    i = 0
    while i < n_steps:
        m = valid & (i < count)
        s = start + i
        sigma = tl.load(sigma_ptr + s, mask=m, other=0.0)
        dt = tl.load(dt_ptr + s, mask=m, other=0.0)
        transmittance = tl.exp(-depth).to(tl.float32)
        kept += (m & (transmittance >= early_stop)).to(tl.int64)
        depth += (sigma * dt).to(tl.float64)
        i += 1
    tl.store(out_ptr + ray, kept, mask=valid)


def kept_counts_triton(sigmas: torch.Tensor, dt: torch.Tensor, packed_info: torch.Tensor,
                       early_stop_transmittance: float, block: int = COMPOSITE_BLOCK) -> torch.Tensor:
    """Per ray, how many leading samples have ``T_i ≥ ε`` (one launch, no host sync).

    Args:
        sigmas: [S] float32 densities (1/world units).
        dt: [S] float32 step lengths (world units).
        packed_info: [n_rays, 2] int64 (first sample, sample count) of each ray.
        early_stop_transmittance: ε.
        block: rays per program.

    Returns:
        kept: [n_rays] int64.

    Raises:
        ValueError: for mismatched shapes or dtypes.
    """
    if sigmas.dtype != torch.float32 or dt.dtype != torch.float32:
        raise ValueError(f"kept_counts_triton: float32 inputs expected, got {sigmas.dtype}, {dt.dtype}")
    if sigmas.ndim != 1 or dt.shape != sigmas.shape or packed_info.ndim != 2 or packed_info.shape[1] != 2:
        raise ValueError(
            f"kept_counts_triton: expected sigmas [S], dt [S], packed_info [n, 2]; got "
            f"{tuple(sigmas.shape)}, {tuple(dt.shape)}, {tuple(packed_info.shape)}"
        )
    n_rays = packed_info.shape[0]
    out = torch.empty(n_rays, dtype=torch.int64, device=sigmas.device)
    if n_rays == 0:
        return out
    start = packed_info[:, 0].contiguous()
    count = packed_info[:, 1].contiguous()
    with torch.cuda.device(sigmas.device) if sigmas.is_cuda else contextlib.nullcontext():
        _kept_count_kernel[(triton.cdiv(n_rays, block),)](
            sigmas.contiguous(), dt.contiguous(), start, count, out, n_rays, float(early_stop_transmittance),
            BLOCK=block, num_warps=2,
        )
    return out
