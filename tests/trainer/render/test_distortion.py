"""The distortion regulariser: its O(N) packed form against the double sum per ray, its gradient,
what it prefers, and where the config allows it."""

from __future__ import annotations

import pytest
import torch

from trainer.contract.config import apply_overrides, load_config
from trainer.contract.errors import ConfigError
from trainer.render.distortion import distortion_loss, distortion_reference, normalised_distance


def _packed(counts: list[int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    ray_indices = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    dt = torch.rand(len(ray_indices), generator=generator, dtype=torch.float64) * 0.2 + 0.01
    starts = torch.rand(len(counts), generator=generator, dtype=torch.float64)
    t = torch.zeros_like(dt)
    for ray, (first, count) in enumerate(zip(torch.cumsum(torch.tensor([0] + counts[:-1]), 0), counts)):
        ends = starts[ray] + torch.cumsum(dt[first:first + count], 0)
        t[first:first + count] = ends - 0.5 * dt[first:first + count]  # contiguous intervals, front to back
    weights = torch.rand(len(ray_indices), generator=generator, dtype=torch.float64) * 0.3
    return weights, t, dt, ray_indices


def test_the_packed_form_equals_the_double_sum_per_ray():
    counts = [5, 0, 1, 17, 3, 0, 40]
    weights, t, dt, ray_indices = _packed(counts)
    fast = distortion_loss(weights, t, dt, ray_indices, len(counts))
    slow = distortion_reference(weights, t, dt, ray_indices, len(counts))
    assert fast.shape == (len(counts),) and fast.dtype == torch.float64
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    assert fast[1] == 0 and fast[5] == 0  # rays without samples
    single = normalised_distance(t[5] + 0.5 * dt[5]) - normalised_distance(t[5] - 0.5 * dt[5])
    torch.testing.assert_close(fast[2], weights[5] ** 2 * single / 3)  # one sample: its own term only


def test_its_gradient_is_that_of_the_double_sum():
    counts = [4, 9, 2]
    weights, t, dt, ray_indices = _packed(counts, seed=3)
    fast_w = weights.clone().requires_grad_(True)
    slow_w = weights.clone().requires_grad_(True)
    scale = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    (distortion_loss(fast_w, t, dt, ray_indices, 3) * scale).sum().backward()
    (distortion_reference(slow_w, t, dt, ray_indices, 3) * scale).sum().backward()
    torch.testing.assert_close(fast_w.grad, slow_w.grad, rtol=1e-9, atol=1e-12)


def test_weights_in_one_interval_cost_less_than_the_same_weights_spread_along_the_ray():
    t = torch.linspace(0.05, 2.0, 40, dtype=torch.float64)
    dt = torch.full_like(t, float(t[1] - t[0]))
    ray_indices = torch.zeros(40, dtype=torch.int64)
    haze = torch.full_like(t, 0.9 / 40)
    surface = torch.zeros_like(t)
    surface[20] = 0.9
    assert distortion_loss(surface, t, dt, ray_indices, 1) < 0.1 * distortion_loss(haze, t, dt, ray_indices, 1)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="distortion_loss: weights, t, dt and ray_indices must all be"):
        distortion_loss(torch.zeros(3), torch.zeros(3), torch.zeros(2), torch.zeros(3, dtype=torch.int64), 1)


def test_the_config_takes_a_weight_and_refuses_it_in_subgrid_mode():
    from trainer.contract.config.blocks import UNBOUNDED_DISTORTION_WEIGHT

    loss = load_config(None).loss
    assert loss.distortion_weight is None  # null: on with the unbounded scene model only
    assert loss.resolved_distortion_weight(unbounded=True) == UNBOUNDED_DISTORTION_WEIGHT == 0.05
    assert loss.resolved_distortion_weight(unbounded=False) == 0.0
    off = apply_overrides(load_config(None), {"loss.distortion_weight": 0.0}).loss
    assert off.resolved_distortion_weight(unbounded=True) == 0.0
    assert apply_overrides(load_config(None), {"parallel.mode": "subgrid"}).loss.distortion_weight is None
    assert apply_overrides(load_config(None), {"loss.distortion_weight": 0.01}).loss.distortion_weight == 0.01
    with pytest.raises(ConfigError, match="loss.distortion_weight"):
        apply_overrides(load_config(None), {"loss.distortion_weight": -1.0})
    with pytest.raises(ConfigError, match=r"loss.distortion_weight: expected 0 in subgrid mode"):
        apply_overrides(load_config(None), {"loss.distortion_weight": 0.01, "parallel.mode": "subgrid"})
