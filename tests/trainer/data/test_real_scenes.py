"""The real scenes in ../shared/data (see its README.md) load with the documented numbers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tests.support.paths import SHARED_DATA
from trainer.data import Scene, load_scene

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason=f"{SHARED_DATA} not present")

FOX_MISSING = [
    "0005", "0016", "0017", "0024", "0032", "0051", "0068", "0071", "0075",
    "0083", "0087", "0088", "0093", "0099", "0104", "0106", "0113",
]  # fmt: skip


@pytest.fixture(scope="module")
def fox() -> tuple[Scene, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_scene(SHARED_DATA / "fox")
    return scene, caught


@pytest.fixture(scope="module")
def lego() -> Scene:
    return load_scene(SHARED_DATA / "nerf_synthetic_lego_400")


def test_fox_frames_skipped_and_splits(fox) -> None:
    scene, caught = fox
    assert scene.format == "instant-ngp"
    assert scene.split_counts == {"train": 43, "test": 7}
    assert len(caught) == 1 and "skipping 17 frames" in str(caught[0].message)
    assert [s.frame for s in scene.skipped] == [f"images/{n}.jpg" for n in FOX_MISSING]
    assert all(s.reason.startswith("image file not found: ") for s in scene.skipped)
    names = [f.name for f in scene.frames("train") + scene.frames("test")]
    assert len(set(names)) == 50
    assert not set(names) & {s.frame for s in scene.skipped}
    # holdout 8 over the 50 kept frames in natural order: the 1st, 9th, ... kept frames are test
    kept = sorted(names)
    assert [f.name for f in scene.frames("test")] == kept[::8]


def test_fox_camera(fox) -> None:
    scene, _ = fox
    assert scene.aabb_scale == 4
    np.testing.assert_array_equal(scene.aabb, [[-1.5] * 3, [2.5] * 3])
    intr = scene.frames("train")[0].intrinsics
    assert (intr.width, intr.height) == (1080, 1920)
    assert (intr.fx, intr.fy, intr.cx, intr.cy) == (1375.52, 1374.49, 554.558, 965.268)
    assert (intr.k1, intr.k2, intr.p1, intr.p2) == (0.0578421, -0.0805099, -0.000980296, 0.00015575)
    assert all(f.sharpness is not None and 11.0 < f.sharpness < 48.0 for f in scene.frames("train"))
    # README: camera centres 3.8-6.4 NeRF units from the origin -> 0.33x that from the cube centre
    centres = np.stack([f.c2w[:3, 3] for f in scene.frames("train") + scene.frames("test")])
    distances = np.linalg.norm(centres - 0.5, axis=1)
    assert distances.min() > 3.7 * 0.33
    assert distances.max() < 6.5 * 0.33
    for f in scene.frames("train"):
        np.testing.assert_allclose(f.c2w[:3, :3] @ f.c2w[:3, :3].T, np.eye(3), atol=1e-5)


def test_fox_downscale() -> None:
    with pytest.warns(UserWarning, match="skipping 17 frame"):
        scene = load_scene(SHARED_DATA / "fox" / "transforms.json", downscale=2, holdout_every=0)
    assert scene.split_counts == {"train": 50, "test": 0}
    intr = scene.frames("train")[0].intrinsics
    assert (intr.width, intr.height, intr.fx, intr.cx) == (540, 960, 1375.52 / 2, 554.558 / 2)


def test_lego_400(lego) -> None:
    assert lego.format == "blender"
    assert lego.split_counts == {"train": 100, "val": 100, "test": 200}
    assert lego.white_background and lego.aabb_scale == 1
    focal = 0.5 * 400 / math.tan(0.5 * 0.6911112070083618)
    assert focal == pytest.approx(555.555, abs=1e-3)
    for split in ("train", "val", "test"):
        for frame in lego.frames(split):
            intr = frame.intrinsics
            assert (intr.width, intr.height, intr.cx, intr.cy) == (400, 400, 200.0, 200.0)
            assert intr.fx == pytest.approx(focal, rel=1e-12) and intr.fy == intr.fx
            assert frame.image_path.is_file()
    assert lego.frames("test")[199].name == "./test/r_199"
    # README: cameras on a sphere of radius 4.031 around the origin
    centres = np.stack([f.c2w[:3, 3] for f in lego.frames("train")])
    np.testing.assert_allclose(np.linalg.norm(centres - 0.5, axis=1), 4.031 * 0.33, atol=0.01)


def test_nerfstudio_fixture() -> None:
    scene = load_scene(SHARED_DATA / "nerfstudio_lego_test_fixture")
    assert scene.format == "blender"
    assert scene.split_counts == {"train": 1, "val": 1}
    for split in ("train", "val"):
        intr = scene.frames(split)[0].intrinsics
        assert (intr.width, intr.height) == (50, 50)
        assert intr.fx == pytest.approx(0.5 * 50 / math.tan(0.5 * 0.6911112070083618))


def test_the_default_finest_level_resolves_the_views_pixels(lego, fox) -> None:
    from trainer.contract.config import EncodingConfig
    from trainer.data.footprint import footprint_resolution

    # lego_400: 400-pixel views, f = 555.6 px, cameras 4.03 · 0.33 from the centre of the unit cube
    footprint = footprint_resolution(lego.frames("train"), lego.aabb)
    assert footprint == pytest.approx(555.6 / (4.031 * 0.33), rel=0.01)
    # 512: the best N_max of 256/512/1024/2048 on lego_400's test views (configs/nerf_synthetic_400.json)
    assert EncodingConfig().finest_resolution(lego.aabb_scale, footprint) == 512
    fox_scene, _ = fox
    fox_footprint = footprint_resolution(fox_scene.frames("train"), fox_scene.aabb)
    assert EncodingConfig().finest_resolution(fox_scene.aabb_scale, fox_footprint) == 4096  # instant-ngp: 2048·4

