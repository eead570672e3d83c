"""Ray/AABB intersection against hand-computed distances."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.render.aabb import ray_aabb_intersect, scene_aabb

UNIT_BOX = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


def test_axis_aligned_rays_enter_and_leave_at_the_faces():
    rays_o = torch.tensor([[-1.0, 0.5, 0.5], [0.5, 3.0, 0.25], [0.2, 0.3, -0.5]])
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 2.0]])
    t_near, t_far, hit = ray_aabb_intersect(rays_o, rays_d, UNIT_BOX)
    assert hit.tolist() == [True, True, True]
    torch.testing.assert_close(t_near, torch.tensor([1.0, 2.0, 0.25]))
    torch.testing.assert_close(t_far, torch.tensor([2.0, 3.0, 0.75]))


def test_diagonal_ray_through_opposite_corners():
    d = torch.tensor([[1.0, 1.0, 1.0]]) / math.sqrt(3.0)
    t_near, t_far, hit = ray_aabb_intersect(torch.tensor([[-1.0, -1.0, -1.0]]), d, UNIT_BOX)
    assert hit.item()
    torch.testing.assert_close(t_near, torch.tensor([math.sqrt(3.0)]))
    torch.testing.assert_close(t_far, torch.tensor([2.0 * math.sqrt(3.0)]))


def test_oblique_ray_enters_through_one_face_and_leaves_through_another():
    # o = (-0.5, 0.25, 0.5), d = (1, 0.5, 0): x enters at t=0.5, y leaves at t=1.5 (y=1).
    t_near, t_far, hit = ray_aabb_intersect(
        torch.tensor([[-0.5, 0.25, 0.5]]), torch.tensor([[1.0, 0.5, 0.0]]), UNIT_BOX
    )
    assert hit.item()
    torch.testing.assert_close(t_near, torch.tensor([0.5]))
    torch.testing.assert_close(t_far, torch.tensor([1.5]))


def test_rays_missing_the_box():
    rays_o = torch.tensor(
        [
            [-1.0, 2.0, 0.5],  # parallel to x, outside the y slab
            [2.0, 0.5, 0.5],  # box behind the origin
            [-1.0, -1.0, 0.5],  # passes beside the corner
            [-1.0, 0.0, 0.5],  # touches the edge x=0, y=1 only: t_near == t_far == 1
        ]
    )
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, -0.2, 0.0], [1.0, 1.0, 0.0]])
    t_near, t_far, hit = ray_aabb_intersect(rays_o, rays_d, UNIT_BOX, near=0.1)
    assert hit.tolist() == [False, False, False, False]
    torch.testing.assert_close(t_near, torch.full((4,), 0.1))
    torch.testing.assert_close(t_far, torch.full((4,), 0.1))


def test_origin_inside_starts_at_near():
    rays_o = torch.tensor([[0.5, 0.5, 0.5], [0.25, 0.5, 0.5]])
    rays_d = torch.tensor([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0]])
    t_near, t_far, hit = ray_aabb_intersect(rays_o, rays_d, UNIT_BOX)
    assert hit.tolist() == [True, True]
    torch.testing.assert_close(t_near, torch.tensor([0.0, 0.0]))
    torch.testing.assert_close(t_far, torch.tensor([0.5, 0.25]))
    t_near, t_far, hit = ray_aabb_intersect(rays_o, rays_d, UNIT_BOX, near=0.3)
    assert hit.tolist() == [True, False]  # the second ray leaves the box before `near`
    torch.testing.assert_close(t_near, torch.tensor([0.3, 0.3]))
    torch.testing.assert_close(t_far, torch.tensor([0.5, 0.3]))


def test_zero_direction_component_with_origin_on_the_slab_boundary_is_not_nan():
    # Origin on the face x = 0, moving along y: inside the x slab (boundary included).
    t_near, t_far, hit = ray_aabb_intersect(
        torch.tensor([[0.0, -1.0, 0.5]]), torch.tensor([[0.0, 1.0, 0.0]]), UNIT_BOX
    )
    assert hit.item()
    torch.testing.assert_close(t_near, torch.tensor([1.0]))
    torch.testing.assert_close(t_far, torch.tensor([2.0]))


def test_scene_aabb_is_the_unit_cube_scaled_around_its_centre():
    torch.testing.assert_close(scene_aabb(4), torch.tensor([[-1.5] * 3, [2.5] * 3]))
    torch.testing.assert_close(scene_aabb(1), UNIT_BOX)


def test_bad_shapes_raise_one_clear_error():
    with pytest.raises(ValueError, match=r"rays_o and rays_d must both be \[n_rays, 3\]"):
        ray_aabb_intersect(torch.zeros(4, 3), torch.zeros(4, 2), UNIT_BOX)
    with pytest.raises(ValueError, match=r"aabb must be \[2, 3\]"):
        ray_aabb_intersect(torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(6))
