"""The unit cube ↔ source world mapping undoes what the loaders did (scale, offset, cycle, colmap2nerf)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.data.convention import nerf_to_unit_cube, normalize_poses
from trainer.data.scene import Scene
from trainer.inference.worldframe import (
    cube_c2w_to_world, cube_to_world, units_per_cube_unit, world_c2w_to_cube, world_to_cube,
)


def _random_c2w(n: int, seed: int = 0) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(seed)
    c2w = np.tile(np.eye(4), (n, 1, 1))
    c2w[:, :3, :3] = Rotation.random(n, random_state=seed).as_matrix()
    c2w[:, :3, 3] = rng.normal(size=(n, 3)) * 3 + [10.0, -4.0, 2.0]
    return c2w


def test_normalised_capture_maps_back_to_its_own_world():
    source = _random_c2w(12)
    normalised, normalization = normalize_poses(source)
    cube = nerf_to_unit_cube(normalised, 0.33, (0.5, 0.5, 0.5))
    scene = Scene(format="colmap", root=Path("."), splits={}, aabb_scale=16, pose_normalization=normalization)
    np.testing.assert_allclose(cube_to_world(cube[:, :3, 3], scene), source[:, :3, 3], atol=1e-9)
    np.testing.assert_allclose(world_c2w_to_cube(source, scene), cube, atol=1e-9)
    np.testing.assert_allclose(cube_c2w_to_world(cube, scene), source, atol=1e-9)
    # distances: one cube unit is 1 / (0.33 · s) source units
    a, b = cube[0, :3, 3], cube[1, :3, 3]
    expected = np.linalg.norm(source[0, :3, 3] - source[1, :3, 3])
    assert abs(np.linalg.norm(a - b) * units_per_cube_unit(scene) - expected) < 1e-9


def test_scale_and_offset_round_trip():
    scene = Scene(format="instant-ngp", root=Path("."), splits={}, aabb_scale=4, world_scale=0.2, world_offset=(0.1, 0.7, 0.4))
    points = np.random.default_rng(1).normal(size=(50, 3))
    np.testing.assert_allclose(cube_to_world(world_to_cube(points, scene), scene), points, atol=1e-12)
    c2w = _random_c2w(3, seed=2)
    np.testing.assert_allclose(world_c2w_to_cube(c2w, scene), nerf_to_unit_cube(c2w, 0.2, (0.1, 0.7, 0.4)), atol=1e-12)
