"""Volume rendering of packed samples: hand values, parity with the per-ray loop, segments."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.render.volrend import (
    composite,
    composite_reference,
    composite_segment,
    composite_segments,
    render_weights,
)


def random_packed(n_rays: int, seed: int, dtype=torch.float64, max_count: int = 9):
    """Random packed samples with per-ray counts in 0..max_count (some rays empty)."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, max_count + 1, (n_rays,), generator=g)
    counts[::5] = 0
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
    s = int(counts.sum())
    sigmas = (torch.rand(s, generator=g, dtype=dtype) * 3.0) ** 3  # up to 27: some rays saturate
    dt = torch.rand(s, generator=g, dtype=dtype) * 0.4 + 0.05
    rgbs = torch.rand(s, 3, generator=g, dtype=dtype)
    t = torch.cumsum(dt, 0)
    background = torch.rand(n_rays, 3, generator=g, dtype=dtype)
    return sigmas, rgbs, dt, ray_indices, t, background, counts


def test_two_samples_by_hand():
    sigmas = torch.tensor([1.0, 1.0])
    dt = torch.tensor([0.5, 0.5])
    rgbs = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ray_indices = torch.tensor([0, 0])
    alpha = 1 - math.exp(-0.5)
    weights, transmittance, alphas = render_weights(sigmas, dt, ray_indices, n_rays=1)
    torch.testing.assert_close(alphas, torch.tensor([alpha, alpha]))
    torch.testing.assert_close(transmittance, torch.tensor([1.0, math.exp(-0.5)]))
    torch.testing.assert_close(weights, torch.tensor([alpha, math.exp(-0.5) * alpha]))

    out = composite(sigmas, rgbs, dt, ray_indices, 1, torch.tensor([0.0, 0.0, 1.0]), t=torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(out.rgb, torch.tensor([[alpha, math.exp(-0.5) * alpha, math.exp(-1.0)]]))
    torch.testing.assert_close(out.opacity, torch.tensor([1 - math.exp(-1.0)]))
    torch.testing.assert_close(out.depth, torch.tensor([alpha + 2 * math.exp(-0.5) * alpha]))
    torch.testing.assert_close(out.transmittance, torch.tensor([math.exp(-1.0)]))


def test_early_stop_drops_samples_behind_an_opaque_one():
    # σΔt = 10 leaves T = e^-10 ≈ 4.5e-5 < 1e-4: the second sample gets no weight.
    sigmas = torch.tensor([100.0, 5.0, 2.0], dtype=torch.float64)
    dt = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)
    rgbs = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    ray_indices = torch.tensor([0, 0, 1])
    bg = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    out = composite(sigmas, rgbs, dt, ray_indices, 2, bg)
    a0, a2 = 1 - math.exp(-10.0), 1 - math.exp(-0.2)
    t_after = math.exp(-10.0)
    expected = torch.tensor(
        [[a0 + t_after, t_after, t_after], [1 - a2, 1 - a2, a2 + (1 - a2)]], dtype=torch.float64
    )
    torch.testing.assert_close(out.rgb, expected)
    torch.testing.assert_close(out.transmittance, torch.tensor([t_after, 1 - a2], dtype=torch.float64))
    torch.testing.assert_close(out.opacity + out.transmittance, torch.ones(2, dtype=torch.float64))
    # Without early stop the second sample contributes T·α.
    full = composite(sigmas, rgbs, dt, ray_indices, 2, bg, early_stop_transmittance=0.0)
    a1 = 1 - math.exp(-0.5)
    assert full.rgb[0, 1].item() == pytest.approx(t_after * a1 + t_after * (1 - a1), rel=1e-12)
    assert full.transmittance[0].item() == pytest.approx(math.exp(-10.5), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_equals_the_per_ray_loop_in_values_and_gradients(seed):
    sigmas, rgbs, dt, ray_indices, t, background, counts = random_packed(40, seed)
    n_rays = counts.numel()
    assert (counts == 0).any()
    weights, transmittance, _ = render_weights(sigmas, dt, ray_indices, n_rays)
    assert ((transmittance < 1e-4) & (sigmas > 0)).any(), "early termination not exercised"

    inputs = [sigmas.clone().requires_grad_(), rgbs.clone().requires_grad_()]
    fast = composite(inputs[0], inputs[1], dt, ray_indices, n_rays, background, t=t)
    ref_inputs = [sigmas.clone().requires_grad_(), rgbs.clone().requires_grad_()]
    slow = composite_reference(ref_inputs[0], ref_inputs[1], dt, ray_indices, n_rays, background, t=t)
    for name in ("rgb", "opacity", "depth", "transmittance"):
        torch.testing.assert_close(getattr(fast, name), getattr(slow, name), rtol=1e-10, atol=1e-12, msg=name)
    torch.testing.assert_close(fast.rgb[counts == 0], background[counts == 0])

    g = torch.Generator().manual_seed(seed + 100)
    upstream_rgb = torch.randn(n_rays, 3, generator=g, dtype=torch.float64)
    upstream_depth = torch.randn(n_rays, generator=g, dtype=torch.float64)
    fast_loss = (fast.rgb * upstream_rgb).sum() + (fast.depth * upstream_depth).sum()
    slow_loss = (slow.rgb * upstream_rgb).sum() + (slow.depth * upstream_depth).sum()
    fast_grads = torch.autograd.grad(fast_loss, inputs)
    slow_grads = torch.autograd.grad(slow_loss, ref_inputs)
    for fast_grad, slow_grad in zip(fast_grads, slow_grads):
        torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-8, atol=1e-10)
    assert fast_grads[0].abs().sum() > 0 and fast_grads[1].abs().sum() > 0


def test_float32_values_match_the_reference():
    sigmas, rgbs, dt, ray_indices, t, background, counts = random_packed(30, 7, dtype=torch.float32)
    fast = composite(sigmas, rgbs, dt, ray_indices, counts.numel(), background[0], t=t)
    slow = composite_reference(sigmas, rgbs, dt, ray_indices, counts.numel(), background[0], t=t)
    assert fast.rgb.dtype == torch.float32
    torch.testing.assert_close(fast.rgb, slow.rgb, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.transmittance, slow.transmittance, rtol=1e-5, atol=1e-6)


def test_transmittance_does_not_cancel_across_many_rays():
    # 20k identical rays of 30 samples with σΔt ≈ 0.507 (not a round float): a float32 running sum
    # over all samples reaches 3e5, where float32 spacing is 0.03, and the per-ray differences
    # would be off by a few percent; every ray must render like the first.
    n_rays, per_ray = 20_000, 30
    ray_indices = torch.arange(n_rays).repeat_interleave(per_ray)
    sigmas = torch.full((n_rays * per_ray,), 3.7)
    dt = torch.full_like(sigmas, 0.137)
    _, transmittance, _ = render_weights(sigmas, dt, ray_indices, n_rays, early_stop_transmittance=0.0)
    thickness = (sigmas[0] * dt[0]).double()
    expected = torch.exp(-thickness * torch.arange(per_ray, dtype=torch.float64)).float().repeat(n_rays)
    torch.testing.assert_close(transmittance, expected, rtol=1e-5, atol=0)


def test_segments_composite_like_the_whole_ray():
    sigmas, rgbs, dt, ray_indices, _, background, counts = random_packed(25, 3, max_count=12)
    n_rays = counts.numel()
    sigmas = sigmas * 0.1  # keep transmittance high enough that the back segment matters
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(ray_indices.numel()) - starts[ray_indices]
    front = rank < (counts[ray_indices] + 1) // 2

    sig = sigmas.clone().requires_grad_()
    col = rgbs.clone().requires_grad_()
    parts = [composite_segment(sig[m], col[m], dt[m], ray_indices[m], n_rays) for m in (front, ~front)]
    rgb, transmittance = composite_segments(
        torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]), background
    )
    whole_sig = sigmas.clone().requires_grad_()
    whole_col = rgbs.clone().requires_grad_()
    whole = composite(whole_sig, whole_col, dt, ray_indices, n_rays, background, early_stop_transmittance=0.0)
    torch.testing.assert_close(rgb, whole.rgb, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(transmittance, whole.transmittance, rtol=1e-10, atol=1e-12)
    assert (parts[1][1] < 1).any()  # the back segment is not empty

    upstream = torch.randn(n_rays, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = torch.autograd.grad((rgb * upstream).sum(), (sig, col))
    whole_grads = torch.autograd.grad((whole.rgb * upstream).sum(), (whole_sig, whole_col))
    for got, want in zip(grads, whole_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_segments_by_hand_and_empty_segment():
    # Segment 0: C = 0.2 (grey), A = 0.5; segment 1 empty: C = 0, A = 1; segment 2: C = 0.3, A = 0.4.
    c = torch.tensor([[[0.2] * 3], [[0.0] * 3], [[0.3] * 3]])
    a = torch.tensor([[0.5], [1.0], [0.4]])
    rgb, transmittance = composite_segments(c, a, torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(transmittance, torch.tensor([0.2]))
    torch.testing.assert_close(rgb, torch.tensor([[0.2 + 0.5 * 0.3 + 0.2, 0.2 + 0.15, 0.2 + 0.15]]))
    empty_rgb, empty_t = composite_segment(
        torch.zeros(0), torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, dtype=torch.long), 2
    )
    assert torch.equal(empty_rgb, torch.zeros(2, 3)) and torch.equal(empty_t, torch.ones(2))


def test_bad_shapes_raise_one_clear_error():
    s = torch.ones(4)
    idx = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"sigmas, dt and ray_indices must all be \[S\]"):
        render_weights(s, torch.ones(3), idx, 1)
    with pytest.raises(ValueError, match=r"rgbs must be \[4, 3\]"):
        composite(s, torch.ones(4, 4), s, idx, 1)
    with pytest.raises(ValueError, match=r"background must be \[3\] or \[1, 3\]"):
        composite(s, torch.ones(4, 3), s, idx, 1, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"K >= 1"):
        composite_segments(torch.zeros(0, 2, 3), torch.zeros(0, 2))
