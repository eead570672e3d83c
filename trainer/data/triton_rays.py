"""Training rays of pinhole cameras and their pixel colours in one Triton kernel launch.

The fast twin of :meth:`trainer.data.sampler._Cameras.rays` plus the RGBA decoding of
:func:`trainer.data.sampler._rgba_float` (the reference takes ~25 kernel launches per batch; in a
host-bound training step that is where the "data" phase's time goes). Per ray ``i``, with image
``m = image_index[i]`` and pixel ``p = local_index[i]`` (row-major, width ``W_m``):

    u = p mod W_m + du,  v = ⌊p / W_m⌋ + dv            (du = dv = 0.5: the pixel centre)
    d_cam = ((u − c_x)/f_x, −(v − c_y)/f_y, −1)         (OpenGL camera axes, as pixel_to_camera_dirs)
    rays_d = R_m · d_cam / |R_m · d_cam|,  rays_o = t_m  (c2w_m = [R_m | t_m], camera_dirs_to_world)
    rgb, alpha = rgba[i] / 255 (uint8) or rgba[i] (float16/float32)

Cameras with lens distortion take ``d_cam`` from a direction map instead: the undistorted
camera-space direction of every pixel centre of each distinct camera, computed once by the
sampler (``d_cam = map[map_base[m] + p]``; sub-pixel offsets do not apply, as in the reference).
A distorted camera without a map (more pixels than the map may take) stays on the reference.

Same float32 operations as the reference with IEEE division and square root (Triton's default
``/`` on CUDA is an approximate division), so origins and colours are bitwise the reference's and
directions agree to rounding (the reference's sums are torch reductions whose order torch
chooses; the tests allow float32 rounding error).
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

__all__ = ["RAYS_BLOCK", "pinhole_rays_triton"]

RAYS_BLOCK = 256


@triton.jit
def _pinhole_rays_kernel(
    image_index_ptr, local_index_ptr, rgba_ptr, widths_ptr, focal_ptr, principal_ptr, c2w_ptr,
    subpixel_ptr, map_ptr, map_base_ptr, rays_o_ptr, rays_d_ptr, rgb_ptr, alpha_ptr, n,
    HAS_SUBPIXEL: tl.constexpr, HAS_MAP: tl.constexpr, RGBA_U8: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = row < n
    image = tl.load(image_index_ptr + row, mask=mask, other=0)
    pixel = tl.load(local_index_ptr + row, mask=mask, other=0)
    if HAS_MAP:  # the undistorted direction of the pixel centre, looked up
        entry = (tl.load(map_base_ptr + image, mask=mask, other=0) + pixel) * 3
        x = tl.load(map_ptr + entry, mask=mask, other=0.0)
        y = tl.load(map_ptr + entry + 1, mask=mask, other=0.0)
        z = tl.load(map_ptr + entry + 2, mask=mask, other=-1.0)
    else:
        width = tl.load(widths_ptr + image, mask=mask, other=1)
        v_int = pixel // width
        u_int = pixel - v_int * width
        if HAS_SUBPIXEL:
            du = tl.load(subpixel_ptr + row * 2, mask=mask, other=0.5)
            dv = tl.load(subpixel_ptr + row * 2 + 1, mask=mask, other=0.5)
        else:
            du = tl.full((BLOCK,), 0.5, tl.float32)
            dv = tl.full((BLOCK,), 0.5, tl.float32)
        u = u_int.to(tl.float32) + du
        v = v_int.to(tl.float32) + dv
        fx = tl.load(focal_ptr + image * 2, mask=mask, other=1.0)
        fy = tl.load(focal_ptr + image * 2 + 1, mask=mask, other=1.0)
        cx = tl.load(principal_ptr + image * 2, mask=mask, other=0.0)
        cy = tl.load(principal_ptr + image * 2 + 1, mask=mask, other=0.0)
        x = tl.math.div_rn(u - cx, fx)  # IEEE division and square root, as torch's kernels
        y = -tl.math.div_rn(v - cy, fy)
        z = tl.full((BLOCK,), -1.0, tl.float32)  # (× −1 is exact: the pinhole's −R[:, 2])
    base = c2w_ptr + image * 12  # row-major [3, 4]: element (i, j) at i·4 + j
    d0 = tl.load(base + 0, mask=mask, other=0.0) * x + tl.load(base + 1, mask=mask, other=0.0) * y \
        + tl.load(base + 2, mask=mask, other=0.0) * z
    d1 = tl.load(base + 4, mask=mask, other=0.0) * x + tl.load(base + 5, mask=mask, other=0.0) * y \
        + tl.load(base + 6, mask=mask, other=0.0) * z
    d2 = tl.load(base + 8, mask=mask, other=0.0) * x + tl.load(base + 9, mask=mask, other=0.0) * y \
        + tl.load(base + 10, mask=mask, other=0.0) * z
    norm = tl.where(mask, tl.math.sqrt_rn(d0 * d0 + d1 * d1 + d2 * d2), 1.0)  # (no 0/0 in lanes past n)
    tl.store(rays_d_ptr + row * 3 + 0, tl.math.div_rn(d0, norm), mask=mask)
    tl.store(rays_d_ptr + row * 3 + 1, tl.math.div_rn(d1, norm), mask=mask)
    tl.store(rays_d_ptr + row * 3 + 2, tl.math.div_rn(d2, norm), mask=mask)
    for axis in tl.static_range(3):
        origin = tl.load(base + axis * 4 + 3, mask=mask, other=0.0)
        tl.store(rays_o_ptr + row * 3 + axis, origin, mask=mask)
    for channel in tl.static_range(4):
        value = tl.load(rgba_ptr + row * 4 + channel, mask=mask, other=0).to(tl.float32)
        if RGBA_U8:
            value = tl.math.div_rn(value, 255.0)  # bitwise torch's uint8 → float / 255
        if channel < 3:
            tl.store(rgb_ptr + row * 3 + channel, value, mask=mask)
        else:
            tl.store(alpha_ptr + row, value, mask=mask)


def pinhole_rays_triton(
    image_index: torch.Tensor,
    local_index: torch.Tensor,
    rgba: torch.Tensor,
    widths: torch.Tensor,
    focal: torch.Tensor,
    principal: torch.Tensor,
    c2w: torch.Tensor,
    subpixel: torch.Tensor | None = None,
    direction_map: torch.Tensor | None = None,
    map_base: torch.Tensor | None = None,
    block: int = RAYS_BLOCK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rays and decoded colours of ``n`` training pixels of pinhole cameras, distortion-free or
    served from a direction map.

    Indices are not range-checked (that would cost a device sync): ``0 ≤ image_index < F`` and
    ``0 ≤ local_index < W·H`` of its frame (and ``map_base[F] + W·H`` within the map) are the
    caller's to keep, as the sampler's draws do; outside them the kernel reads out of bounds.

    Args:
        image_index: [n] int64 frame of each ray.
        local_index: [n] int64 row-major pixel index within its frame.
        rgba: [n, 4] uint8 (0..255) or float16/float32 ([0, 1]) pixel values, straight alpha.
        widths: [F] int64 image widths in pixels.
        focal, principal: [F, 2] float32 (f_x, f_y) and (c_x, c_y) in pixels.
        c2w: [F, 3, 4] float32 camera-to-world matrices (OpenGL camera axes).
        subpixel: [n, 2] float32 in [0, 1), where in its pixel each ray passes; None: the centre
            (unused with a direction map).
        direction_map: [M, 3] float32 camera-space directions of the pixel centres of each
            distinct camera (the sampler's map of distorted cameras), or None: the pinhole rule.
        map_base: [F] int64 row of each frame's first pixel in ``direction_map`` (with it only).
        block: rays per program.

    Returns:
        ``rays_o`` [n, 3], ``rays_d`` [n, 3] (unit), ``rgb`` [n, 3], ``alpha`` [n, 1]; float32,
        contiguous, on the inputs' device (CUDA, or the CPU under ``TRITON_INTERPRET=1``).

    Raises:
        ValueError: for inputs of the wrong shape or dtype.
    """
    n = image_index.shape[0]
    n_frames = widths.shape[0]
    checks = [
        (image_index.dtype == torch.int64 and image_index.ndim == 1, "image_index must be [n] int64"),
        (local_index.dtype == torch.int64 and local_index.shape == (n,), "local_index must be [n] int64"),
        (rgba.shape == (n, 4) and rgba.dtype in (torch.uint8, torch.float16, torch.float32),
         "rgba must be [n, 4] uint8/float16/float32"),
        (widths.dtype == torch.int64 and widths.ndim == 1, "widths must be [F] int64"),
        (focal.shape == (n_frames, 2), f"focal must be [F, 2] with F = len(widths) = {n_frames}"),
        (principal.shape == (n_frames, 2), f"principal must be [F, 2] with F = len(widths) = {n_frames}"),
        (c2w.shape == (n_frames, 3, 4), f"c2w must be [F, 3, 4] with F = len(widths) = {n_frames}"),
        (block >= 1 and block & (block - 1) == 0, f"block must be a power of two, got {block}"),
        (subpixel is None or subpixel.shape == (n, 2), "subpixel must be [n, 2] or None"),
        ((direction_map is None) == (map_base is None), "direction_map and map_base go together"),
        (direction_map is None or (direction_map.ndim == 2 and direction_map.shape[1] == 3),
         "direction_map must be [M, 3]"),
        (map_base is None or (map_base.dtype == torch.int64 and map_base.shape == (n_frames,)),
         f"map_base must be [F] int64 with F = len(widths) = {n_frames}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"pinhole_rays_triton: {message}")
    device = image_index.device
    f32 = dict(dtype=torch.float32, device=device)
    rays_o, rays_d = torch.empty(n, 3, **f32), torch.empty(n, 3, **f32)
    rgb, alpha = torch.empty(n, 3, **f32), torch.empty(n, 1, **f32)
    if n == 0:
        return rays_o, rays_d, rgb, alpha
    sub = subpixel.to(torch.float32).contiguous() if subpixel is not None else rays_o  # (unread)
    has_map = direction_map is not None
    dirs = direction_map.to(torch.float32).contiguous() if has_map else rays_o  # (unread without)
    bases = map_base.contiguous() if has_map else image_index
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _pinhole_rays_kernel[(triton.cdiv(n, block),)](
            image_index.contiguous(), local_index.contiguous(), rgba.contiguous(), widths.contiguous(),
            focal.to(torch.float32).contiguous(), principal.to(torch.float32).contiguous(),
            c2w.to(torch.float32).contiguous(), sub, dirs, bases, rays_o, rays_d, rgb, alpha, n,
            HAS_SUBPIXEL=subpixel is not None and not has_map, HAS_MAP=has_map,
            RGBA_U8=rgba.dtype == torch.uint8, BLOCK=block,
            num_warps=4, enable_fp_fusion=False,
        )
    return rays_o, rays_d, rgb, alpha
