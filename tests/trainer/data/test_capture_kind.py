"""Capture kinds (object, forward-facing, 360) from cameras and alpha, on synthetic camera sets and
on fox and lego from ../shared/data."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from PIL import Image

from tests.support.paths import SHARED_DATA
from trainer.data import load_scene
from trainer.data.capture_kind import (
    FORWARD_FACING_MAX_DEG, classify_cameras, classify_capture, transparent_share, view_spread_deg,
)


def look_at(position, target) -> np.ndarray:
    """[4, 4] camera-to-world (OpenGL axes: looks down −z) at ``position`` looking at ``target``."""
    position, target = np.asarray(position, float), np.asarray(target, float)
    forward = target - position
    forward /= np.linalg.norm(forward)
    up = np.array([0.0, 0.0, 1.0]) if abs(forward[2]) < 0.99 else np.array([0.0, 1.0, 0.0])
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, np.cross(right, forward), -forward, position
    return c2w


def arc_cameras(n: int, arc_deg: float, radius: float = 1.5, height: float = 0.8) -> np.ndarray:
    """Cameras on a horizontal arc around the cube centre (at ``height``), looking at it."""
    angles = np.radians(np.linspace(-arc_deg / 2, arc_deg / 2, n))
    return np.stack([look_at((0.5 + radius * math.cos(a), 0.5 + radius * math.sin(a), height), (0.5, 0.5, 0.5))
                     for a in angles])


def forward_rig(n: int, rng: np.random.Generator) -> np.ndarray:
    """LLFF-like: cameras on a small patch of a plane, all looking about the same way (+y)."""
    poses = []
    for _ in range(n):
        position = np.array([0.5, -1.0, 0.5]) + np.append(rng.uniform(-0.2, 0.2, 1), [0, 0])
        position[2] += rng.uniform(-0.1, 0.1)
        target = np.array([0.5, 2.0, 0.5]) + rng.uniform(-0.3, 0.3, 3)
        poses.append(look_at(position, target))
    return np.stack(poses)


def test_images_with_removed_background_make_an_object_whatever_the_cameras():
    kind = classify_cameras(arc_cameras(20, 360), transparent=0.6)
    assert kind.kind == "object" and "alpha" in kind.reason and kind.transparent_share == 0.6
    assert classify_cameras(forward_rig(10, np.random.default_rng(0)), transparent=0.3).kind == "object"
    # a sliver of alpha (an anti-aliased logo, a stray pixel) is not a removed background
    assert classify_cameras(arc_cameras(20, 360), transparent=0.002).kind == "360"


def test_a_forward_facing_rig_and_a_surrounding_ring_without_alpha():
    rng = np.random.default_rng(1)
    forward = classify_cameras(forward_rig(20, rng), transparent=0.0)
    assert forward.kind == "forward-facing" and forward.view_spread_deg < FORWARD_FACING_MAX_DEG
    surrounding = classify_cameras(arc_cameras(24, 360), transparent=0.0)
    assert surrounding.kind == "360" and surrounding.view_spread_deg > 90
    partial = classify_cameras(arc_cameras(12, 100), transparent=None)  # fox-like: a 100° arc around the object
    assert partial.kind == "360" and 40 < partial.view_spread_deg < 60
    assert "views spread to" in partial.reason


def test_the_forward_facing_bound_is_the_largest_angle_from_the_mean_view_direction():
    # cameras on an arc of 2θ look at its centre: the outermost view is θ from the mean direction
    for arc, kind in ((2 * FORWARD_FACING_MAX_DEG - 2, "forward-facing"), (2 * FORWARD_FACING_MAX_DEG + 2, "360")):
        cameras = arc_cameras(9, arc, height=0.5)
        assert view_spread_deg(cameras) == pytest.approx(arc / 2, abs=1e-6)
        assert classify_cameras(cameras, transparent=0.0).kind == kind


def test_degenerate_camera_sets():
    assert classify_cameras(np.zeros((0, 4, 4)), transparent=None).kind == "360"
    opposite = np.stack([look_at((0.5, -1, 0.5), (0.5, 0.5, 0.5)), look_at((0.5, 2, 0.5), (0.5, 0.5, 0.5))])
    assert view_spread_deg(opposite) == 180.0  # the view directions cancel: no mean direction
    with pytest.raises(ValueError, match="c2w must be"):
        classify_cameras(np.zeros((3, 3, 3)), transparent=0.0)


def test_transparent_share_reads_alpha_from_a_few_images(tmp_path):
    from trainer.data.scene import Frame, Intrinsics

    paths = []
    for i, cut in enumerate((0, 16, 0)):  # the middle image has its left half transparent
        rgba = np.full((32, 32, 4), 255, np.uint8)
        rgba[:, :cut, 3] = 0
        path = tmp_path / f"{i}.png"
        Image.fromarray(rgba, "RGBA").save(path)
        paths.append(path)
    rgb = tmp_path / "rgb.jpg"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(rgb)
    intrinsics = Intrinsics(width=32, height=32, fx=30.0, fy=30.0, cx=16.0, cy=16.0)
    frames = [Frame(name=p.name, image_path=p, c2w=np.eye(4), intrinsics=intrinsics) for p in paths]
    assert transparent_share(frames) == pytest.approx(0.5)
    assert transparent_share(frames[:1] + frames[2:]) == 0.0  # alpha present but every pixel opaque
    assert transparent_share([Frame(name="rgb", image_path=rgb, c2w=np.eye(4), intrinsics=intrinsics)]) == 0.0
    assert transparent_share([]) is None


@pytest.mark.skipif(not SHARED_DATA.exists(), reason=f"{SHARED_DATA} not present")
def test_fox_is_a_360_capture_and_lego_an_object():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fox's missing frames
        fox = classify_capture(load_scene(SHARED_DATA / "fox", downscale=8))
    assert fox.kind == "360" and fox.transparent_share == 0.0
    assert 45 < fox.view_spread_deg < 60  # fox's views span about ±52° around the figurine
    lego = classify_capture(load_scene(SHARED_DATA / "nerf_synthetic_lego_400"))
    assert lego.kind == "object" and lego.transparent_share > 0.5
