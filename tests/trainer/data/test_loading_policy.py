"""The loading policy for real captures (docs/loading.md): format choice, resolution, scene box,
COLMAP registration, and cameras that cannot be right. Every input is built here."""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest
from PIL import Image

from tests.support.scene_formats import (
    RING_FOCAL,
    RING_HEIGHT,
    RING_WIDTH,
    look_at_c2w,
    ring_c2w,
    write_colmap_scene,
    write_colmap_text,
    write_image,
    write_llff,
    write_ngp,
)
from trainer.data import SceneError, detect_formats, load_scene
from trainer.data.camera_checks import convention_problem, layout_problems
from trainer.data.resolution import auto_downscale
from trainer.data.scenebox import points_box


def opencv_axes(c2w: np.ndarray) -> np.ndarray:
    out = np.array(c2w, dtype=np.float64)
    out[..., :3, 1:3] *= -1.0
    return out


# --- which format ---------------------------------------------------------------------------

def test_colmap_wins_over_llff_and_the_other_is_named(tmp_path) -> None:
    ring = ring_c2w()
    write_colmap_scene(tmp_path, ring)
    write_llff(tmp_path / "llff", ring)  # its poses_bounds.npy, for the same 8 images
    (tmp_path / "poses_bounds.npy").write_bytes((tmp_path / "llff" / "poses_bounds.npy").read_bytes())
    assert detect_formats(tmp_path) == ["colmap", "llff"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_scene(tmp_path)
        assert scene.format == "colmap" and scene.ignored_formats == ["llff"]
        assert scene.notes[0].startswith("format: colmap chosen (most camera information); also found and ignored: llff")
        llff = load_scene(tmp_path, format="llff")
        assert llff.format == "llff" and llff.ignored_formats == ["colmap"]
        assert "--format llff" in llff.notes[0]
    with pytest.raises(SceneError, match=r"--format blender: no blender scene here \(found: colmap, llff\)"):
        load_scene(tmp_path, format="blender")


def test_a_broken_colmap_model_beside_a_good_llff_capture_loads_the_capture_with_a_note(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    import pycolmap

    model = write_colmap_text(tmp_path / "sparse" / "0", ring_c2w(), [f"IMG_{i:04d}.JPG" for i in range(8)])
    pycolmap.Reconstruction(model).write_binary(model)
    for text in model.glob("*.txt"):
        text.unlink()
    (model / "images.bin").unlink()  # sparse/0 without images.bin
    with pytest.warns(UserWarning, match=r"^format: llff loaded; colmap was found first but cannot be loaded \("):
        scene = load_scene(tmp_path)
    assert scene.format == "llff" and scene.ignored_formats == ["colmap"]
    assert scene.notes[0].startswith("format: llff loaded; colmap was found first but cannot be loaded (")
    assert scene.notes[0].endswith("; --format colmap shows that error alone")
    with pytest.raises(SceneError):  # asked for by name: its own error, no fallback
        load_scene(tmp_path, format="colmap")
    (tmp_path / "poses_bounds.npy").write_bytes(b"not numpy")  # both broken: the first error, naming the other
    with pytest.raises(SceneError, match=r"also holds llff: --format llff reads that instead; it fails too"):
        load_scene(tmp_path)


# --- which resolution -----------------------------------------------------------------------

@pytest.mark.parametrize(("width", "height", "factor"), [(1600, 900, 1), (1920, 1080, 2), (4032, 3024, 4), (8000, 6000, 8)])
def test_auto_downscale_is_the_smallest_power_of_two_to_1600(width: int, height: int, factor: int) -> None:
    assert auto_downscale(width, height) == factor


def test_llff_images_8_is_used_for_large_photos_and_downscale_1_keeps_full_size(tmp_path) -> None:
    write_llff(tmp_path, ring_c2w())
    npy = tmp_path / "poses_bounds.npy"
    rows = np.load(npy)
    rows[:, [4, 9, 14]] = (6000.0, 8000.0, 10000.0)  # hwf of 48-megapixel photos
    np.save(npy, rows)
    for i in range(8):  # images/ is a uniform resize of the calibration, images_8/ another
        write_image(tmp_path / "images" / f"IMG_{i:04d}.JPG", 80, 60)
        write_image(tmp_path / "images_8" / f"IMG_{i:04d}.png", 40, 30)
    scene = load_scene(tmp_path)
    frame = scene.frames("train")[0]
    assert frame.image_path.parent.name == "images_8" and scene.downscale == 1
    assert (frame.intrinsics.width, frame.intrinsics.height, frame.intrinsics.fx) == (40, 30, 50.0)
    assert scene.size_rule == ("llff: trained at 1000x750 (downscale 8: the automatic rule: longest side 8000 px → "
                               "1000 px ≤ 1600 px); images from images_8/ as they are")
    assert scene.size_rule in scene.notes
    full = load_scene(tmp_path, downscale=1).frames("train")[0]
    assert full.image_path.parent.name == "images" and full.intrinsics.width == 80


def test_an_incomplete_images_n_folder_gives_way_to_images_shrunk_when_decoded(tmp_path) -> None:
    names = [f"frame_{i}.png" for i in range(8)]
    write_colmap_text(tmp_path / "sparse" / "0", ring_c2w(), names, cameras=["PINHOLE 320 240 400 400 160 120"])
    for name in names:
        write_image(tmp_path / "images" / name, 320, 240)
    for name in names[:3]:  # images_8/ holds 3 of the model's 8 images
        write_image(tmp_path / "images_8" / name, 40, 30)
    scene = load_scene(tmp_path, downscale=8)
    frame = scene.frames("train")[0]
    assert frame.image_path.parent.name == "images" and scene.downscale == 8 and frame.intrinsics.width == 40
    assert scene.size_rule == ("colmap: trained at 40x30 (downscale 8: data.downscale / --downscale 8, as given; the "
                               "automatic rule would pick 1: longest side 320 px → 320 px ≤ 1600 px); images from "
                               "images/, shrunk by 8 when decoded (images_8/ lacks 5 of the 8 images, e.g. frame_3.png; "
                               "images/ holds them all)")


# --- which box ------------------------------------------------------------------------------

def test_forward_facing_capture_gets_a_tight_box(tmp_path) -> None:
    cams = []
    for x in (-0.3, 0.0, 0.3):
        for y in (-0.2, 0.0, 0.2):
            cams.append(look_at_c2w(np.array([x, y, 0.0]), np.array([x * 0.5, y * 0.5, -3.0]), np.array([0.0, 1.0, 0.0])))
    write_llff(tmp_path, np.stack(cams), near_far=(2.0, 4.0))
    scene = load_scene(tmp_path, holdout_every=0)
    assert (scene.aabb_scale, scene.box_source) == (1, "data")
    assert any("forward-facing" in n and "content box mapped onto the unit cube" in n for n in scene.notes)
    # the box holds the content in front of the cameras, not the cameras: every central ray enters
    # the unit cube ahead of its camera, and no camera is inside it
    for frame in scene.frames("train"):
        origin, forward = frame.c2w[:3, 3], -frame.c2w[:3, 2]
        assert not np.all((origin > 0) & (origin < 1))
        t0, t1 = (np.array([0.0, 0.0, 0.0]) - origin) / forward, (np.array([1.0, 1.0, 1.0]) - origin) / forward
        t_enter, t_exit = np.max(np.minimum(t0, t1)), np.min(np.maximum(t0, t1))
        assert 0 < t_enter < t_exit
    assert load_scene(tmp_path, aabb_scale=4).aabb_scale == 4


def test_points_box_rejects_outliers() -> None:
    rng = np.random.default_rng(0)
    xyz = rng.uniform(-1.0, 1.0, size=(500, 3))
    xyz[0] = (100.0, 0.0, 0.0)  # large error
    xyz[1] = (0.0, -80.0, 0.0)  # seen once
    errors = np.full(500, 0.5)
    errors[0] = 9.0
    tracks = np.full(500, 3)
    tracks[1] = 1
    box = points_box(xyz, errors, tracks)
    assert box is not None and np.all(box.lo > -1.01) and np.all(box.hi < 1.01)
    assert "498 of 500 kept" in box.how


# --- COLMAP registration --------------------------------------------------------------------

def test_colmap_model_with_few_registered_images_warns(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w(2))
    for i in range(2, 12):
        write_image(tmp_path / "images" / f"frame_{i}.png")
    with pytest.warns(UserWarning, match=r"2 of 12 images registered in 0 \(below 50%"):
        scene = load_scene(tmp_path)
    assert "colmap: 2 of 12 images registered in 0" in scene.notes[1]


# --- cameras that cannot be right -----------------------------------------------------------

def test_mirror_rotation_is_refused_naming_the_frame(tmp_path) -> None:
    ring = ring_c2w()
    ring[3, :3, 0] *= -1.0  # a well-scaled mirror
    path = write_ngp(tmp_path, ring)
    with pytest.raises(SceneError, match=r"frames\[3\] \('images/003.png'\): transform_matrix: .* is a mirror \(det = -1"):
        load_scene(path)


def test_bottom_row_other_than_0001_is_refused_zeros_warned(tmp_path) -> None:
    ring = ring_c2w()
    path = write_ngp(tmp_path, ring)
    data = json.loads(path.read_text())
    data["frames"][2]["transform_matrix"][3] = [0.0, 0.0, 1.0, 1.0]
    path.write_text(json.dumps(data))
    with pytest.raises(SceneError, match=r"frames\[2\] \('images/002.png'\): transform_matrix bottom row is \[0.0, 0.0, 1.0, 1.0\]"):
        load_scene(path)
    data["frames"][2]["transform_matrix"][3] = [0.0, 0.0, 0.0, 0.0]
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=r"frames\[2\].*bottom row is \[0, 0, 0, 0\]; read as \[0, 0, 0, 1\]"):
        scene = load_scene(path, holdout_every=0)
    np.testing.assert_allclose(scene.frames("train")[2].c2w[3], [0, 0, 0, 1])


def test_opencv_ring_read_as_opengl_is_detected_and_the_flag_fixes_it(tmp_path) -> None:
    ring = ring_c2w()
    path = write_ngp(tmp_path, opencv_axes(ring))
    with pytest.warns(UserWarning, match=r"look away from each other's common region.*--camera-convention opencv"):
        wrong = load_scene(path, holdout_every=0)
    assert any(n.startswith("cameras: the cameras look away") for n in wrong.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = load_scene(path, holdout_every=0, camera_convention="opencv")
    expected = load_scene(write_ngp(tmp_path / "gl", ring), holdout_every=0)
    np.testing.assert_allclose(
        np.stack([f.c2w for f in right.frames("train")]), np.stack([f.c2w for f in expected.frames("train")]), atol=1e-12
    )
    assert convention_problem(ring) is None


def test_degenerate_layouts_are_named() -> None:
    ring = ring_c2w()
    at_origin = ring.copy()
    at_origin[:, :3, 3] = 0.0
    assert layout_problems(at_origin) == ["every one of the 8 poses has zero translation (all cameras at the origin)"]
    one_point = ring.copy()
    one_point[:, :3, 3] = (1.0, 2.0, 3.0)
    assert layout_problems(one_point)[0].startswith("all 8 cameras are at one point (1, 2, 3)")
    same_way = np.repeat(ring[:1], 8, axis=0)
    same_way[:, 0, 3] += np.arange(8)
    assert layout_problems(same_way) == [layout_problems(same_way)[0]]
    assert layout_problems(same_way)[0].startswith("all 8 cameras look exactly the same way")
    assert layout_problems(ring) == []


def test_degenerate_layout_warns_when_loading(tmp_path) -> None:
    ring = ring_c2w()
    ring[:, :3, 3] = 0.0
    with pytest.warns(UserWarning, match=r"transforms.json: every one of the 8 poses has zero translation"):
        load_scene(write_ngp(tmp_path, ring))


def test_exif_rotated_jpeg_size_mismatch_names_the_orientation(tmp_path) -> None:
    ring = ring_c2w(2)
    path = write_ngp(tmp_path, ring)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise when displayed
    Image.new("RGB", (RING_WIDTH, RING_HEIGHT), (10, 20, 30)).save(tmp_path / "images" / "001.jpg", exif=exif)
    (tmp_path / "images" / "001.png").unlink()
    data = json.loads(path.read_text())
    data["frames"][1]["file_path"] = "images/001.jpg"
    path.write_text(json.dumps(data))
    with pytest.raises(SceneError, match=r"image is 30x40 but the camera is calibrated for 40x30 .*EXIF orientation 6 turns it by 90°"):
        load_scene(path)


def test_non_numeric_sharpness_is_ignored_with_one_warning(tmp_path) -> None:
    path = write_ngp(tmp_path, ring_c2w(3))
    data = json.loads(path.read_text())
    for frame in data["frames"]:
        frame["sharpness"] = "n/a"
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning) as record:
        scene = load_scene(path, holdout_every=0)
    sharp = [w for w in record if "sharpness" in str(w.message)]
    assert len(sharp) == 1 and "not a number in 3 frame(s)" in str(sharp[0].message)
    assert [f.sharpness for f in scene.frames("train")] == [None, None, None]


# --- flags and config keys ------------------------------------------------------------------

def test_flags_set_the_data_keys() -> None:
    from trainer.contract.commandline import add_train_arguments
    from trainer.run.settings import resolve_config

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["--format", "llff", "--camera-convention", "opencv", "--aabb-scale", "8"])
    cfg = resolve_config(args)
    assert (cfg.data.format, cfg.data.camera_convention, cfg.data.aabb_scale) == ("llff", "opencv", 8)
    assert cfg.data.scene_options()["format"] == "llff"
    assert resolve_config(parser.parse_args([])).data.scene_options()["format"] is None


@pytest.mark.parametrize("value, shown", [("3", "3"), ("256", "256"), ("0", "0"), ("eight", "'eight'"),
                                          ("1_6", "'1_6'"), ("+8", "'+8'"), (" 4", "' 4'"), ("\u0668", "'\u0668'")])
def test_an_aabb_scale_that_is_no_power_of_two_is_refused_by_the_flag(value, shown, capsys) -> None:
    from trainer.contract.commandline import add_scene_format_arguments

    parser = argparse.ArgumentParser(prog="ngptune sweep")  # every command that takes the flag alike
    add_scene_format_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--aabb-scale", value])
    assert f"argument --aabb-scale: expected a power of two in [1, 128], got {shown}" in capsys.readouterr().err
    assert parser.parse_args(["--aabb-scale", "128"]).aabb_scale == 128
