"""The whole of :func:`trainer.render.march.march_rays` (box, jitter, steps) in two Triton launches.

The PyTorch reference materialises every candidate step of every ray (``_march_chunk``), which
takes ~150 small kernel launches and several host reads per call. Here one program handles
``BLOCK`` rays, one lane per ray, and walks each ray's steps in a loop:

1. count pass: per ray, the number of kept samples (occupied cells, before ``t_far``, at most
   ``max_steps``);
2. ``cumsum`` of the counts gives each ray's first output slot; the total is read on the host
   (the one read that sizes the step's sample arrays);
3. write pass: the same walk again, writing ``t``, ``dt``, ray index, position and direction.

The box intersection (slab method, IEEE divisions), the jitter of the first step (uniform draws
made by the caller, as the reference draws them), the step rule, the sample placement and the
occupancy lookup are those of the reference (module
docstrings of :mod:`trainer.render.march` and :mod:`trainer.render.occupancy`; instant-ngp
``testbed_nerf.cu``): the per-ray anchors of the closed-form step rule in float64, each step's
``t``/``dt`` in float32 from the same formulas, midpoints ``t + dt/2`` kept while ``< t_far``,
the cascade from the exponent of ``max|p − 0.5|``, bit ``i & 7`` of byte ``i >> 3`` of the
bitfield. Floating-point contraction is off, so the float32 arithmetic rounds as the reference's
separate multiply and add do; the geometric region's ``exp`` is taken in float64 and rounded
once (CUDA's ``expf``, which the reference uses, is within 2 ulp of that). A sample whose midpoint
lies within rounding of a cell face or of ``t_far`` may therefore be decided differently, which
the tests bound.

Empty-space skipping (without the background shell): when a step's midpoint finds its
occupancy cell empty, the walk goes on at the first step whose midpoint may lie beyond that cell
(its faces or the next finer cascade's cube, shrunk by a rounding margin), the step rule inverted
in closed form and checked against the step rule itself. Every step it passes over would have been
looked up in the same empty cell, so the kept samples are those of the step-by-step walk
(``skip_empty=False``); lego's rays cross about three steps per empty cell.

Interpretation on CPU: as for :mod:`trainer.encoding.triton_hashgrid`, ``TRITON_INTERPRET=1``
must be set before this module is first imported.
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton
import triton.language as tl

from trainer.render.occupancy import OccupancyGrid
from trainer.triton_support import INTERPRET

__all__ = ["INTERPRET", "MARCH_BLOCK", "MARCH_NUM_WARPS", "march_fixed_triton", "march_packed_triton", "march_rule_tensor"]

MARCH_BLOCK = 64  # rays per program (one lane each)
MARCH_NUM_WARPS = 2
_COMPILE_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _occupied(px, py, pz, bitfield_ptr, mask, aabb_half, n_cascades, resolution, SHELL: tl.constexpr):
    """Occupancy bit of the finest level holding each point (``OccupancyGrid.occupied``); with
    ``SHELL`` points beyond the box (half side ``aabb_half``) are contracted first
    (:meth:`trainer.render.contraction.SceneContraction.contract`, the same operations) and
    ``n_cascades`` counts the background shell's level."""
    offset = tl.maximum(tl.maximum(tl.abs(px - 0.5), tl.abs(py - 0.5)), tl.abs(pz - 0.5))
    if SHELL:
        yx = tl.math.div_rn(px - 0.5, aabb_half)
        yy = tl.math.div_rn(py - 0.5, aabb_half)
        yz = tl.math.div_rn(pz - 0.5, aabb_half)
        norm = tl.maximum(tl.maximum(tl.abs(yx), tl.abs(yy)), tl.abs(yz))
        outside = norm > 1.0
        safe = tl.where(outside, norm, 1.0)
        squeeze = tl.math.div_rn(2.0 - tl.math.div_rn(1.0, safe), safe)
        px = tl.where(outside, 0.5 + (aabb_half * yx) * squeeze, px)
        py = tl.where(outside, 0.5 + (aabb_half * yy) * squeeze, py)
        pz = tl.where(outside, 0.5 + (aabb_half * yz) * squeeze, pz)
        offset = tl.maximum(tl.maximum(tl.abs(px - 0.5), tl.abs(py - 0.5)), tl.abs(pz - 0.5))
        inside = offset <= 2.0 * aabb_half  # False for NaN
    else:
        inside = offset <= aabb_half  # False for NaN
    # frexp: offset = m·2^e with m in [0.5, 1) → e = biased exponent − 126 (offset ≥ 0.5 is normal)
    exponent = ((offset.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 126
    cascade = tl.where(offset < 0.5, 0, exponent + 1)
    cascade = tl.minimum(tl.maximum(cascade, 0), n_cascades - 1)
    inv_scale = ((127 - cascade) << 23).to(tl.float32, bitcast=True)  # exactly 2^-cascade
    res_f = resolution.to(tl.float32)
    ux = ((px - 0.5) * inv_scale + 0.5) * res_f
    uy = ((py - 0.5) * inv_scale + 0.5) * res_f
    uz = ((pz - 0.5) * inv_scale + 0.5) * res_f
    ux = tl.where(ux == ux, ux, 0.0)  # nan_to_num, then clamp into the grid
    uy = tl.where(uy == uy, uy, 0.0)
    uz = tl.where(uz == uz, uz, 0.0)
    top = res_f - 1.0
    x = tl.floor(tl.minimum(tl.maximum(ux, 0.0), top)).to(tl.int64)
    y = tl.floor(tl.minimum(tl.maximum(uy, 0.0), top)).to(tl.int64)
    z = tl.floor(tl.minimum(tl.maximum(uz, 0.0), top)).to(tl.int64)
    res = resolution.to(tl.int64)
    index = cascade.to(tl.int64) * res * res * res + x + y * res + z * res * res
    byte = tl.load(bitfield_ptr + (index >> 3), mask=mask & inside, other=0).to(tl.int64)
    return ((byte >> (index & 7)) & 1 == 1) & inside


@triton.jit
def _slab(o, d, lo, hi):
    """Entry and exit distance of one axis's slab (``trainer.render.aabb.ray_aabb_intersect``)."""
    parallel = d == 0.0
    safe_d = tl.where(parallel, 1.0, d)
    t_lo = tl.math.div_rn(lo - o, safe_d)
    t_hi = tl.math.div_rn(hi - o, safe_d)
    in_slab = (o >= lo) & (o <= hi)
    inf = float("inf")
    enter = tl.where(parallel, tl.where(in_slab, -inf, inf), tl.minimum(t_lo, t_hi))
    leave = tl.where(parallel, tl.where(in_slab, inf, -inf), tl.maximum(t_lo, t_hi))
    return enter, leave


@triton.jit
def _step_at(k, t0f, step, cone, max_step, log1p_cone, n_af, n_bf, af, bf, CONE: tl.constexpr):
    """Start ``t`` and length ``dt`` of step ``k`` (float32; ``march._steps_at``): linear from ``t0``,
    geometric from anchor ``a`` after ``n_a`` steps, clamped from anchor ``b`` after ``n_b`` more."""
    t_lin = t0f + k * step
    if CONE:
        # exp in float64 of the float32 argument, rounded once: within an ulp of CUDA's expf
        t_geo = af * tl.exp(((k - n_af) * log1p_cone).to(tl.float64)).to(tl.float32)
        t_cl = bf + (k - n_af - n_bf) * max_step
        in_lin = k < n_af
        in_geo = k < n_af + n_bf
        t = tl.where(in_lin, t_lin, tl.where(in_geo, t_geo, t_cl))
        dt = tl.where(in_lin, step, tl.where(in_geo, t_geo * cone, max_step))
    else:
        t = t_lin
        dt = step + 0.0 * k
    return t, dt


@triton.jit
def _face_distance(o, d, lo, hi):
    """Distance along the ray to the face of ``[lo, hi]`` it leaves through (+inf if ``d == 0``)."""
    moving = d != 0.0
    face = tl.where(d > 0.0, hi, lo)
    return tl.where(moving, tl.math.div_rn(face - o, tl.where(moving, d, 1.0)), float("inf"))


@triton.jit
def _cell_exit(ox, oy, oz, dx, dy, dz, px, py, pz, aabb_half, n_cascades, resolution):
    """A distance along the ray before which every midpoint finds the occupancy cell of ``p``.

    The cell (cascade and index as :func:`_occupied` finds them, no background shell) shrunk by a
    margin that covers the rounding of a midpoint's position and cell index, left either through
    one of its faces or into the next finer cascade's cube (inside which the lookup changes
    cascade). A result at or below the current midpoint means "no skip"."""
    offset = tl.maximum(tl.maximum(tl.abs(px - 0.5), tl.abs(py - 0.5)), tl.abs(pz - 0.5))
    exponent = ((offset.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 126
    cascade = tl.where(offset < 0.5, 0, exponent + 1)
    cascade = tl.minimum(tl.maximum(cascade, 0), n_cascades - 1)
    scale = ((127 + cascade) << 23).to(tl.float32, bitcast=True)  # exactly 2^cascade
    inv_scale = ((127 - cascade) << 23).to(tl.float32, bitcast=True)
    res_f = resolution.to(tl.float32)
    top = res_f - 1.0
    cx = tl.floor(tl.minimum(tl.maximum(((px - 0.5) * inv_scale + 0.5) * res_f, 0.0), top))
    cy = tl.floor(tl.minimum(tl.maximum(((py - 0.5) * inv_scale + 0.5) * res_f, 0.0), top))
    cz = tl.floor(tl.minimum(tl.maximum(((pz - 0.5) * inv_scale + 0.5) * res_f, 0.0), top))
    cell = scale / res_f
    margin = 1e-3 * cell + 4e-6 * (1.0 + scale)
    lo_x = 0.5 + (cx / res_f - 0.5) * scale
    lo_y = 0.5 + (cy / res_f - 0.5) * scale
    lo_z = 0.5 + (cz / res_f - 0.5) * scale
    t_exit = tl.minimum(tl.minimum(_face_distance(ox, dx, lo_x + margin, lo_x + cell - margin),
                                   _face_distance(oy, dy, lo_y + margin, lo_y + cell - margin)),
                        _face_distance(oz, dz, lo_z + margin, lo_z + cell - margin))
    # the next finer cascade's cube, half side 2^(cascade - 2), grown by the margin
    inner = 0.25 * scale + margin
    enter_x, leave_x = _slab(ox, dx, 0.5 - inner, 0.5 + inner)
    enter_y, leave_y = _slab(oy, dy, 0.5 - inner, 0.5 + inner)
    enter_z, leave_z = _slab(oz, dz, 0.5 - inner, 0.5 + inner)
    enter = tl.maximum(tl.maximum(enter_x, enter_y), enter_z)
    leave = tl.minimum(tl.minimum(leave_x, leave_y), leave_z)
    meets_inner = (cascade > 0) & (enter < leave)
    t_exit = tl.where(meets_inner, tl.minimum(t_exit, enter), t_exit)
    return tl.where(t_exit == t_exit, t_exit, -float("inf"))


@triton.jit
def _step_after(k, t_exit, t0f, step, cone, max_step, log1p_cone, n_af, n_bf, af, bf, CONE: tl.constexpr):
    """The next step to look at after step ``k``, whose midpoint lies in an empty cell whose
    lookup holds up to ``t_exit``: the step rule inverted at ``t_exit`` (linear, geometric or
    clamped region), then checked with :func:`_step_at` itself — every skipped step's midpoint
    must be ``<= t_exit`` (midpoints grow with ``k``) — and ``k + 1`` where the check fails."""
    k_lin = (t_exit - t0f - 0.5 * step) / step
    if CONE:
        k_geo = n_af + tl.log(tl.maximum(t_exit, 1e-30) / (af * (1.0 + 0.5 * cone))) / log1p_cone
        k_cl = n_af + n_bf + (t_exit - bf - 0.5 * max_step) / max_step
        k_est = tl.where(k_lin < n_af, k_lin, tl.where(k_geo < n_af + n_bf, k_geo, k_cl))
    else:
        k_est = k_lin
    # a finite estimate, at most 2^22 steps on (float32 counts exactly below 2^24)
    k_est = tl.where(k_est == k_est, tl.minimum(k_est, k + 4194304.0), k)
    k_next = tl.maximum(tl.ceil(k_est - 0.01), k + 1.0)
    t_last, dt_last = _step_at(k_next - 1.0, t0f, step, cone, max_step, log1p_cone, n_af, n_bf, af, bf, CONE)
    fits = (k_next - 1.0 <= k) | (t_last + 0.5 * dt_last <= t_exit)
    return tl.where(fits, k_next, k + 1.0)


@triton.jit
def _march_kernel(
    rays_o_ptr, rays_d_ptr, box_ptr, jitter_ptr, rule_ptr, bitfield_ptr,
    counts_ptr, first_ptr, out_t_ptr, out_dt_ptr, out_ray_ptr, out_pos_ptr, out_dir_ptr,
    n_rays, near, max_steps, aabb_half, n_cascades, resolution, n_shell,
    CONE: tl.constexpr, JITTER: tl.constexpr, USE_GRID: tl.constexpr, WRITE: tl.constexpr, BLOCK: tl.constexpr,
    SHELL: tl.constexpr, SKIP: tl.constexpr,
):
    ray = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = ray < n_rays
    ox = tl.load(rays_o_ptr + ray * 3 + 0, mask=valid, other=0.0)
    oy = tl.load(rays_o_ptr + ray * 3 + 1, mask=valid, other=0.0)
    oz = tl.load(rays_o_ptr + ray * 3 + 2, mask=valid, other=0.0)
    dx = tl.load(rays_d_ptr + ray * 3 + 0, mask=valid, other=0.0)
    dy = tl.load(rays_d_ptr + ray * 3 + 1, mask=valid, other=0.0)
    dz = tl.load(rays_d_ptr + ray * 3 + 2, mask=valid, other=0.0)
    # rule: float64 [step_size, cone_angle, max_step_size, step/cone, max_step/cone, log1p(cone)]
    step64 = tl.load(rule_ptr + 0)
    cone64 = tl.load(rule_ptr + 1)
    step = step64.to(tl.float32)
    cone = cone64.to(tl.float32)
    max_step = tl.load(rule_ptr + 2).to(tl.float32)
    # the box: entry clamped at near, exit; misses get t_near = t_far = near (ray_aabb_intersect)
    enter_x, leave_x = _slab(ox, dx, tl.load(box_ptr + 0), tl.load(box_ptr + 3))
    enter_y, leave_y = _slab(oy, dy, tl.load(box_ptr + 1), tl.load(box_ptr + 4))
    enter_z, leave_z = _slab(oz, dz, tl.load(box_ptr + 2), tl.load(box_ptr + 5))
    t_near = tl.maximum(tl.maximum(tl.maximum(enter_x, enter_y), enter_z), near)
    t_far = tl.minimum(tl.minimum(leave_x, leave_y), leave_z)
    hit = (t_near < t_far) & (tl.abs(t_far) < float("inf"))
    t_near = tl.where(hit, t_near, near)
    t_far = tl.where(hit, t_far, near)
    if JITTER:  # start at a random fraction of the first step (march_rays' jitter)
        first_dt = tl.minimum(tl.maximum(t_near * cone, step), max_step)
        t_near = t_near + tl.load(jitter_ptr + ray, mask=valid, other=0.0) * first_dt
    finite = (ox == ox) & (oy == oy) & (oz == oz) & (dx == dx) & (dy == dy) & (dz == dz)
    if SHELL:  # every ray marches the shell; a miss starts there (march.py, "Background shell")
        alive = valid & finite
        in_shell = alive & (hit == 0)
        t_s = tl.maximum(t_near, step)
        shell_a = n_shell.to(tl.float32) + 1.0
        j = tl.zeros([BLOCK], dtype=tl.float32)
    else:
        alive = valid & hit & finite  # a ray with a NaN component is a miss, as in the reference
    log1p_cone64 = tl.load(rule_ptr + 5)
    log1p_cone = log1p_cone64.to(tl.float32)
    t0 = t_near.to(tl.float64)
    t0f = t0.to(tl.float32)
    if CONE:  # anchors of the closed form (march._step_anchors), float64
        n_a = tl.maximum(tl.ceil((tl.load(rule_ptr + 3) - t0) / step64), 0.0)
        a = t0 + n_a * step64
        n_b = tl.maximum(tl.ceil(tl.log(tl.load(rule_ptr + 4) / a) / log1p_cone64), 0.0)
        b = a * tl.exp(n_b * log1p_cone64)  # (1 + cone)^n_b
        n_af = n_a.to(tl.float32)
        n_bf = n_b.to(tl.float32)
        af = a.to(tl.float32)
        bf = b.to(tl.float32)
    first = tl.zeros([BLOCK], dtype=tl.int64)
    if WRITE:  # the count pass's counts bound the writes (0: a ray left out of a fixed capacity)
        first = tl.load(first_ptr + ray, mask=valid, other=0)
        alive = alive & (tl.load(counts_ptr + ray, mask=valid, other=0) > 0)
        limit = tl.load(counts_ptr + ray, mask=valid, other=0).to(tl.int32)
    kept = tl.zeros([BLOCK], dtype=tl.int32)
    k = tl.zeros([BLOCK], dtype=tl.float32)
    if not CONE:
        n_af = tl.zeros([BLOCK], dtype=tl.float32)
        n_bf = n_af
        af = n_af
        bf = n_af
    while tl.sum(alive.to(tl.int32), axis=0) > 0:
        t, dt = _step_at(k, t0f, step, cone, max_step, log1p_cone, n_af, n_bf, af, bf, CONE)
        t_mid = t + 0.5 * dt
        if SHELL:  # past the box: the steps uniform in disparity (march.shell_steps_at)
            leaving = (in_shell == 0) & (t_mid >= t_far)
            t_s = tl.where(leaving, tl.maximum(t, step), t_s)
            in_shell = in_shell | leaving
            scaled = t_s * shell_a
            t_j = tl.math.div_rn(scaled, shell_a - j)
            dt_j = tl.math.div_rn(scaled, shell_a - (j + 1.0)) - t_j
            t_mid = tl.where(in_shell, t_j + 0.5 * dt_j, t_mid)
            dt = tl.where(in_shell, dt_j, dt)
            alive = alive & ((in_shell == 0) | (j < shell_a - 1.0))
        else:
            alive = alive & (t_mid < t_far)
        px = ox + dx * t_mid
        py = oy + dy * t_mid
        pz = oz + dz * t_mid
        if USE_GRID:
            take = alive & _occupied(px, py, pz, bitfield_ptr, alive, aabb_half, n_cascades, resolution, SHELL)
        else:
            take = alive
        if WRITE:
            slot = first + kept
            tl.store(out_t_ptr + slot, t_mid, mask=take)
            tl.store(out_dt_ptr + slot, dt, mask=take)
            tl.store(out_ray_ptr + slot, ray.to(tl.int64), mask=take)
            tl.store(out_pos_ptr + slot * 3 + 0, px, mask=take)
            tl.store(out_pos_ptr + slot * 3 + 1, py, mask=take)
            tl.store(out_pos_ptr + slot * 3 + 2, pz, mask=take)
            tl.store(out_dir_ptr + slot * 3 + 0, dx, mask=take)
            tl.store(out_dir_ptr + slot * 3 + 1, dy, mask=take)
            tl.store(out_dir_ptr + slot * 3 + 2, dz, mask=take)
        kept += take.to(tl.int32)
        alive = alive & (kept < max_steps)
        if WRITE:
            alive = alive & (kept < limit)
        if SHELL:
            j += tl.where(in_shell, 1.0, 0.0)
            k += tl.where(in_shell, 0.0, 1.0)
        elif SKIP:  # an empty cell: on to the first step whose midpoint may lie beyond it
            empty = alive & (take == 0)
            t_exit = _cell_exit(ox, oy, oz, dx, dy, dz, px, py, pz, aabb_half, n_cascades, resolution)
            k = tl.where(empty, _step_after(k, t_exit, t0f, step, cone, max_step, log1p_cone, n_af, n_bf, af, bf,
                                            CONE), k + 1.0)
        else:
            k += 1.0
    if not WRITE:
        tl.store(counts_ptr + ray, kept.to(tl.int64), mask=valid)


def march_packed_triton(
    rays_o: torch.Tensor,
    rays_d: torch.Tensor,
    aabb: torch.Tensor,
    near: float,
    jitter: torch.Tensor | None,
    grid: OccupancyGrid | None,
    *,
    step_size: float,
    cone_angle: float,
    max_step_size: float,
    max_steps: int,
    background_steps: int = 0,
    block: int = MARCH_BLOCK,
    num_warps: int = MARCH_NUM_WARPS,
    skip_empty: bool = True,
) -> tuple[torch.Tensor, ...]:
    """Box intersection, jitter and the kept samples of every ray (the body of ``march_rays``).

    Args:
        rays_o, rays_d: [n_rays, 3] float32 origins and directions (world units).
        aabb: [2, 3] the box to march in (min corner, max corner).
        near: smallest distance along a ray (>= 0).
        jitter: [n_rays] float32 uniform draws in [0, 1) (the first step's start fraction, as
            ``march_rays`` draws them), or None for no jitter.
        grid: occupancy grid, or None to keep every step before the box exit.
        step_size, cone_angle, max_step_size, max_steps, background_steps: the step rule and the
            per-ray sample cap of :func:`trainer.render.march.march_rays` (already validated there).
        block, num_warps: launch configuration (rays per program, warps per program).
        skip_empty: step over empty occupancy cells in one iteration (the same samples; without the
            background shell): False walks every step, as the reference does.

    Returns:
        ``(ray_indices [S] int64, t [S], dt [S], positions [S, 3], directions [S, 3], counts
        [n_rays] int64, first [n_rays] int64)``, float tensors float32; ray-major, front to back
        within a ray; ``first`` is each ray's first sample. One host read (the total S).
    """
    device = rays_o.device
    n_rays = rays_o.shape[0]
    rays_o = rays_o.contiguous()
    rays_d = rays_d.contiguous()
    box = aabb.to(device=device, dtype=torch.float32).reshape(6).contiguous()
    cone = float(cone_angle)
    rule = march_rule_tensor(step_size, cone_angle, max_step_size, device)
    bitfield, common, scalars, launch = _launch_settings(rays_o, jitter, grid, cone, near, max_steps, block, num_warps,
                                                         background_steps, skip_empty)
    jitter_arg = jitter.contiguous() if jitter is not None else box
    counts = torch.empty(n_rays, dtype=torch.int64, device=device)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _march_kernel[launch](rays_o, rays_d, box, jitter_arg, rule, bitfield, counts, counts,
                              box, box, counts, box, box, *scalars, WRITE=False, **common)
        ends = torch.cumsum(counts, 0)
        total = int(ends[-1]) if n_rays else 0  # the host read that sizes the outputs
        first = ends - counts
        t = torch.empty(total, dtype=torch.float32, device=device)
        dt = torch.empty(total, dtype=torch.float32, device=device)
        ray_indices = torch.empty(total, dtype=torch.int64, device=device)
        positions = torch.empty(total, 3, dtype=torch.float32, device=device)
        directions = torch.empty(total, 3, dtype=torch.float32, device=device)
        if total:
            _march_kernel[launch](rays_o, rays_d, box, jitter_arg, rule, bitfield, counts, first,
                                  t, dt, ray_indices, positions, directions, *scalars, WRITE=True, **common)
    return ray_indices, t, dt, positions, directions, counts, first



def march_rule_tensor(step_size: float, cone_angle: float, max_step_size: float, device: torch.device) -> torch.Tensor:
    """The step rule as the kernel reads it: float64 [6] ``[step_size, cone_angle, max_step_size,
    step_size/cone, max_step_size/cone, log1p(cone)]`` on ``device`` (made once by a captured step)."""
    cone = float(cone_angle)
    return torch.tensor(
        [step_size, cone, max_step_size, step_size / cone if cone else 0.0,
         max_step_size / cone if cone else 0.0, math.log1p(cone)],
        dtype=torch.float64,
    ).to(device, non_blocking=True)


def _launch_settings(rays_o: torch.Tensor, jitter: torch.Tensor | None, grid: OccupancyGrid | None, cone: float,
                     near: float, max_steps: int, block: int, num_warps: int,
                     background_steps: int, skip_empty: bool) -> tuple[torch.Tensor, dict, tuple, tuple]:
    """Bitfield, constexpr options, scalar arguments and grid of one march launch."""
    n_rays = rays_o.shape[0]
    if grid is not None:
        bitfield = grid.bitfield.reshape(-1)
        aabb_half, n_cascades, resolution = 0.5 * grid.aabb_scale, grid.levels, grid.resolution
    else:
        bitfield = torch.zeros(1, dtype=torch.uint8, device=rays_o.device)
        aabb_half, n_cascades, resolution = 0.0, 1, 2
    common = dict(CONE=cone > 0.0, JITTER=jitter is not None, USE_GRID=grid is not None, BLOCK=block,
                  SHELL=background_steps > 0, SKIP=skip_empty and grid is not None and background_steps == 0,
                  num_warps=num_warps, **_COMPILE_OPTIONS)
    scalars = (n_rays, float(near), int(max_steps), float(aabb_half), int(n_cascades), int(resolution),
               int(background_steps))
    return bitfield, common, scalars, (triton.cdiv(max(n_rays, 1), block),)


def march_fixed_triton(
    rays_o: torch.Tensor,
    rays_d: torch.Tensor,
    box: torch.Tensor,
    rule: torch.Tensor,
    jitter: torch.Tensor | None,
    grid: OccupancyGrid | None,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    cone_angle: float,
    max_steps: int,
    near: float = 0.0,
    background_steps: int = 0,
    block: int = MARCH_BLOCK,
    num_warps: int = MARCH_NUM_WARPS,
    skip_empty: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The march of :func:`march_packed_triton` into buffers of a fixed capacity, without a host read.

    Rays are taken in order while their samples fit whole into the ``capacity`` slots of ``out``;
    the rest get no sample (count 0). Shapes depend on ``capacity`` and ``n_rays`` only, so the
    call can be captured in a CUDA graph.

    Args:
        rays_o, rays_d: [n_rays, 3] float32 (a ray with a NaN component is a miss).
        box: [6] float32 on the rays' device (min corner, max corner).
        rule: :func:`march_rule_tensor` of the step rule.
        jitter: [n_rays] float32 uniform draws, or None.
        grid: occupancy grid, or None.
        out: ``(t [C], dt [C], ray_indices [C] int64, positions [C, 3], directions [C, 3])``,
            written in the first ``sum(counts)`` slots; the rest keep their old values.
        cone_angle, max_steps, near, background_steps, skip_empty: as :func:`march_packed_triton`.

    Returns:
        ``(counts [n_rays] int64, all_counts [n_rays] int64)``: each ray's samples in ``out``
        (0 for rays that did not fit) and before the capacity cut.
    """
    t, dt, ray_indices, positions, directions = out
    capacity = t.shape[0]
    bitfield, common, scalars, launch = _launch_settings(rays_o, jitter, grid, float(cone_angle), near, max_steps,
                                                         block, num_warps, background_steps, skip_empty)
    jitter_arg = jitter.contiguous() if jitter is not None else box
    all_counts = torch.empty(rays_o.shape[0], dtype=torch.int64, device=rays_o.device)
    with torch.cuda.device(rays_o.device) if rays_o.is_cuda else contextlib.nullcontext():
        _march_kernel[launch](rays_o, rays_d, box, jitter_arg, rule, bitfield, all_counts, all_counts,
                              box, box, all_counts, box, box, *scalars, WRITE=False, **common)
        ends = torch.cumsum(all_counts, 0)
        counts = torch.where(ends <= capacity, all_counts, 0)
        first = ends - all_counts
        _march_kernel[launch](rays_o, rays_d, box, jitter_arg, rule, bitfield, counts, first,
                              t, dt, ray_indices, positions, directions, *scalars, WRITE=True, **common)
    return counts, all_counts
