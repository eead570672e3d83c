"""Placement of a reconstruction in transforms.json's world and its camera keys."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ngptune.prepare.transforms import camera_keys, place_capture


def _ring_opencv(n: int, radius: float, height: float) -> np.ndarray:
    """[n, 4, 4] OpenCV-axes cameras on a ring around +z at ``height``, looking at the origin."""
    cams = []
    for i in range(n):
        angle = 2 * math.pi * i / n
        centre = np.array([radius * math.cos(angle), radius * math.sin(angle), height])
        forward = -centre / np.linalg.norm(centre)  # OpenCV +z looks at the origin
        right = np.cross(forward, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        down = np.cross(forward, right)
        c2w = np.eye(4)
        c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, down, forward, centre
        cams.append(c2w)
    return np.stack(cams)


def test_placement_puts_up_along_z_the_content_at_the_origin_and_cameras_4_away() -> None:
    """A ring of cameras in a turned, scaled and shifted world comes back upright and centred."""
    ring = _ring_opencv(12, radius=3.0, height=1.0)
    points = np.random.default_rng(0).uniform(-0.5, 0.5, size=(400, 3))
    turn = Rotation.from_rotvec([0.9, -0.4, 0.3]).as_matrix()
    shift = np.array([10.0, -3.0, 2.0])
    world = ring.copy()
    world[:, :3, :3] = np.einsum("ij,njk->nik", turn, ring[:, :3, :3])
    world[:, :3, 3] = 7.0 * ring[:, :3, 3] @ turn.T + shift
    placement = place_capture(world, 7.0 * points @ turn.T + shift)
    ups = placement.c2w[:, :3, 1]
    np.testing.assert_allclose(ups.sum(axis=0) / np.linalg.norm(ups.sum(axis=0)), [0.0, 0.0, 1.0], atol=1e-9)
    positions = placement.c2w[:, :3, 3]
    assert np.mean(np.linalg.norm(positions, axis=1)) == pytest.approx(4.0)
    np.testing.assert_allclose(positions[:, 2], 4.0 / math.sqrt(10.0), atol=0.1)  # height 1 of distance √10
    # OpenGL axes: each camera looks down −z towards the content at the origin.
    looking = -placement.c2w[:, :3, 2]
    towards = -positions / np.linalg.norm(positions, axis=1, keepdims=True)
    np.testing.assert_allclose(np.sum(looking * towards, axis=1), 1.0, atol=0.05)
    # Cameras 4 away: 4 · 0.33 · 1.1 · 2 = 2.9 → the cube of side 4 holds them.
    assert placement.aabb_scale == 4
    assert placement.box_lo is not None and np.all(placement.box_lo < 0) and np.all(placement.box_hi > 0)


def test_a_far_content_box_grows_aabb_scale() -> None:
    ring = _ring_opencv(8, radius=3.0, height=0.0)
    points = np.concatenate([np.zeros((50, 3)), np.full((50, 3), 30.0), np.full((50, 3), -30.0)])
    # Points 40 out after the ×4/3 scale: 2 · 40 · 0.33 · 1.1 = 29 → 32.
    assert place_capture(ring, points).aabb_scale == 32


def test_without_points_the_cameras_alone_set_the_box() -> None:
    placement = place_capture(_ring_opencv(8, radius=2.0, height=0.0), np.zeros((0, 3)))
    assert placement.box_lo is None and placement.n_points == 0
    assert placement.aabb_scale == 4


@pytest.mark.parametrize(
    "model, params, expected",
    [
        ("SIMPLE_PINHOLE", [100.0, 50.0, 40.0], dict(fl_x=100.0, fl_y=100.0, cx=50.0, cy=40.0, k1=0.0)),
        ("PINHOLE", [100.0, 90.0, 50.0, 40.0], dict(fl_x=100.0, fl_y=90.0, k1=0.0, p2=0.0)),
        ("SIMPLE_RADIAL", [100.0, 50.0, 40.0, 0.1], dict(fl_x=100.0, fl_y=100.0, k1=0.1, k2=0.0)),
        ("RADIAL", [100.0, 50.0, 40.0, 0.1, -0.2], dict(k1=0.1, k2=-0.2, p1=0.0)),
        ("OPENCV", [100.0, 90.0, 50.0, 40.0, 0.1, -0.2, 0.01, -0.02], dict(fl_y=90.0, k2=-0.2, p1=0.01, p2=-0.02)),
    ],
)
def test_camera_keys_of_each_model(model: str, params: list[float], expected: dict[str, float]) -> None:
    keys = camera_keys(model, 100, 80, params)
    for name, value in expected.items():
        assert keys[name] == pytest.approx(value), name
    assert (keys["w"], keys["h"]) == (100.0, 80.0)
    assert keys["camera_angle_x"] == pytest.approx(2 * math.atan(50.0 / keys["fl_x"]))
    assert keys["camera_angle_y"] == pytest.approx(2 * math.atan(40.0 / keys["fl_y"]))


def test_camera_keys_refuse_a_model_transforms_json_cannot_hold() -> None:
    with pytest.raises(ValueError, match="OPENCV_FISHEYE"):
        camera_keys("OPENCV_FISHEYE", 100, 80, [1.0] * 8)
