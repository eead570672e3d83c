"""Random packed sample layouts for the compaction tests (PyTorch and Triton)."""

from __future__ import annotations

import torch

from trainer.render.march import PackedSamples


def packed_samples(counts: torch.Tensor, generator: torch.Generator, sigma_scale: float = 60.0):
    """Random packed samples (positions, directions, t, dt in [0, 1), dt scaled by 0.05) of rays with
    ``counts`` [n_rays] int64 samples each, and their densities [n_samples] in [0, sigma_scale)."""
    n_rays = counts.shape[0]
    n_samples = int(counts.sum())
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
    packed_info = torch.stack((torch.cumsum(counts, 0) - counts, counts), dim=-1)
    samples = PackedSamples(
        positions=torch.rand(n_samples, 3, generator=generator),
        directions=torch.rand(n_samples, 3, generator=generator),
        t=torch.rand(n_samples, generator=generator),
        dt=torch.rand(n_samples, generator=generator) * 0.05,
        ray_indices=ray_indices,
        packed_info=packed_info,
        n_rays=n_rays,
    )
    sigmas = torch.rand(n_samples, generator=generator) * sigma_scale
    return samples, sigmas
