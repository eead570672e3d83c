"""NGPField: shapes and ranges, hand values with zeroed heads, gradients, parameter groups, trunc_exp."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.encoding.hashgrid import HashGridConfig
from trainer.contract.errors import ConfigError
from trainer.model import MLP, MLPConfig, NGPField, trunc_exp

GRID = HashGridConfig(
    n_levels=2, n_features_per_level=2, log2_hashmap_size=10, base_resolution=8, per_level_scale=2.0
)
AABB = torch.tensor([[-1.0, -2.0, 0.0], [1.0, 2.0, 4.0]])


def make_field(seed: int = 0) -> NGPField:
    torch.manual_seed(seed)
    field = NGPField(AABB, GRID, MLPConfig(n_hidden_layers=1), MLPConfig(n_hidden_layers=2), backend="torch")
    with torch.no_grad():  # a table with visible structure (the default init is ±1e-4)
        field.encoding.table.uniform_(-1.0, 1.0)
    return field


def samples(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    positions = AABB[0] + torch.rand(n, 3, generator=g) * (AABB[1] - AABB[0])
    directions = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    return positions, directions


def test_forward_shapes_dtypes_and_ranges():
    field = make_field()
    positions, directions = samples(64)
    sigma, rgb = field(positions, directions)
    assert sigma.shape == (64,) and sigma.dtype == torch.float32
    assert rgb.shape == (64, 3) and rgb.dtype == torch.float32
    assert (sigma >= 0).all()
    assert ((rgb > 0) & (rgb < 1)).all()
    assert torch.equal(field.density(positions), sigma)


def test_zeroed_output_layers_give_exp0_and_sigmoid0():
    field = make_field()
    with torch.no_grad():
        field.density_mlp.linears[-1].weight.zero_()
        field.rgb_mlp.linears[-1].weight.zero_()
    sigma, rgb = field(*samples(8))
    assert torch.equal(sigma, torch.ones(8))  # trunc_exp(0)
    assert torch.equal(rgb, torch.full((8, 3), 0.5))  # sigmoid(0)


def test_colour_depends_on_direction_density_does_not():
    field = make_field()
    positions, directions = samples(16)
    sigma_a, rgb_a = field(positions, directions)
    sigma_b, rgb_b = field(positions, -directions)
    assert torch.equal(sigma_a, sigma_b)
    assert (rgb_a - rgb_b).abs().max() > 1e-4


def test_sh_degree_1_makes_colour_view_independent():
    torch.manual_seed(0)
    field = NGPField(AABB, GRID, backend="torch", sh_degree=1)
    assert field.rgb_mlp.linears[0].weight.shape[1] == 15 + 1
    positions, directions = samples(16)
    assert torch.equal(field(positions, directions)[1], field(positions, -directions)[1])
    field2 = NGPField(AABB, GRID, backend="torch", sh_degree=2)
    assert field2.rgb_mlp.linears[0].weight.shape[1] == 15 + 4
    assert (field2(positions, directions)[1] - field2(positions, -directions)[1]).abs().max() > 1e-4


def test_build_field_takes_the_degree_from_the_config():
    from tests.support.scenes import tiny_config
    from trainer.train.build import build_field

    field = build_field(tiny_config(dir_encoding__degree=3), AABB, 1, torch.device("cpu"))
    assert field.sh_degree == 3 and field.rgb_mlp.linears[0].weight.shape[1] == 15 + 9


@pytest.mark.parametrize("degree", [0, 5])
def test_sh_degree_outside_1_to_4_names_the_key(degree):
    with pytest.raises(ConfigError, match=rf"dir_encoding\.degree: .*got {degree}"):
        NGPField(AABB, GRID, backend="torch", sh_degree=degree)


def test_positions_outside_the_box_are_clamped():
    field = make_field()
    inside = torch.tensor([[1.0, 0.5, 4.0], [-1.0, -2.0, 0.0]])
    outside = torch.tensor([[3.0, 0.5, 9.0], [-5.0, -2.5, -1.0]])
    assert torch.equal(field.density(outside), field.density(inside))
    assert torch.equal(field.normalise_positions(torch.tensor([[0.0, 0.0, 2.0]])), torch.tensor([[0.5, 0.5, 0.5]]))


def test_gradients_reach_table_and_every_mlp_weight():
    field = make_field()
    sigma, rgb = field(*samples(128))
    (sigma.mean() + rgb.sum()).backward()
    for name, p in field.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_parameter_groups_and_count_by_hand():
    field = make_field()
    # table 1760 × 2; density 4→64→16; colour (15 + 16)→64→64→3; no biases
    assert field.n_params == 1760 * 2 + (4 * 64 + 64 * 16) + (31 * 64 + 64 * 64 + 64 * 3)
    weights = {id(p) for p in field.mlp_weight_parameters()}
    encoding = {id(p) for p in field.encoding_parameters()}
    assert len(weights) == 5 and len(encoding) == 1
    assert weights.isdisjoint(encoding)
    assert weights | encoding == {id(p) for p in field.parameters()}
    assert field.encoding_parameters()[0] is field.encoding.table


def test_autocast_bf16_outputs_float32_and_close():
    field = make_field()
    positions, directions = samples(64)
    sigma32, rgb32 = field(positions, directions)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sigma16, rgb16 = field(positions, directions)
    assert sigma16.dtype == torch.float32 and rgb16.dtype == torch.float32
    assert torch.allclose(rgb16, rgb32, atol=3e-2)
    assert torch.allclose(sigma16, sigma32, rtol=5e-2)


def test_fp16_table_field():
    torch.manual_seed(0)
    field = NGPField(AABB, GRID, backend="torch", table_dtype=torch.float16)
    assert field.encoding.table.dtype == torch.float16
    sigma, rgb = field(*samples(8))
    assert sigma.dtype == torch.float32 and rgb.dtype == torch.float32


def test_trunc_exp_forward_and_clamped_gradient():
    x = torch.tensor([2.0, 15.0, 20.0, -3.0], dtype=torch.float64, requires_grad=True)
    y = trunc_exp(x)
    assert torch.allclose(y, torch.exp(x))
    y.sum().backward()
    expected = [math.exp(2.0), math.exp(15.0), math.exp(15.0), math.exp(-3.0)]
    assert x.grad.tolist() == pytest.approx(expected, rel=1e-12)


def test_mlp_structure():
    mlp = MLP(5, 3, MLPConfig(n_neurons=8, n_hidden_layers=0))
    assert [tuple(w.shape) for w in mlp.weights()] == [(3, 5)]
    mlp = MLP(5, 3, MLPConfig(n_neurons=8, n_hidden_layers=2, activation="ReLU", output_activation="Sigmoid"))
    assert [tuple(w.shape) for w in mlp.weights()] == [(8, 5), (8, 8), (3, 8)]
    x = torch.randn(4, 5)
    w0, w1, w2 = mlp.weights()
    expected = torch.sigmoid(torch.relu(torch.relu(x @ w0.T) @ w1.T) @ w2.T)
    assert torch.allclose(mlp(x), expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_neurons": 0}, "network.n_neurons: expected an integer >= 1, got 0"),
        ({"n_hidden_layers": -1}, "network.n_hidden_layers: expected an integer >= 0, got -1"),
        ({"activation": "Relu"}, "network.activation: expected one of"),
    ],
)
def test_mlp_config_errors(kwargs, message):
    with pytest.raises(ConfigError) as info:
        MLPConfig(**kwargs)
    assert str(info.value).startswith(message)


def test_bad_aabb_raises_config_error():
    with pytest.raises(ConfigError, match=r"^aabb: expected a \[2, 3\]"):
        NGPField(torch.zeros(3), GRID, backend="torch")
    with pytest.raises(ConfigError, match=r"^aabb: expected finite corners with max > min"):
        NGPField(torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]]), GRID, backend="torch")
