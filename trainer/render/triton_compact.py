"""The per-slot half of :func:`trainer.render.compact.compact_samples` in one Triton kernel launch.

Given the per-ray layout of a compacted batch (``start``/``end`` slots, ``real`` kept samples per
ray, each ray's first marched sample), every slot ``j < capacity`` finds its ray by a binary search
(``ray = #{r : end[r] ≤ j}``, as ``torch.searchsorted(end, j, right=True)``), its offset in the ray,
whether it is padding (``offset ≥ real[ray]``), the marched sample it copies (padding: ``j mod S``)
and copies that sample's position, direction, ``t`` and ``dt`` (0 for padding). The PyTorch twin in
``compact_samples`` takes ~16 kernel launches for the same; the results are identical (integer
arithmetic and copies only), which the tests check in Triton's interpreter and on CUDA.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

__all__ = ["COMPACT_BLOCK", "compact_slots_triton"]

COMPACT_BLOCK = 256


@triton.jit
def _compact_slots_kernel(
    end_ptr, start_ptr, real_ptr, first_ptr, positions_ptr, directions_ptr, t_ptr, dt_ptr,
    out_positions_ptr, out_directions_ptr, out_t_ptr, out_dt_ptr, out_ray_ptr, out_padding_ptr, out_source_ptr,
    capacity, n_rays, n_samples, SEARCH_STEPS: tl.constexpr, BLOCK: tl.constexpr,
):
    slot = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = slot < capacity
    # first r with end[r] > slot, in [lo, hi] = [0, n_rays - 1] (the last ray's end is capacity)
    lo = tl.zeros((BLOCK,), tl.int64)
    hi = tl.zeros((BLOCK,), tl.int64) + (n_rays - 1)
    for _ in tl.static_range(SEARCH_STEPS):
        mid = (lo + hi) // 2
        end_mid = tl.load(end_ptr + mid, mask=mask, other=0)
        active = lo < hi
        go_right = end_mid <= slot
        lo = tl.where(active & go_right, mid + 1, lo)
        hi = tl.where(active & ~go_right, mid, hi)
    ray = lo
    offset = slot - tl.load(start_ptr + ray, mask=mask, other=0)
    padding = offset >= tl.load(real_ptr + ray, mask=mask, other=0)
    source = tl.where(padding, slot % n_samples, tl.load(first_ptr + ray, mask=mask, other=0) + offset)
    for axis in tl.static_range(3):
        tl.store(out_positions_ptr + slot * 3 + axis, tl.load(positions_ptr + source * 3 + axis, mask=mask), mask=mask)
        tl.store(out_directions_ptr + slot * 3 + axis, tl.load(directions_ptr + source * 3 + axis, mask=mask),
                 mask=mask)
    tl.store(out_t_ptr + slot, tl.load(t_ptr + source, mask=mask), mask=mask)
    dt = tl.load(dt_ptr + source, mask=mask)
    tl.store(out_dt_ptr + slot, tl.where(padding, tl.zeros_like(dt), dt), mask=mask)
    tl.store(out_ray_ptr + slot, ray, mask=mask)
    tl.store(out_padding_ptr + slot, padding, mask=mask)
    tl.store(out_source_ptr + slot, source, mask=mask)


def compact_slots_triton(
    end: torch.Tensor,
    start: torch.Tensor,
    real: torch.Tensor,
    first: torch.Tensor,
    positions: torch.Tensor,
    directions: torch.Tensor,
    t: torch.Tensor,
    dt: torch.Tensor,
    capacity: int,
    block: int = COMPACT_BLOCK,
) -> tuple[torch.Tensor, ...]:
    """Slots of a compacted batch and the samples they copy.

    Args:
        end, start: [n_rays] int64, slot after each ray's last slot and its first slot
            (``end[-1] == capacity``, non-decreasing).
        real: [n_rays] int64, kept samples each ray brings (the rest of its slots are padding).
        first: [n_rays] int64, index of each ray's first marched sample.
        positions, directions: [S, 3] float; t, dt: [S] float, the marched samples (S ≥ 1).
        capacity: number of slots (≥ 1).
        block: slots per program.

    Returns:
        ``positions`` [capacity, 3], ``directions`` [capacity, 3], ``t``, ``dt`` [capacity] (the
        inputs' dtypes; ``dt`` 0 on padding), ``ray`` [capacity] int64, ``is_padding`` [capacity]
        bool, ``source`` [capacity] int64.

    Raises:
        ValueError: for mismatched shapes, no rays or samples, or ``capacity < 1``.
    """
    n_rays, n_samples, capacity = end.shape[0], t.shape[0], int(capacity)
    if capacity < 1 or n_rays < 1 or n_samples < 1:
        raise ValueError(f"compact_slots_triton: needs capacity, rays and samples >= 1, got "
                         f"{capacity}, {n_rays}, {n_samples}")
    per_ray = (end, start, real, first)
    if any(x.shape != (n_rays,) or x.dtype != torch.int64 for x in per_ray):
        raise ValueError("compact_slots_triton: end, start, real and first must be [n_rays] int64")
    if block < 1 or block & (block - 1):
        raise ValueError(f"compact_slots_triton: block must be a power of two, got {block}")
    if positions.shape != (n_samples, 3) or directions.shape != (n_samples, 3) or t.shape != (n_samples,) \
            or dt.shape != (n_samples,):
        raise ValueError("compact_slots_triton: positions/directions must be [S, 3] and t/dt [S]")
    device = t.device
    out_positions = torch.empty(capacity, 3, dtype=positions.dtype, device=device)
    out_directions = torch.empty(capacity, 3, dtype=directions.dtype, device=device)
    out_t = torch.empty(capacity, dtype=t.dtype, device=device)
    out_dt = torch.empty(capacity, dtype=dt.dtype, device=device)
    ray = torch.empty(capacity, dtype=torch.int64, device=device)
    padding = torch.empty(capacity, dtype=torch.bool, device=device)
    source = torch.empty(capacity, dtype=torch.int64, device=device)
    # ⌈log2(n_rays + 1)⌉ halvings of [0, n_rays − 1]; a compile-time constant (one variant per
    # power of two of the ray count), unrolled
    search_steps = max(1, int(n_rays).bit_length())
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _compact_slots_kernel[(triton.cdiv(capacity, block),)](
            end.contiguous(), start.contiguous(), real.contiguous(), first.contiguous(),
            positions.contiguous(), directions.contiguous(), t.contiguous(), dt.contiguous(),
            out_positions, out_directions, out_t, out_dt, ray, padding, source,
            capacity, n_rays, n_samples, SEARCH_STEPS=search_steps, BLOCK=block, num_warps=4,
        )
    return out_positions, out_directions, out_t, out_dt, ray, padding, source
