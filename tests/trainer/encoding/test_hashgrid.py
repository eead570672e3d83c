"""Multiresolution hash encoding: config, layout, hand-computed values, hashing, gradients, backends."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.encoding import backends as backends_module
from trainer.encoding.backends import (
    HashGridBackend,
    HashGridEncoding,
    TorchBackend,
    get_backend,
    tcnn_encoding_config,
)
from trainer.encoding.corner_hashgrid import hash_grid_encode_corners
from trainer.encoding.hashgrid import (
    HashGridConfig,
    dense_corner_index,
    hash_corner_index,
    hash_grid_encode_reference,
    level_is_dense,
    level_offsets,
    level_resolutions,
    level_table_sizes,
)
from trainer.contract.errors import ConfigError

# Two levels: N = [8, 16]; level 0 has 9³ = 729 ≤ 1024 vertices (dense, 736 rows), level 1 has
# 17³ = 4913 > 1024 (hashed, 1024 rows).
TINY = HashGridConfig(
    n_levels=2, n_features_per_level=2, log2_hashmap_size=10, base_resolution=8, per_level_scale=2.0
)


def python_hash(cx: int, cy: int, cz: int, hashmap_size: int) -> int:
    """tiny-cuda-nn coherent_prime_hash with Python ints (uint32 wrap of each product)."""
    wrap = 2**32
    return ((cx * 1) % wrap ^ (cy * 2654435761) % wrap ^ (cz * 805459861) % wrap) % hashmap_size


def python_encode_point(point: tuple[float, float, float], table: torch.Tensor, cfg: HashGridConfig):
    """Slow per-point encoding with Python scalars: an independent reading of paper §3."""
    out = []
    offsets = level_offsets(cfg)
    for level, n in enumerate(level_resolutions(cfg)):
        pos = [min(max(c, 0.0), 1.0) * n for c in point]
        cell = [min(max(math.floor(p), 0), n - 1) for p in pos]
        frac = [p - c for p, c in zip(pos, cell)]
        acc = [0.0] * cfg.n_features_per_level
        for bz in (0, 1):
            for by in (0, 1):
                for bx in (0, 1):
                    cx, cy, cz = cell[0] + bx, cell[1] + by, cell[2] + bz
                    w = (
                        (frac[0] if bx else 1 - frac[0])
                        * (frac[1] if by else 1 - frac[1])
                        * (frac[2] if bz else 1 - frac[2])
                    )
                    if (n + 1) ** 3 <= cfg.hashmap_size:
                        row = cx + cy * (n + 1) + cz * (n + 1) ** 2
                    else:
                        row = python_hash(cx, cy, cz, cfg.hashmap_size)
                    for f in range(cfg.n_features_per_level):
                        acc[f] += w * float(table[offsets[level] + row, f])
        out.extend(acc)
    return out


# ---------------------------------------------------------------- config and layout


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"log2_hashmap_size": 32}, "encoding.log2_hashmap_size: expected an integer in [10, 24], got 32"),
        ({"n_features_per_level": 3}, "encoding.n_features_per_level: expected one of 1, 2, 4, 8, got 3"),
        ({"n_levels": 0}, "encoding.n_levels: expected an integer in [1, 32], got 0"),
        ({"n_levels": 33}, "encoding.n_levels: expected an integer in [1, 32], got 33"),
        ({"base_resolution": 1}, "encoding.base_resolution: expected an integer >= 2, got 1"),
        ({"per_level_scale": 0.5}, "encoding.per_level_scale: expected a finite number >= 1, got 0.5"),
        ({"max_resolution": 8}, "encoding.max_resolution: expected an integer >= base_resolution (16), got 8"),
        ({"per_level_scale": 1.5, "max_resolution": 512}, "encoding.per_level_scale: give per_level_scale or max_resolution, not both"),
        ({"n_levels": True}, "encoding.n_levels"),
    ],
)
def test_config_errors_name_key_and_value(kwargs, message):
    with pytest.raises(ConfigError) as info:
        HashGridConfig(**kwargs)
    assert str(info.value).startswith(message)


def test_default_growth_factor_and_resolutions_follow_paper_defaults():
    cfg = HashGridConfig()
    assert cfg.growth_factor == pytest.approx(128 ** (1 / 15))  # N_max / N_min = 2048 / 16
    resolutions = level_resolutions(cfg)
    assert len(resolutions) == 16
    assert resolutions[0] == 16 and resolutions[-1] == 2048
    assert resolutions[1] == math.floor(16 * 128 ** (1 / 15))  # 22
    assert cfg.output_dim == 32 and cfg.hashmap_size == 2**19


def test_explicit_scale_and_max_resolution():
    assert level_resolutions(HashGridConfig(n_levels=3, base_resolution=2, per_level_scale=2.0)) == [2, 4, 8]
    assert level_resolutions(HashGridConfig(n_levels=4, base_resolution=16, max_resolution=128)) == [16, 32, 64, 128]
    assert HashGridConfig(n_levels=1).growth_factor == 1.0


def test_tiny_layout_by_hand():
    assert level_resolutions(TINY) == [8, 16]
    assert level_is_dense(TINY) == [True, False]
    assert level_table_sizes(TINY) == [736, 1024]  # 9³ = 729 rounded up to a multiple of 8
    assert level_offsets(TINY) == [0, 736, 1760]
    default_sizes = level_table_sizes(HashGridConfig())
    assert default_sizes[0] == 4920  # 17³ = 4913 → 4920
    assert default_sizes[-1] == 2**19


# ---------------------------------------------------------------- indices


def test_hash_matches_python_ints():
    corners = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (5, 7, 11), (2047, 2048, 1999), (262143, 131071, 99999)]
    for log2_size in (10, 19, 24):
        size = 1 << log2_size
        got = hash_corner_index(torch.tensor(corners, dtype=torch.int64), size).tolist()
        assert got == [python_hash(*c, size) for c in corners]
    # hand value: (1·1) ^ (1·2654435761 mod 2^32) ^ (1·805459861) = 1 ^ 2654435761 ^ 805459861
    assert hash_corner_index(torch.tensor([1, 1, 1]), 2**24).item() == (1 ^ 2654435761 ^ 805459861) & (2**24 - 1)


def test_dense_index_is_a_bijection_onto_the_level():
    n = 8
    axis = torch.arange(n + 1)
    corners = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1).reshape(-1, 3)
    rows = dense_corner_index(corners, n)
    assert sorted(rows.tolist()) == list(range((n + 1) ** 3))
    assert dense_corner_index(torch.tensor([2, 4, 7]), n).item() == 2 + 4 * 9 + 7 * 81


# ---------------------------------------------------------------- values


def test_one_point_by_hand_dense_level_of_linear_table():
    # table row r holds (r, -2r): trilinear interpolation of the dense index cx + 9cy + 81cz is
    # exact, so level 0 returns pos_x + 9 pos_y + 81 pos_z with pos = x · 8.
    rows = torch.arange(1760, dtype=torch.float64)
    table = torch.stack([rows, -2 * rows], dim=1)
    x = torch.tensor([[0.3, 0.55, 0.9]], dtype=torch.float64)
    out = hash_grid_encode_reference(x, table, TINY)
    expected = 2.4 + 9 * 4.4 + 81 * 7.2  # 625.2
    assert out[0, 0].item() == pytest.approx(expected, abs=1e-9)
    assert out[0, 1].item() == pytest.approx(-2 * expected, abs=1e-9)


def test_one_point_by_hand_hashed_level():
    torch.manual_seed(0)
    table = torch.randn(1760, 2, dtype=torch.float64)
    x = torch.tensor([[0.3, 0.55, 0.9]], dtype=torch.float64)
    out = hash_grid_encode_reference(x, table, TINY)
    # level 1: N = 16, pos = (4.8, 8.8, 14.4), cell (4, 8, 14), frac (0.8, 0.8, 0.4)
    expected = [0.0, 0.0]
    for bz in (0, 1):
        for by in (0, 1):
            for bx in (0, 1):
                w = (0.8 if bx else 0.2) * (0.8 if by else 0.2) * (0.4 if bz else 0.6)
                row = 736 + python_hash(4 + bx, 8 + by, 14 + bz, 1024)
                expected[0] += w * table[row, 0].item()
                expected[1] += w * table[row, 1].item()
    assert out[0, 2:].tolist() == pytest.approx(expected, abs=1e-12)


def test_random_points_match_slow_python_encoding():
    torch.manual_seed(1)
    cfg = HashGridConfig(n_levels=4, n_features_per_level=4, log2_hashmap_size=10, base_resolution=3, per_level_scale=2.3)
    table = torch.randn(level_offsets(cfg)[-1], 4, dtype=torch.float64)
    x = torch.rand(12, 3, dtype=torch.float64)
    out = hash_grid_encode_reference(x, table, cfg)
    for i in range(x.shape[0]):
        assert out[i].tolist() == pytest.approx(python_encode_point(tuple(x[i].tolist()), table, cfg), abs=1e-12)


def test_edges_x0_x1_and_clamping():
    torch.manual_seed(2)
    table = torch.randn(1760, 2, dtype=torch.float64)
    corners = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [-0.5, -2.0, 0.0], [1.5, 1.0, 3.0]], dtype=torch.float64)
    out = hash_grid_encode_reference(corners, table, TINY)
    # x = 0: corner (0,0,0) of every level, weight 1; hash(0,0,0) = 0.
    assert out[0].tolist() == pytest.approx(table[0].tolist() + table[736].tolist(), abs=1e-15)
    # x = 1: last cell, frac = 1, corner (N, N, N): dense row (N+1)³ − 1 = 728; hashed row hash(16,16,16).
    hashed_row = 736 + python_hash(16, 16, 16, 1024)
    assert out[1].tolist() == pytest.approx(table[728].tolist() + table[hashed_row].tolist(), abs=1e-15)
    # outside the unit cube: clamped onto it
    assert torch.equal(out[2], out[0])
    assert torch.equal(out[3], out[1])


# ---------------------------------------------------------------- dtypes and gradients


def test_output_shape_and_dtypes():
    x = torch.rand(5, 3)
    table = torch.randn(1760, 2)
    assert hash_grid_encode_reference(x, table, TINY).shape == (5, 4)
    assert hash_grid_encode_reference(x, table, TINY).dtype == torch.float32
    assert hash_grid_encode_reference(x, table.half(), TINY).dtype == torch.float32
    assert hash_grid_encode_reference(x, table.double(), TINY).dtype == torch.float64
    assert hash_grid_encode_reference(x.double(), table, TINY).dtype == torch.float64


def test_fp16_table_matches_fp32():
    torch.manual_seed(3)
    x = torch.rand(256, 3)
    table = torch.rand(1760, 2) * 2 - 1
    out32 = hash_grid_encode_reference(x, table, TINY)
    out16 = hash_grid_encode_reference(x, table.half(), TINY)
    # the fp16 table is read in float32: identical to encoding its float32 copy …
    assert torch.equal(out16, hash_grid_encode_reference(x, table.half().float(), TINY))
    # … and within fp16 rounding (2^-11 relative, |value| ≤ 1) of the float32 table
    assert torch.allclose(out16, out32, atol=1e-3, rtol=0)


def test_gradcheck_wrt_table_and_x():
    torch.manual_seed(4)
    table = torch.randn(1760, 2, dtype=torch.float64, requires_grad=True)
    x = (torch.rand(6, 3, dtype=torch.float64) * 0.9 + 0.05).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: hash_grid_encode_reference(x.detach(), t, TINY), (table,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda p: hash_grid_encode_reference(p, table.detach(), TINY), (x,), fast_mode=True)


def test_x1_belongs_to_the_last_cell():
    # At x = 1 the point is interpolated inside cell N−1 (frac = 1), so the derivative w.r.t. x
    # equals the one-sided difference from inside the cube (trilinear ⇒ linear along each axis).
    torch.manual_seed(6)
    table = torch.randn(1760, 2, dtype=torch.float64)
    x = torch.tensor([[1.0, 0.37, 0.61]], dtype=torch.float64, requires_grad=True)
    hash_grid_encode_reference(x, table, TINY)[0, 0].backward()
    h = 1e-3  # inside the last level-0 cell (width 1/8)
    inner = hash_grid_encode_reference(x.detach() - torch.tensor([[h, 0.0, 0.0]], dtype=torch.float64), table, TINY)
    outer = hash_grid_encode_reference(x.detach(), table, TINY)
    assert x.grad[0, 0].item() == pytest.approx(((outer - inner)[0, 0] / h).item(), rel=1e-6)


def test_table_gradient_is_the_trilinear_weights():
    # d out[0, 0] / d table: weight of each corner row, summing to 1 per level.
    x = torch.tensor([[0.3, 0.55, 0.9]])
    table = torch.zeros(1760, 2, requires_grad=True)
    hash_grid_encode_reference(x, table, TINY)[0, 0].backward()
    grad = table.grad
    assert grad[:736, 0].sum().item() == pytest.approx(1.0)
    assert grad[736:, 0].sum().item() == 0.0  # level 1 feeds columns 2..3 only
    assert grad[:, 1].abs().sum().item() == 0.0
    assert grad[605, 0].item() == pytest.approx(0.6 * 0.6 * 0.8)  # corner (2, 4, 7): (1−0.4)(1−0.4)(1−0.2)
    assert (grad[:736, 0] != 0).sum().item() == 8


# ---------------------------------------------------------------- backends and the module


def test_module_init_forward_and_backend():
    torch.manual_seed(5)
    enc = HashGridEncoding(TINY, backend="auto")
    assert enc.backend_name == "torch"  # CPU
    assert enc.output_dim == 4
    assert enc.table.shape == (1760, 2) and enc.table.dtype == torch.float32
    assert enc.table.abs().max().item() <= 1e-4
    assert enc.table.std().item() == pytest.approx(2e-4 / math.sqrt(12), rel=0.1)  # U(−1e-4, 1e-4)
    x = torch.rand(32, 3)
    out = enc(x)
    assert out.shape == (32, 4) and out.dtype == torch.float32
    assert torch.equal(out, hash_grid_encode_corners(x, enc.table, TINY))  # the CPU fast path
    torch.testing.assert_close(out, hash_grid_encode_reference(x, enc.table, TINY), rtol=0, atol=1e-9)
    out.sum().backward()
    assert enc.table.grad is not None and enc.table.grad.abs().sum() > 0


def test_module_fp16_table():
    enc = HashGridEncoding(TINY, backend="torch", table_dtype=torch.float16)
    assert enc.table.dtype == torch.float16
    x = torch.rand(16, 3)
    out = enc(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, hash_grid_encode_reference(x, enc.table.float(), TINY), rtol=0, atol=1e-9)


def test_unknown_and_unavailable_backends_raise_config_error(monkeypatch):
    # a registry without Triton (whether or not this installation has it)
    registry = {name: b for name, b in backends_module._REGISTRY.items() if name != "triton"}
    monkeypatch.setattr(backends_module, "_REGISTRY", registry)
    monkeypatch.setattr(backends_module, "_triton_lookup_done", True)
    assert backends_module.registered_backends() == ["tcnn", "torch"]
    assert get_backend("auto", "cuda").name == "torch"  # selection only: nothing runs on CUDA
    with pytest.raises(ConfigError, match=r"^encoding\.backend: expected one of auto, torch, triton, tcnn, got 'cuda'"):
        get_backend("cuda", "cpu")
    with pytest.raises(ConfigError, match=r"^encoding\.backend: 'tcnn'"):
        get_backend("tcnn", "cpu")
    with pytest.raises(ConfigError, match=r"^encoding\.backend: 'triton'"):
        get_backend("triton", "cpu")
    with pytest.raises(ConfigError, match=r"^encoding\.backend"):
        HashGridEncoding(TINY, backend="tcnn")


class _FakeTriton(HashGridBackend):
    """A stand-in fast backend (the reference under another name) to test selection."""

    name = "triton"

    def __init__(self, devices: tuple[str, ...]) -> None:
        self.devices = devices

    def is_available(self) -> bool:
        return True

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        return torch.device(device).type in self.devices and dtype == torch.float32

    def encode(self, x, table, cfg):
        return hash_grid_encode_reference(x, table, cfg) + 0.0


def test_auto_prefers_triton_only_on_cuda(monkeypatch):
    registry = dict(backends_module._REGISTRY)
    monkeypatch.setattr(backends_module, "_REGISTRY", registry)
    backends_module.register_backend(_FakeTriton(devices=("cpu", "cuda")))
    # auto takes triton on CUDA only; on CPU the reference, even if triton claims CPU support
    assert get_backend("auto", "cpu").name == "torch"
    assert get_backend("auto", "cuda").name == "triton"  # selection only: nothing runs on CUDA
    assert get_backend("auto", "cuda", torch.float16).name == "torch"  # triton lacks fp16 here
    assert get_backend("triton", "cpu").name == "triton"
    with pytest.raises(ConfigError, match="does not support"):
        get_backend("triton", "cpu", torch.float16)
    assert isinstance(get_backend("torch", "cpu"), TorchBackend)
    enc = HashGridEncoding(TINY, backend="triton")
    assert enc.backend_name == "triton"
    assert "triton" in backends_module.registered_backends()


def test_tcnn_encoding_config():
    cfg = HashGridConfig()
    assert tcnn_encoding_config(cfg) == {
        "otype": "HashGrid",
        "n_levels": 16,
        "n_features_per_level": 2,
        "log2_hashmap_size": 19,
        "base_resolution": 16,
        "per_level_scale": pytest.approx(1.3819128799677760),
        "interpolation": "Linear",
    }
