"""Sample compaction before the training forward pass (instant-ngp's two-pass training step).

instant-ngp (``src/testbed_nerf.cu``, ``train_nerf_step``) does not train on every marched sample.
It first runs the density network without gradients on all marched samples, walks each ray front to
back and stops where the transmittance falls below ε = 1e-4 (``compute_loss_kernel_train_nerf``), and
copies the samples in front of that point into a batch of fixed size, the target batch size
(2^18); only that batch goes through the forward and backward passes. Rays whose samples no longer
fit are dropped from the step. The rays per step are then sized so that the *compacted* count meets
the target (``update_after_training``: ``rays_per_batch *= target_batch_size / measured_batch_size``
with the compacted count). Behind an opaque surface the occupancy grid still marks cells as occupied,
so compaction lets a step train on several times more rays for the same backward cost.

Here:

* :func:`kept_counts`: per ray, the number of leading samples with ``T_i ≥ ε`` (the transmittance is
  non-increasing along a ray, so the kept samples are a prefix of the ray's samples). The reference
  uses :func:`~trainer.render.volrend.render_weights`' transmittance;
  :func:`~trainer.render.triton_volrend.kept_counts_triton` is the one-launch fast twin.
* :func:`compact_samples`: the kept samples of whole rays, in ray order, copied into a batch of fixed
  size ``capacity`` without a host synchronisation (the output shape depends only on ``capacity``).
  Rays that do not fit whole are dropped (``ray_fits`` false). The free slots are padding samples
  with ``dt = 0``, so they carry zero weight and get zero gradient (``α = 1 − e^{−σ·0} = 0``) and
  leave every colour unchanged. They are spread over all rays (at most ``⌈free / n_rays⌉`` per ray,
  after the ray's own samples) and copy distinct marched samples: the compositing kernels walk a
  ray's samples in one lane, and the hash-grid backward adds into the entries of each sample's
  position, so padding piled onto one ray or one position would serialise both.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from trainer.render.march import PackedSamples
from trainer.render.volrend import render_weights

__all__ = ["CompactedSamples", "compact_samples", "kept_counts"]


def kept_counts(sigmas: Tensor, dt: Tensor, samples: PackedSamples, early_stop_transmittance: float,
                valid: Tensor | None = None) -> Tensor:
    """Per ray, how many leading samples have a transmittance ``T_i ≥ ε`` in front of them.

    Args:
        sigmas: [S] float densities σ ≥ 0 of ``samples`` (1/world units).
        dt: [S] float step lengths (world units).
        samples: the packed samples (``ray_indices``, ``n_rays``).
        early_stop_transmittance: ε; 0 keeps every sample.
        valid: optional [S] bool, the samples that count (the unused slots of a fixed-capacity
            buffer, :mod:`trainer.render.fixed_march`, are false).

    Returns:
        kept: [n_rays] int64.

    Raises:
        ValueError: if the shapes do not match.
    """
    _, transmittance, _ = render_weights(sigmas, dt, samples.ray_indices, samples.n_rays, 0.0)
    keep = transmittance >= early_stop_transmittance
    keep = (keep if valid is None else keep & valid).long()
    kept = torch.zeros(samples.n_rays, dtype=torch.int64, device=sigmas.device)
    return kept.index_add_(0, samples.ray_indices, keep)


@dataclasses.dataclass
class CompactedSamples:
    """The output of :func:`compact_samples`.

    Attributes:
        samples: :class:`PackedSamples` with exactly ``capacity`` samples (padding included) over the
            same ``n_rays`` rays; a dropped ray holds padding samples only (or none).
        ray_fits: [n_rays] bool, whether the ray's kept samples are all in ``samples`` (rays to
            leave out of the loss are false).
        n_kept: [] int64 on the device, the kept samples of all rays before the capacity cut (what
            the next steps' ray count is sized on).
        source: [capacity] int64, the marched sample each slot copies.
        is_padding: [capacity] bool, the padding slots (``dt = 0``).
    """

    samples: PackedSamples
    ray_fits: Tensor
    n_kept: Tensor
    source: Tensor
    is_padding: Tensor


def compact_samples(samples: PackedSamples, kept: Tensor, capacity: int, triton: bool = False) -> CompactedSamples:
    """Copy the first ``kept[r]`` samples of every ray ``r`` into a batch of ``capacity`` samples.

    Rays are taken in order while their kept samples fit whole; the rest are dropped. The free
    slots are padding with ``dt = 0``, spread evenly over the rays (ray ``r`` gets
    ``⌊(r+1)·free/n⌋ − ⌊r·free/n⌋`` of them, after its own samples), each a copy of a different
    marched sample (slot ``j`` copies sample ``j mod S``), so the packed layout stays valid for both
    compositing paths and no ray is much longer than its kept samples. No host synchronisation:
    every shape depends on ``capacity`` and ``samples.n_rays`` only.

    Args:
        samples: packed samples of ``n_rays ≥ 1`` rays with at least one sample.
        kept: [n_rays] int64, from :func:`kept_counts` (``0 ≤ kept[r] ≤ count[r]``).
        capacity: the number of samples of the output (≥ 1).
        triton: do the per-slot half (which ray and sample each slot takes, the copies) with
            :func:`trainer.render.triton_compact.compact_slots_triton`, one launch, identical
            results; the per-ray half stays in PyTorch.

    Returns:
        :class:`CompactedSamples`.

    Raises:
        ValueError: for ``capacity < 1``, no rays or no samples, or a ``kept`` of the wrong shape.
    """
    n_rays, n_samples = samples.n_rays, samples.n_samples
    if capacity < 1:
        raise ValueError(f"compact_samples: capacity must be >= 1, got {capacity}")
    if n_rays < 1 or n_samples < 1:
        raise ValueError(f"compact_samples: needs at least one ray and one sample, got {n_rays} and {n_samples}")
    if kept.shape != (n_rays,):
        raise ValueError(f"compact_samples: kept must be [{n_rays}], got {tuple(kept.shape)}")
    device = samples.t.device
    kept = kept.to(torch.int64)
    end_slot = torch.cumsum(kept, 0)  # [n] slot after each ray's last kept sample, all rays taken
    ray_fits = end_slot <= capacity  # false for a suffix of the rays (end_slot is non-decreasing)
    real = torch.where(ray_fits, kept, 0)  # [n] samples each ray brings into the batch
    n_pad = capacity - real.sum()  # [] free slots (device scalar)
    pad_before = torch.arange(n_rays + 1, device=device) * n_pad // n_rays  # [n+1] padding of rays < r
    count = real + (pad_before[1:] - pad_before[:-1])
    end = torch.cumsum(count, 0)  # end[-1] == capacity
    start = end - count
    if triton:
        from trainer.render.triton_compact import compact_slots_triton

        positions, directions, t, dt, ray, is_padding, source = compact_slots_triton(
            end, start, real, samples.packed_info[:, 0], samples.positions, samples.directions, samples.t,
            samples.dt, capacity,
        )
    else:
        slot = torch.arange(capacity, device=device)
        ray = torch.searchsorted(end, slot, right=True).clamp_(max=n_rays - 1)  # (the clamp never acts)
        offset = slot - start[ray]
        is_padding = offset >= real[ray]
        source = torch.where(is_padding, slot % n_samples, samples.packed_info[ray, 0] + offset)
        positions, directions, t = samples.positions[source], samples.directions[source], samples.t[source]
        dt = torch.where(is_padding, 0.0, samples.dt[source])
    compacted = PackedSamples(
        positions=positions,
        directions=directions,
        t=t,
        dt=dt,
        ray_indices=ray,
        packed_info=torch.stack([start, count], dim=1),
        n_rays=n_rays,
    )
    return CompactedSamples(compacted, ray_fits, end_slot[-1], source, is_padding)
