"""NeRF-synthetic (Blender) loader: splits, focal from the real width, paths, bad input."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.support.scene_formats import RING_FOCAL, RING_HEIGHT, RING_WIDTH, ring_c2w, write_blender, write_image
from trainer.data import SceneError, detect_format, load_scene
from trainer.data.formats import blender
from trainer.data.options import SceneOptions


def test_splits_that_exist_white_background_and_defaults(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w(), splits=("train", "test"))
    scene = load_scene(tmp_path, holdout_every=3)  # holdout does not apply to Blender
    assert scene.format == "blender"
    assert scene.split_counts == {"train": 8, "test": 8}
    assert scene.white_background is True
    assert scene.aabb_scale == 1
    frame = scene.frames("test")[5]
    assert frame.name == "./test/r_5"
    assert frame.image_path == (tmp_path / "test" / "r_5.png").absolute()
    # scale 0.33, offset 0.5, axes cycled
    np.testing.assert_allclose(frame.c2w[:3, 3], (ring_c2w()[5][:3, 3] * 0.33 + 0.5)[[1, 2, 0]], atol=1e-12)


def test_focal_comes_from_the_real_image_width(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:2])
    # Replace the images by 80x60 renders: same field of view, twice the focal length in pixels.
    for i in range(2):
        write_image(tmp_path / "train" / f"r_{i}.png", 80, 60, mode="RGBA")
    intr = load_scene(tmp_path).frames("train")[0].intrinsics
    assert (intr.width, intr.height) == (80, 60)
    assert intr.fx == pytest.approx(2 * RING_FOCAL, rel=1e-12)
    assert intr.fy == intr.fx
    assert (intr.cx, intr.cy) == (40.0, 30.0)
    assert not intr.has_distortion


def test_file_order_kept_and_downscale(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:3])
    data = json.loads((tmp_path / "transforms_train.json").read_text())
    data["frames"] = data["frames"][::-1]
    (tmp_path / "transforms_train.json").write_text(json.dumps(data))
    scene = load_scene(tmp_path / "transforms_train.json", downscale=2, holdout_every=0)  # train only: keep every frame
    assert [f.name for f in scene.frames("train")] == ["./train/r_2", "./train/r_1", "./train/r_0"]
    intr = scene.frames("train")[0].intrinsics
    assert (intr.width, intr.height, intr.fx, intr.cx) == (
        RING_WIDTH // 2,
        RING_HEIGHT // 2,
        pytest.approx(RING_FOCAL / 2),
        10.0,
    )


def test_train_file_keys_apply_to_every_split(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:1], splits=("train", "val"))
    data = json.loads((tmp_path / "transforms_train.json").read_text())
    data.update(aabb_scale=4, scale=1.0, offset=[0.0, 0.0, 0.0])
    (tmp_path / "transforms_train.json").write_text(json.dumps(data))
    scene = load_scene(tmp_path)
    assert scene.aabb_scale == 4
    expected = ring_c2w()[0][:3, 3][[1, 2, 0]]
    np.testing.assert_allclose(scene.frames("train")[0].c2w[:3, 3], expected, atol=1e-12)
    np.testing.assert_allclose(scene.frames("val")[0].c2w[:3, 3], expected, atol=1e-12)
    assert load_scene(tmp_path, aabb_scale=2).aabb_scale == 2


def test_missing_transforms_train_json(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:1], splits=("val", "test"))
    with pytest.raises(
        SceneError,
        match=rf"^{re.escape(str(tmp_path / 'transforms_train.json'))}: not found; a Blender scene needs "
        r"transforms_train.json \(found transforms_test.json, transforms_val.json\)$",
    ):
        blender.load(tmp_path, SceneOptions())
    # Given one of the split files, detection says Blender and the loader names the missing file.
    assert detect_format(tmp_path / "transforms_val.json") == "blender"
    with pytest.raises(SceneError, match=r"transforms_train.json: not found"):
        load_scene(tmp_path / "transforms_val.json")


def test_missing_images_listed_in_one_error(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:4], splits=("train", "val"))
    (tmp_path / "val" / "r_1.png").unlink()
    (tmp_path / "val" / "r_3.png").unlink()
    with pytest.raises(SceneError) as err:
        load_scene(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'transforms_val.json'}: 2 image file(s) not found")
    assert str(err.value).endswith("./val/r_1, ./val/r_3")


def test_bad_split_file_names_file_and_frame(tmp_path) -> None:
    write_blender(tmp_path, ring_c2w()[:2], splits=("train", "test"))
    data = json.loads((tmp_path / "transforms_test.json").read_text())
    data["frames"][1]["transform_matrix"][2][3] = math.nan
    (tmp_path / "transforms_test.json").write_text(json.dumps(data))
    with pytest.raises(
        SceneError,
        match=rf"^{re.escape(str(tmp_path / 'transforms_test.json'))}: "
        r"frames\[1\] \('./test/r_1'\): transform_matrix contains nan",
    ):
        load_scene(tmp_path)
