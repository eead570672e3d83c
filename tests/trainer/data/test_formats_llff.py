"""LLFF loader: pose columns, normalisation, images_N folders, count checks, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tests.support.scene_formats import RING_FOCAL, RING_HEIGHT, RING_WIDTH, ring_c2w, write_image, write_llff
from trainer.data import SceneError, load_scene
from trainer.data.formats import llff
from trainer.data.options import SceneOptions


def expected_cube(ring: np.ndarray) -> np.ndarray:
    out = ring.copy()
    out[:, :3, 3] = (ring[:, :3, 3] * 0.33 + 0.5)[:, [1, 2, 0]]
    out[:, :3, :3] = ring[:, [1, 2, 0], :3]
    return out


def test_ring_loads_with_defaults(tmp_path) -> None:
    ring = ring_c2w()
    write_llff(tmp_path, ring)
    scene = load_scene(tmp_path / "poses_bounds.npy", holdout_every=0)
    assert scene.format == "llff"
    # near/far bounds 1..8 of a ring of radius 4: content larger than the unit cube, held by a cube of 4
    assert (scene.aabb_scale, scene.box_source) == (4, "data")
    assert scene.downscale == 1
    frames = scene.frames("train")
    assert [f.name for f in frames] == [f"IMG_{i:04d}.JPG" for i in range(8)]
    np.testing.assert_allclose(np.stack([f.c2w for f in frames]), expected_cube(ring), atol=1e-8)
    intr = frames[0].intrinsics
    assert (intr.width, intr.height, intr.fx, intr.fy, intr.cx, intr.cy) == (
        RING_WIDTH,
        RING_HEIGHT,
        RING_FOCAL,
        RING_FOCAL,
        20.0,
        15.0,
    )
    assert any(n.startswith("llff: poses normalised like colmap2nerf") for n in scene.notes)
    assert load_scene(tmp_path, aabb_scale=4).aabb_scale == 4


def test_tilted_scaled_capture_is_normalised(tmp_path) -> None:
    ring = ring_c2w(n=10, elevation_deg=15.0)
    angle = math.radians(-50.0)
    tilt = np.array(
        [[math.cos(angle), 0, math.sin(angle)], [0, 1, 0], [-math.sin(angle), 0, math.cos(angle)]]
    )
    moved = ring.copy()
    moved[:, :3, :3] = tilt @ ring[:, :3, :3]
    moved[:, :3, 3] = 0.1 * ring[:, :3, 3] @ tilt.T + (5.0, 6.0, -7.0)
    write_llff(tmp_path, moved)
    scene = load_scene(tmp_path, holdout_every=5)
    assert scene.split_counts == {"train": 8, "test": 2}
    got = np.stack([f.c2w for f in scene.frames("test")])
    np.testing.assert_allclose(got, expected_cube(ring[[0, 5]]), atol=1e-8)


def test_images_n_folder_is_used_when_present(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    for i in range(8):
        write_image(tmp_path / "images_2" / f"IMG_{i:04d}.png", RING_WIDTH // 2, RING_HEIGHT // 2)
    scene = load_scene(tmp_path, downscale=2)
    assert scene.downscale == 1  # pre-shrunk images are decoded as they are
    frame = scene.frames("train")[0]
    assert frame.image_path.parent.name == "images_2"
    intr = frame.intrinsics
    assert (intr.width, intr.height, intr.fx, intr.cx, intr.cy) == (20, 15, RING_FOCAL / 2, 10.0, 7.5)
    assert ("llff: trained at 20x15 (downscale 2: data.downscale / --downscale 2, as given; the automatic rule would "
            "pick 1: longest side 40 px → 40 px ≤ 1600 px); images from images_2/ as they are") in scene.notes


def test_images_folder_with_downscale_when_images_n_is_absent(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    scene = load_scene(tmp_path, downscale=4)
    assert scene.downscale == 4
    intr = scene.frames("train")[0].intrinsics
    assert (intr.width, intr.height, intr.fx, intr.cx, intr.cy) == (10, 7, RING_FOCAL / 4, 5.0, 3.75)
    assert scene.frames("train")[0].image_path.parent.name == "images"


def test_images_sorted_by_name_match_rows(tmp_path) -> None:
    ring = ring_c2w(n=3)
    write_llff(tmp_path, ring)
    # Rename so that name order differs from creation order: rows follow the sorted names.
    for i, new in enumerate(["c.png", "a.png", "b.png"]):
        (tmp_path / "images" / f"IMG_{i:04d}.JPG").rename(tmp_path / "images" / new)
    frames = load_scene(tmp_path, holdout_every=0).frames("train")
    assert [f.name for f in frames] == ["a.png", "b.png", "c.png"]
    np.testing.assert_allclose(frames[0].c2w, expected_cube(ring)[0], atol=1e-8)


def test_image_count_must_match_rows(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    (tmp_path / "images" / "IMG_0003.JPG").unlink()
    with pytest.raises(SceneError, match=r"poses_bounds.npy: has 8 poses but .*images has 7 images"):
        load_scene(tmp_path)


def test_missing_image_folder(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    for p in (tmp_path / "images").iterdir():
        p.unlink()
    (tmp_path / "images").rmdir()
    with pytest.raises(SceneError, match=rf"^{re.escape(str(tmp_path / 'images'))}: image folder not found$"):
        llff.load(tmp_path, SceneOptions(downscale=2))


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((3, 15)), r"expected an \[N, 17\] array .* got shape \[3, 15\]"),
        (np.zeros((0, 17)), r"expected an \[N, 17\] array .* got shape \[0, 17\]"),
        (np.full((2, 17), np.nan), r"row 0 contains NaN/Infinity"),
    ],
)
def test_bad_poses_bounds(tmp_path, array: np.ndarray, message: str) -> None:
    np.save(tmp_path / "poses_bounds.npy", array)
    (tmp_path / "images").mkdir()
    with pytest.raises(SceneError, match=rf"^{re.escape(str(tmp_path / 'poses_bounds.npy'))}: {message}"):
        load_scene(tmp_path)


def test_bad_hwf_and_unreadable_npy(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w(n=2))
    array = np.load(tmp_path / "poses_bounds.npy")
    array[1, 14] = 0.0  # focal of row 1
    np.save(tmp_path / "poses_bounds.npy", array)
    with pytest.raises(SceneError, match=r"row 1: hwf \(height, width, focal\) must be positive"):
        load_scene(tmp_path)
    (tmp_path / "poses_bounds.npy").write_bytes(b"garbage")
    with pytest.raises(SceneError, match=r"poses_bounds.npy: not a readable .npy array"):
        load_scene(tmp_path)


def test_image_with_other_aspect_ratio(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w(n=2))
    write_image(tmp_path / "images" / "IMG_0001.JPG", 40, 40)
    with pytest.raises(
        SceneError,
        match=r"row 1 \(images/IMG_0001.JPG\): image is 40x40 but the camera is calibrated for 40x30",
    ):
        load_scene(tmp_path)
