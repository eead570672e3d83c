"""Sample compaction (trainer/render/compact.py): the kept counts follow instant-ngp's early stop,
and compositing the compacted batch gives the same colours and gradients as compositing every
marched sample with early stopping, for every ray that fits; the rest are flagged and padding is
inert. Inputs are fresh random draws (``NGPTUNE_TEST_SEED`` replays a run)."""

from __future__ import annotations

import pytest
import torch

from tests.support.packed_samples import packed_samples
from tests.support.triton_worker import random_seed
from trainer.render.compact import compact_samples, kept_counts
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE, composite, composite_reference


def _random_rays(n_rays: int, most: int):
    """A fresh seed, rays with 0..most-1 samples each, their densities, counts and kept counts."""
    seed = random_seed()
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, most, (n_rays,), generator=g)
    samples, sigmas = packed_samples(counts, g)
    return seed, samples, sigmas, counts, kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)


def test_kept_counts_stop_where_the_transmittance_falls_below_epsilon():
    seed, samples, sigmas, counts, kept = _random_rays(50, 40)
    assert kept.dtype == torch.int64 and kept.shape == (50,)
    for ray in range(50):  # the slow walk of the reference renderer, ray by ray
        start, count = samples.packed_info[ray].tolist()
        transmittance, expected = 1.0, 0
        for i in range(start, start + count):
            if transmittance < EARLY_STOP_TRANSMITTANCE:
                break
            expected += 1
            transmittance *= float(torch.exp(-sigmas[i].double() * samples.dt[i].double()))
        assert int(kept[ray]) == expected, f"seed {seed}, ray {ray}"
    assert (kept < counts).any(), f"seed {seed}: no ray stopped early; the densities are too low for this test"
    assert int(kept_counts(sigmas, samples.dt, samples, 0.0).sum()) == int(counts.sum())


@pytest.mark.parametrize("capacity_fraction", [2.0, 1.0, 0.6, 0.05])
def test_compacted_batch_composites_like_every_sample_with_early_stop(capacity_fraction):
    seed = random_seed()
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 30, (37,), generator=g)
    counts[0] = 0  # a ray without samples first
    counts[-1] = 25
    samples, sigmas = packed_samples(counts, g)
    rgbs = torch.rand(samples.n_samples, 3, generator=g)
    background = torch.rand(37, 3, generator=g)
    grad_out = torch.randn(37, 3, generator=g)
    kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
    n_kept = int(kept.sum())
    capacity = max(1, int(n_kept * capacity_fraction))
    out = compact_samples(samples, kept, capacity)
    c = out.samples
    where = f"seed {seed}, capacity {capacity} of {n_kept} kept"

    assert int(out.n_kept) == n_kept, where
    assert c.n_samples == capacity and c.positions.shape == (capacity, 3) and c.packed_info.shape == (37, 2), where
    assert torch.equal(c.ray_indices, torch.sort(c.ray_indices).values), where
    # packed_info and ray_indices describe the same layout
    assert torch.equal(torch.repeat_interleave(torch.arange(37), c.packed_info[:, 1]), c.ray_indices), where
    starts = torch.cumsum(c.packed_info[:, 1], 0) - c.packed_info[:, 1]
    assert torch.equal(starts, c.packed_info[:, 0]), where
    # whole rays in order: the fitting rays are a prefix, and they all fit when the capacity allows
    fits = out.ray_fits
    ends = torch.cumsum(kept, 0)
    assert torch.equal(fits, ends <= capacity), where
    if capacity >= n_kept:
        assert bool(fits.all()), where
    # padding: zero steps, after each ray's own samples, spread evenly, copies of distinct samples
    real = int(torch.where(fits, kept, 0).sum())
    pad = out.is_padding
    n_pad = capacity - real
    assert int(pad.sum()) == n_pad, where
    assert bool((c.dt[pad] == 0).all()) and bool((c.dt[~pad] > 0).all()), where
    offset = torch.arange(capacity) - c.packed_info[c.ray_indices, 0]
    assert torch.equal(pad, offset >= torch.where(fits, kept, 0)[c.ray_indices]), where
    pad_per_ray = c.packed_info[:, 1] - torch.where(fits, kept, 0)
    assert int(pad_per_ray.max()) <= -(-n_pad // 37) and int(pad_per_ray.min()) >= n_pad // 37, where
    if capacity <= samples.n_samples:  # (the trainer's case: at most the marched count)
        assert out.source[pad].unique().numel() == n_pad, where

    # the samples of fitting rays are the kept samples of those rays, in order
    source = torch.cat([torch.arange(int(s), int(s) + int(k)) for s, k, f in
                        zip(samples.packed_info[:, 0], kept, fits) if f] or [torch.zeros(0, dtype=torch.long)])
    assert torch.equal(out.source[~pad], source), where
    assert torch.equal(c.positions, samples.positions[out.source]), where
    assert torch.equal(c.dt[~pad], samples.dt[source]), where

    # colours and gradients agree with early-stopped compositing of every sample
    s_full, c_full = sigmas.clone().requires_grad_(), rgbs.clone().requires_grad_()
    full = composite(s_full, c_full, samples.dt, samples.ray_indices, 37, background).rgb
    (full * grad_out * fits[:, None]).sum().backward()
    s_c = sigmas[out.source].requires_grad_()
    c_c = rgbs[out.source].requires_grad_()
    compacted = composite(s_c, c_c, c.dt, c.ray_indices, 37, background).rgb
    (compacted * grad_out * fits[:, None]).sum().backward()
    assert torch.allclose(compacted[fits], full[fits], atol=1e-6), where
    assert torch.allclose(s_c.grad[~pad], s_full.grad[source], atol=1e-5), where
    assert torch.allclose(c_c.grad[~pad], c_full.grad[source], atol=1e-6), where
    assert bool((s_c.grad[pad] == 0).all()) and bool((c_c.grad[pad] == 0).all()), where
    # every marched sample a fitting ray does not keep had no gradient to speak of anyway (the
    # reference's transmittance products reach ~1e-17 there)
    dropped = torch.ones(samples.n_samples, dtype=torch.bool)
    dropped[source] = False
    in_fitting_ray = fits[samples.ray_indices]
    assert float(s_full.grad[dropped & in_fitting_ray].abs().sum()) <= 1e-9 * float(s_full.grad.abs().max()), where
    # and the slow reference agrees on a fitting ray
    ref = composite_reference(sigmas, rgbs, samples.dt, samples.ray_indices, 37, background).rgb
    assert torch.allclose(ref[fits], compacted[fits].detach(), atol=1e-5), where


def test_padding_does_not_pile_onto_one_ray_or_one_position():
    # the compositing kernels walk a ray in one lane: 2 % of free slots on one ray of 2000 would
    # make that lane ~17 times longer than the longest real ray
    seed, samples, sigmas, counts, kept = _random_rays(2000, 30)
    capacity = int(int(kept.sum()) * 1.02)
    out = compact_samples(samples, kept, capacity)
    n_pad = capacity - int(kept.sum())
    assert bool(out.ray_fits.all()), f"seed {seed}"
    assert int(out.samples.packed_info[:, 1].max()) <= int(kept.max()) + -(-n_pad // 2000), f"seed {seed}"
    assert out.source[out.is_padding].unique().numel() == n_pad, f"seed {seed}"


@pytest.mark.parametrize("counts, kept, capacity, fits", [
    ([5], [3], 8, [True]),  # one ray, padding after its samples
    ([5], [3], 2, [False]),  # one ray that does not fit: all padding
    ([6, 4, 2], [6, 2, 1], 4, [False, False, False]),  # the first ray does not fit: every ray dropped
    ([0, 4, 0, 3], [0, 2, 0, 3], 5, [True, True, True, True]),  # rays without samples
    ([0, 4, 0, 3], [0, 2, 0, 3], 3, [True, True, True, False]),
])
def test_edge_cases_keep_a_valid_layout(counts, kept, capacity, fits):
    g = torch.Generator().manual_seed(0)
    samples, _ = packed_samples(torch.tensor(counts), g)
    out = compact_samples(samples, torch.tensor(kept), capacity)
    c = out.samples
    assert out.ray_fits.tolist() == fits and int(out.n_kept) == sum(kept)
    assert c.n_samples == capacity and int(c.packed_info[:, 1].sum()) == capacity
    assert torch.equal(torch.repeat_interleave(torch.arange(len(counts)), c.packed_info[:, 1]), c.ray_indices)
    real = [k if f else 0 for k, f in zip(kept, fits)]
    assert int((~out.is_padding).sum()) == sum(real)
    for ray, (start, count) in enumerate(c.packed_info.tolist()):
        assert out.is_padding[start:start + count].tolist() == [False] * real[ray] + [True] * (count - real[ray])
        first = int(samples.packed_info[ray, 0])
        assert out.source[start:start + real[ray]].tolist() == list(range(first, first + real[ray]))
    assert bool((c.dt[out.is_padding] == 0).all()) and bool((c.dt[~out.is_padding] > 0).all())


def test_bad_arguments_are_refused():
    g = torch.Generator().manual_seed(0)
    samples, sigmas = packed_samples(torch.tensor([3, 2]), g)
    kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        compact_samples(samples, kept, 0)
    with pytest.raises(ValueError, match=r"kept must be \[2\]"):
        compact_samples(samples, kept[:1], 4)
    empty, _ = packed_samples(torch.tensor([0, 0]), g)
    with pytest.raises(ValueError, match="at least one ray and one sample"):
        compact_samples(empty, torch.zeros(2, dtype=torch.long), 4)
