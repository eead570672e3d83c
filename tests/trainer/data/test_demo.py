"""The analytic demo scene: files, pixels, determinism, cache, agreement with its ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.support.paths import REPO
from trainer.data.demo import (
    CAMERA_ANGLE_X,
    DEMO_SCENE_VERSION,
    demo_scene_path,
    render_demo_view,
    write_demo_scene,
)
from trainer.contract.errors import ConfigError, SceneError

SPLIT_COUNTS = {"train": 32, "val": 4, "test": 8}
FOCAL_64 = 0.5 * 64 / math.tan(0.5 * CAMERA_ANGLE_X)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def scene_dir(cache_root: Path) -> Path:
    """The default demo scene, written once through the cache entry point."""
    return demo_scene_path(cache_root)


def _read_png(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.mode == "RGBA"
        return np.asarray(im)


def _transforms(scene_dir: Path, split: str) -> dict:
    return json.loads((scene_dir / f"transforms_{split}.json").read_text())


def test_cache_folder_name_and_layout(scene_dir: Path, cache_root: Path) -> None:
    assert scene_dir == cache_root / f"demo-scene-v{DEMO_SCENE_VERSION}"
    assert scene_dir.name == "demo-scene-v1"
    # Written atomically: nothing but the scene folder is left in the cache root.
    assert [p.name for p in cache_root.iterdir()] == [scene_dir.name]
    for split, count in SPLIT_COUNTS.items():
        transforms = _transforms(scene_dir, split)
        assert set(transforms) == {"camera_angle_x", "frames"}
        assert transforms["camera_angle_x"] == pytest.approx(0.6911112070083618)
        frames = transforms["frames"]
        assert [f["file_path"] for f in frames] == [f"./{split}/r_{i}" for i in range(count)]
        assert sorted(p.name for p in (scene_dir / split).iterdir()) == sorted(
            f"r_{i}.png" for i in range(count)
        )


def test_cameras_look_at_origin_from_radius_4(scene_dir: Path) -> None:
    for split in SPLIT_COUNTS:
        for frame in _transforms(scene_dir, split)["frames"]:
            c2w = np.array(frame["transform_matrix"])
            assert c2w.shape == (4, 4)
            np.testing.assert_allclose(c2w[3], [0, 0, 0, 1])
            rotation, centre = c2w[:3, :3], c2w[:3, 3]
            np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-12)
            assert np.linalg.det(rotation) == pytest.approx(1.0)
            assert np.linalg.norm(centre) == pytest.approx(4.0)
            assert centre[2] > 0.0  # upper hemisphere
            # OpenGL axes: the camera looks down its −z axis, i.e. towards the origin.
            np.testing.assert_allclose(-rotation[:, 2], -centre / 4.0, atol=1e-12)
            assert rotation[2, 1] > 0.0  # image up points to world +z


def test_pngs_are_rgba_with_transparent_background_and_fractional_edges(scene_dir: Path) -> None:
    for split, count in SPLIT_COUNTS.items():
        for i in range(count):
            rgba = _read_png(scene_dir / split / f"r_{i}.png")
            assert rgba.shape == (64, 64, 4) and rgba.dtype == np.uint8
            alpha = rgba[..., 3]
            assert (alpha == 0).any() and (alpha == 255).any()
            assert ((alpha > 0) & (alpha < 255)).any()  # anti-aliased silhouettes
            assert set(np.unique(alpha).tolist()) <= {0, 64, 128, 191, 255}  # 2×2 coverage
            assert (rgba[alpha == 0, :3] == 0).all()
            assert (alpha[0, :] == 0).all() and (alpha[-1, :] == 0).all()  # background at borders


def test_centre_pixel_of_a_camera_looking_at_origin_hits(scene_dir: Path) -> None:
    for split in SPLIT_COUNTS:
        rgba = _read_png(scene_dir / split / "r_0.png")
        assert (rgba[31:33, 31:33, 3] == 255).all()
    # A hand-written camera at (0, −4, 0) looking along +y (columns: right, up, back, centre).
    c2w = np.array([[1.0, 0, 0, 0], [0, 0, -1, -4], [0, 1, 0, 0], [0, 0, 0, 1]])
    rgb, alpha = render_demo_view(c2w, 64, 48, FOCAL_64)
    assert rgb.shape == (48, 64, 3) and rgb.dtype == np.float32
    assert alpha.shape == (48, 64) and alpha.dtype == np.float32
    assert alpha[23:25, 31:33].min() == 1.0
    assert alpha[0, 0] == 0.0 and rgb[0, 0].tolist() == [0.0, 0.0, 0.0]
    assert 0.0 < rgb[24, 32].min() and rgb[24, 32].max() <= 1.0


def test_ground_truth_render_equals_pngs(scene_dir: Path) -> None:
    for split, i in [("train", 0), ("train", 17), ("test", 5)]:
        frame = _transforms(scene_dir, split)["frames"][i]
        rgb, alpha = render_demo_view(np.array(frame["transform_matrix"]), 64, 64, FOCAL_64)
        rgba = _read_png(scene_dir / split / f"r_{i}.png").astype(np.float64) / 255.0
        tolerance = 0.5 / 255.0 + 1e-6  # rounding to uint8
        np.testing.assert_allclose(rgba[..., 3], alpha, rtol=0, atol=tolerance)
        np.testing.assert_allclose(rgba[..., :3], rgb, rtol=0, atol=tolerance)


def test_render_is_consistent_across_resolutions() -> None:
    # The same camera at 16 px and 64 px: box-filtering the 64 px premultiplied colour by 4 × 4 must
    # approach the 16 px render where the 16 px pixel is fully covered (same scene, finer sampling).
    c2w = np.array([[1.0, 0, 0, 0], [0, 0, -1, -4], [0, 1, 0, 0], [0, 0, 0, 1]])
    rgb_lo, alpha_lo = render_demo_view(c2w, 16, 16, 0.25 * FOCAL_64)
    rgb_hi, alpha_hi = render_demo_view(c2w, 64, 64, FOCAL_64)
    coverage_hi = alpha_hi.reshape(16, 4, 16, 4).mean(axis=(1, 3))
    assert np.abs(coverage_hi - alpha_lo).mean() < 0.05
    interior = (alpha_lo == 1.0) & (coverage_hi == 1.0)
    assert interior.sum() > 10
    rgb_hi_box = rgb_hi.reshape(16, 4, 16, 4, 3).mean(axis=(1, 3))
    assert np.abs(rgb_hi_box[interior] - rgb_lo[interior]).mean() < 0.1


def test_writing_is_deterministic_and_seed_moves_train_cameras(
    scene_dir: Path, tmp_path: Path
) -> None:
    again = write_demo_scene(tmp_path / "again")
    assert again == tmp_path / "again"
    files = sorted(p.relative_to(scene_dir) for p in scene_dir.rglob("*") if p.is_file())
    files_again = sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert files == files_again and len(files) == 3 + sum(SPLIT_COUNTS.values())
    for rel in files:
        assert (scene_dir / rel).read_bytes() == (again / rel).read_bytes(), rel

    small = {"resolution": 16, "n_train": 3, "n_val": 0, "n_test": 1}
    other = write_demo_scene(tmp_path / "seed1", **small, seed=1)
    first = write_demo_scene(tmp_path / "seed0", **small, seed=0)

    def pose(folder: Path, split: str) -> np.ndarray:
        return np.array([f["transform_matrix"] for f in _transforms(folder, split)["frames"]])

    assert not np.allclose(pose(other, "train"), pose(first, "train"))
    np.testing.assert_array_equal(pose(other, "test"), pose(first, "test"))  # rings ignore the seed
    assert _transforms(other, "val")["frames"] == []
    assert _read_png(other / "train" / "r_0.png").shape == (16, 16, 4)


def test_cache_is_reused_and_honours_environment(
    scene_dir: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = scene_dir / "train" / "r_0.png"
    mtime_ns = marker.stat().st_mtime_ns
    monkeypatch.setenv("NGPTUNE_CACHE_DIR", str(cache_root))
    assert demo_scene_path() == scene_dir  # found through the environment, not rewritten
    assert marker.stat().st_mtime_ns == mtime_ns
    assert demo_scene_path(cache_root) == scene_dir


def test_cache_root_that_is_a_file_raises_scene_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(SceneError, match=r"file: cannot create the demo scene cache"):
        demo_scene_path(not_a_dir)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resolution": 256}, r"resolution: expected an integer in \[8, 128\], got 256"),
        ({"resolution": 64.0}, r"resolution: expected an integer in \[8, 128\], got 64.0"),
        ({"n_train": 0}, r"n_train: expected an integer >= 1, got 0"),
        ({"n_test": -1}, r"n_test: expected an integer >= 0, got -1"),
        ({"seed": "0"}, r"seed: expected an integer, got '0'"),
    ],
)
def test_bad_arguments_raise_config_error(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        write_demo_scene(tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())  # nothing written


_BLENDER_LOADER = REPO / "trainer" / "data" / "formats" / "blender.py"


@pytest.mark.skipif(not _BLENDER_LOADER.exists(), reason="Blender loader not written yet")
def test_blender_loader_reads_the_demo_scene(scene_dir: Path) -> None:
    from trainer.data import load_scene

    scene = load_scene(scene_dir)
    assert scene.format == "blender"
    assert scene.split_counts == SPLIT_COUNTS
    for frames in scene.splits.values():
        for frame in frames:
            assert (frame.intrinsics.width, frame.intrinsics.height) == (64, 64)
            assert frame.intrinsics.fx == pytest.approx(FOCAL_64)
            assert frame.image_path.is_file()
