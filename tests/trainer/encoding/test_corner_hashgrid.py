"""The hash encoding's CPU fast path against its slow twin, the reference: values and gradients."""

from __future__ import annotations

import pytest
import torch

from trainer.encoding.backends import TorchBackend
from trainer.encoding.corner_hashgrid import corners_apply, hash_grid_encode_corners
from trainer.encoding.hashgrid import HashGridConfig, hash_grid_encode_reference, level_is_dense, level_offsets

# dense and hashed levels, F = 2 (the 8-byte row read) and F = 4 (the plain row gather)
CONFIGS = [
    HashGridConfig(n_levels=4, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4, per_level_scale=2.0),
    HashGridConfig(n_levels=3, n_features_per_level=4, log2_hashmap_size=11, base_resolution=6, per_level_scale=1.8),
    HashGridConfig(n_levels=8, n_features_per_level=2, log2_hashmap_size=15, base_resolution=16),  # the CPU preset
]


def points(n: int, seed: int) -> torch.Tensor:
    """Random points plus the cube's corners, faces and points outside it (clamped)."""
    generator = torch.Generator().manual_seed(seed)
    inside = torch.rand(n, 3, generator=generator)
    edges = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.5], [0.5, 1.0, 0.0],
                          [-0.2, 0.3, 1.4], [1e-7, 1 - 1e-7, 0.25]])
    return torch.cat((inside, edges))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_values_match_the_reference(cfg):
    assert any(level_is_dense(cfg)) and not all(level_is_dense(cfg))  # both kinds of level are covered
    torch.manual_seed(0)
    table = torch.randn(level_offsets(cfg)[-1], cfg.n_features_per_level)
    x = points(3000, 1)
    fast = hash_grid_encode_corners(x, table, cfg)
    assert fast.shape == (x.shape[0], cfg.output_dim) and fast.dtype == torch.float32
    torch.testing.assert_close(fast, hash_grid_encode_reference(x, table, cfg), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cfg", CONFIGS[:2])
def test_gradients_match_the_reference(cfg):
    torch.manual_seed(1)
    table = torch.randn(level_offsets(cfg)[-1], cfg.n_features_per_level)
    x = points(500, 2)
    upstream = torch.randn(x.shape[0], cfg.output_dim)
    grads = []
    for encode in (hash_grid_encode_corners, hash_grid_encode_reference):
        t = table.clone().requires_grad_()
        p = x.clone().requires_grad_()
        grads.append(torch.autograd.grad((encode(p, t, cfg) * upstream).sum(), (t, p)))
    (fast_table, fast_x), (ref_table, ref_x) = grads
    assert fast_table.abs().sum() > 0 and fast_x.abs().sum() > 0
    torch.testing.assert_close(fast_table, ref_table, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_x, ref_x, rtol=1e-4, atol=1e-4)


def test_half_tables_are_read_in_float32_and_get_their_own_dtype_of_gradient():
    cfg = CONFIGS[0]
    table = torch.randn(level_offsets(cfg)[-1], 2).to(torch.bfloat16).requires_grad_()
    x = points(200, 3)
    out = hash_grid_encode_corners(x, table, cfg)
    torch.testing.assert_close(out, hash_grid_encode_reference(x, table.detach().float(), cfg), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert table.grad is not None and table.grad.dtype == torch.bfloat16


def test_the_torch_backend_takes_the_fast_path_on_a_cpu_and_the_reference_for_float64():
    cfg = CONFIGS[0]
    table = torch.randn(level_offsets(cfg)[-1], 2)
    x = points(100, 4)
    assert corners_apply(x, table) and not corners_apply(x.double(), table) and not corners_apply(x, table.double())
    assert torch.equal(TorchBackend().encode(x, table, cfg), hash_grid_encode_corners(x, table, cfg))
    assert torch.equal(TorchBackend().encode(x.double(), table, cfg), hash_grid_encode_reference(x.double(), table, cfg))
    with pytest.raises(ValueError, match="float64 inputs take hash_grid_encode_reference"):
        hash_grid_encode_corners(x.double(), table, cfg)
    with pytest.raises(ValueError, match=r"table must be \["):
        hash_grid_encode_corners(x, table[:-1], cfg)
    with pytest.raises(ValueError, match=r"x must be \[n, 3\]"):
        hash_grid_encode_corners(x[:, :2], table, cfg)


@pytest.mark.parametrize("cfg", CONFIGS[:2])
def test_no_points_give_no_features_and_a_zero_gradient(cfg):
    table = torch.randn(level_offsets(cfg)[-1], cfg.n_features_per_level, requires_grad=True)
    out = hash_grid_encode_corners(torch.zeros(0, 3), table, cfg)
    assert out.shape == (0, cfg.output_dim)
    out.sum().backward()
    assert table.grad is not None and not table.grad.any()
