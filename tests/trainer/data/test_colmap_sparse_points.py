"""COLMAP models with sparse points: the points reproject through the loaded scene, and the scene
box leaves no pixel ray without samples when the points cover only the middle of the views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.scene_formats import RING_HEIGHT, RING_WIDTH, ring_c2w, write_colmap_text, write_image
from trainer.data import load_scene
from trainer.data.scenebox import SceneBox, missed_ray_fraction
from trainer.inference.worldframe import world_to_cube


def project(c2w_opengl: np.ndarray, fx: float, fy: float, cx: float, cy: float, points: np.ndarray) -> np.ndarray:
    """[n, 2] pixel coordinates (COLMAP's: top-left pixel centre at (0.5, 0.5)) of world points."""
    w2c = np.linalg.inv(c2w_opengl)
    cam = points @ w2c[:3, :3].T + w2c[:3, 3]
    depth = -cam[:, 2]
    assert np.all(depth > 0)
    return np.stack([cx + fx * cam[:, 0] / depth, cy - fy * cam[:, 1] / depth], axis=1)


def write_scene_with_points(folder: Path, half_size: float, focal: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """A ring of 8 cameras around a cube of sparse points (corners, edge midpoints, centre), every
    point observed in every image; returns the points and each image's observations [n, 2]."""
    c2w = ring_c2w(8, radius=4.0, elevation_deg=20.0)
    grid = np.array(np.meshgrid(*[[-1.0, 0.0, 1.0]] * 3, indexing="ij")).reshape(3, -1).T
    points = half_size * grid
    names = [f"frame_{i}.png" for i in range(len(c2w))]
    for name in names:
        write_image(folder / "images" / name)
    camera = f"PINHOLE {RING_WIDTH} {RING_HEIGHT} {focal} {focal} {RING_WIDTH / 2} {RING_HEIGHT / 2}"
    model = write_colmap_text(folder / "sparse" / "0", c2w, names, cameras=[camera])
    observations = [project(m, focal, focal, RING_WIDTH / 2, RING_HEIGHT / 2, points) for m in c2w]
    lines = (model / "images.txt").read_text().splitlines()
    image_lines = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    for index, xy in zip(image_lines, observations):
        lines[index + 1] = " ".join(f"{u!r} {v!r} {p + 1}" for p, (u, v) in enumerate(xy.tolist()))
    (model / "images.txt").write_text("\n".join(lines) + "\n")
    track = lambda p: " ".join(f"{i + 1} {p}" for i in range(len(c2w)))  # noqa: E731
    (model / "points3D.txt").write_text(
        "# 3D point list\n"
        + "".join(f"{p + 1} {x!r} {y!r} {z!r} 128 128 128 0.5 {track(p)}\n" for p, (x, y, z) in enumerate(points.tolist()))
    )
    return points, observations


def hit_fraction(scene) -> float:
    """Fraction of a pixel grid of the loaded frames' rays that meet the scene's AABB."""
    frames = scene.splits["train"] + scene.splits.get("test", [])
    half = 0.5 * scene.aabb_scale
    aabb = SceneBox(np.full(3, 0.5 - half), np.full(3, 0.5 + half), "scene AABB")
    return 1.0 - missed_ray_fraction(np.stack([f.c2w for f in frames]), [f.intrinsics for f in frames], aabb)


@pytest.mark.parametrize("half_size, focal", [(0.3, 50.0), (0.5, 250.0)])
def test_sparse_points_reproject_through_the_loaded_scene(tmp_path, half_size, focal) -> None:
    points, observations = write_scene_with_points(tmp_path, half_size, focal)
    scene = load_scene(tmp_path)
    cube_points = world_to_cube(points, scene)
    frames = sorted(scene.splits["train"] + scene.splits["test"], key=lambda f: int(f.name[6:-4]))
    for frame, xy in zip(frames, observations):
        k = frame.intrinsics
        np.testing.assert_allclose(project(frame.c2w, k.fx, k.fy, k.cx, k.cy, cube_points), xy, atol=1e-6)


def test_box_of_points_in_the_middle_of_the_views_keeps_every_ray(tmp_path) -> None:
    # The points cover the middle fifth of each view; the rest (a background without points)
    # must still meet the box, or those rays can only show the background colour.
    write_scene_with_points(tmp_path, half_size=0.3, focal=50.0)
    scene = load_scene(tmp_path)
    assert scene.box_source == "data"
    assert scene.aabb_scale > 1
    assert hit_fraction(scene) > 0.99
    assert any("misses" in note for note in scene.notes)


def test_points_filling_the_views_are_mapped_onto_the_unit_cube(tmp_path) -> None:
    write_scene_with_points(tmp_path, half_size=0.5, focal=250.0)
    scene = load_scene(tmp_path)
    assert scene.aabb_scale == 1
    assert scene.world_scale > 0.5
    assert hit_fraction(scene) > 0.95
