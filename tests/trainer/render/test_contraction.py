"""The scene contraction of the unbounded model (trainer.render.contraction)."""

from __future__ import annotations

import pytest
import torch

from trainer.render.contraction import FACE_MARGIN, SceneContraction


@pytest.mark.parametrize("aabb_scale", [1, 4, 16])
def test_points_inside_the_box_are_unchanged_bitwise(aabb_scale):
    contraction = SceneContraction.of_box(aabb_scale)
    half = 0.5 * aabb_scale
    points = (torch.rand(500, 3) * 2 - 1) * half + 0.5
    points[0] = torch.tensor([0.5 + half, 0.5 - half, 0.5])  # on the box's face
    assert torch.equal(contraction.contract(points), points)
    assert torch.equal(contraction.uncontract(points), points)


@pytest.mark.parametrize("aabb_scale", [1, 4])
def test_every_point_maps_inside_the_contracted_cube(aabb_scale):
    contraction = SceneContraction.of_box(aabb_scale)
    r = 0.5 * aabb_scale
    points = torch.randn(4000, 3, dtype=torch.float64) * torch.logspace(-1, 6, 4000, dtype=torch.float64)[:, None]
    contracted = contraction.contract(points)
    offset = (contracted - 0.5).abs().amax(dim=-1)
    assert contracted.shape == points.shape and contracted.dtype == torch.float64
    assert bool((offset < 2 * r).all())
    beyond = (points - 0.5).abs().amax(dim=-1) > r
    assert bool((offset[beyond] > r).all())  # the shell holds exactly the points beyond the box
    # a point at L∞ distance rho·r from the centre lands at (2 - 1/rho)·r
    rho = (points - 0.5).abs().amax(dim=-1) / r
    torch.testing.assert_close(offset[beyond], (2 - 1 / rho[beyond]) * r)


def test_the_contraction_is_continuous_at_the_box_face_and_grows_with_distance():
    contraction = SceneContraction.of_box(2)
    direction = torch.tensor([1.0, 0.3, -0.2], dtype=torch.float64)
    t = torch.linspace(0.5, 50.0, 2000, dtype=torch.float64)
    contracted = contraction.contract(0.5 + t[:, None] * direction)
    along = (contracted - 0.5) @ direction / direction.norm()
    assert bool((along[1:] > along[:-1]).all())
    steps = (contracted[1:] - contracted[:-1]).norm(dim=-1)
    assert float(steps.max()) < 0.05  # no jump where the ray leaves the box at t = 1


def test_uncontract_inverts_contract_and_keeps_the_face_finite():
    contraction = SceneContraction(half_side=2.0)
    points = torch.randn(3000, 3, dtype=torch.float64) * torch.logspace(-1, 3, 3000, dtype=torch.float64)[:, None]
    torch.testing.assert_close(contraction.uncontract(contraction.contract(points)), points, rtol=1e-9, atol=1e-9)
    face = torch.tensor([[0.5 + 4.0, 0.5, 0.5], [0.5, 0.5 - 4.0, 0.5 + 3.0]], dtype=torch.float64)
    far = contraction.uncontract(face)
    assert bool(torch.isfinite(far).all())
    torch.testing.assert_close((far - 0.5).abs().amax(dim=-1), torch.full((2,), 2.0 / FACE_MARGIN, dtype=torch.float64))


def test_contract_keeps_gradients_and_rejects_a_bad_half_side():
    contraction = SceneContraction.of_box(4)
    points = torch.tensor([[10.0, 0.5, 0.5]], requires_grad=True)
    contraction.contract(points).sum().backward()
    assert points.grad is not None and bool(torch.isfinite(points.grad).all())
    with pytest.raises(ValueError, match="half_side"):
        SceneContraction(half_side=0.0)
