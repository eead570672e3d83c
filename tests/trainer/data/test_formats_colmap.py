"""COLMAP loader (pycolmap): text and binary models, camera models, model choice, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tests.support.scene_formats import (
    RING_FOCAL,
    RING_HEIGHT,
    RING_WIDTH,
    ring_c2w,
    write_colmap_scene,
    write_colmap_text,
    write_image,
)
from trainer.data import SceneError, load_scene
from trainer.data.formats import colmap
from trainer.data.options import SceneOptions


def expected_cube(ring: np.ndarray) -> np.ndarray:
    out = ring.copy()
    out[:, :3, 3] = (ring[:, :3, 3] * 0.33 + 0.5)[:, [1, 2, 0]]
    out[:, :3, :3] = ring[:, [1, 2, 0], :3]
    return out


def moved(ring: np.ndarray) -> np.ndarray:
    """The ring in another world: tilted 40 deg about x, scaled by 3, shifted."""
    angle = math.radians(40.0)
    tilt = np.array(
        [[1, 0, 0], [0, math.cos(angle), -math.sin(angle)], [0, math.sin(angle), math.cos(angle)]]
    )
    out = ring.copy()
    out[:, :3, :3] = tilt @ ring[:, :3, :3]
    out[:, :3, 3] = 3.0 * ring[:, :3, 3] @ tilt.T + (-1.0, 2.0, 0.5)
    return out


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_capture_in_another_world_is_normalised(tmp_path, binary: bool) -> None:
    ring = ring_c2w()
    write_colmap_scene(tmp_path, moved(ring), binary=binary)
    scene = load_scene(tmp_path, holdout_every=4)
    assert scene.format == "colmap"
    assert scene.aabb_scale == 16
    assert scene.split_counts == {"train": 6, "test": 2}
    assert [f.name for f in scene.frames("test")] == ["frame_0.png", "frame_4.png"]
    np.testing.assert_allclose(
        np.stack([f.c2w for f in scene.frames("test")]), expected_cube(ring[[0, 4]]), atol=1e-6
    )
    assert scene.notes[0] == "colmap: using sparse/0 (8 registered images)"
    assert scene.notes[1] == "colmap: 8 of 8 images registered in 0"
    assert scene.notes[3].startswith("colmap: poses normalised like colmap2nerf: up rotated to +z by 40 deg")


def test_model_with_most_registered_images_is_chosen(tmp_path) -> None:
    ring = ring_c2w()
    write_colmap_scene(tmp_path, ring)  # sparse/0: 8 images
    write_colmap_text(tmp_path / "sparse" / "1", ring[:3], [f"frame_{i}.png" for i in range(3)])
    write_colmap_text(tmp_path / "sparse" / "2", ring[:5], [f"frame_{i}.png" for i in range(5)])
    scene = load_scene(tmp_path, holdout_every=0)
    assert scene.notes[0] == "colmap: using sparse/0 (8 registered images; sparse/1 has 3, sparse/2 has 5)"
    assert len(scene.frames("train")) == 8

    # Swap roles: the larger model in sparse/1.
    other = tmp_path / "other"
    write_colmap_scene(other, ring[:2], model_name="0")
    write_colmap_scene(other, ring, model_name="1", binary=True)
    scene = load_scene(other, holdout_every=0)
    assert scene.notes[0] == "colmap: using sparse/1 (8 registered images; sparse/0 has 2)"


def test_model_folder_given_directly(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w())
    scene = colmap.load(tmp_path / "sparse" / "0", SceneOptions(holdout_every=0))
    assert scene.root == tmp_path
    assert len(scene.frames("train")) == 8


def test_camera_models_one_camera_per_image(tmp_path) -> None:
    ring = ring_c2w(n=5)
    names = [f"frame_{i}.png" for i in range(5)]
    for name in names:
        write_image(tmp_path / "images" / name)
    cameras = [
        "SIMPLE_PINHOLE 40 30 45 19 14",
        "PINHOLE 40 30 45 46 19 14",
        "SIMPLE_RADIAL 40 30 45 19 14 0.01",
        "RADIAL 40 30 45 19 14 0.01 -0.002",
        "OPENCV 40 30 45 46 19 14 0.01 -0.002 0.0003 -0.0004",
    ]
    write_colmap_text(tmp_path / "sparse" / "0", ring, names, cameras=cameras, camera_ids=[1, 2, 3, 4, 5])
    frames = load_scene(tmp_path, holdout_every=0).frames("train")
    got = [
        (f.intrinsics.fx, f.intrinsics.fy, f.intrinsics.cx, f.intrinsics.cy, *f.intrinsics.distortion)
        for f in frames
    ]
    assert got == [
        (45, 45, 19, 14, 0, 0, 0, 0, 0, 0),
        (45, 46, 19, 14, 0, 0, 0, 0, 0, 0),
        (45, 45, 19, 14, 0.01, 0, 0, 0, 0, 0),
        (45, 45, 19, 14, 0.01, -0.002, 0, 0, 0, 0),
        (45, 46, 19, 14, 0.01, -0.002, 0.0003, -0.0004, 0, 0),
    ]
    assert all((f.intrinsics.width, f.intrinsics.height) == (40, 30) for f in frames)


@pytest.mark.parametrize(
    "model", ["OPENCV_FISHEYE 40 30 45 46 19 14 0 0 0 0", "FULL_OPENCV 40 30 45 46 19 14 0 0 0 0 0 0 0 0"]
)
def test_unsupported_camera_model_is_named(tmp_path, model: str) -> None:
    write_colmap_scene(tmp_path, ring_c2w(n=2))
    write_colmap_text(
        tmp_path / "sparse" / "0", ring_c2w(n=2), ["frame_0.png", "frame_1.png"], cameras=[model]
    )
    name = model.split()[0]
    with pytest.raises(
        SceneError, match=rf"image frame_0.png \(camera 1\): camera model {name} is not supported"
    ):
        load_scene(tmp_path)


def test_unknown_camera_model_in_text_is_named(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w(n=2))
    write_colmap_text(
        tmp_path / "sparse" / "0",
        ring_c2w(n=2),
        ["frame_0.png", "frame_1.png"],
        cameras=["FANCY 40 30 1 2 3"],
    )
    with pytest.raises(
        SceneError, match=r"sparse/0: cannot read COLMAP model: camera 1: unknown camera model FANCY$"
    ):
        load_scene(tmp_path)


def test_missing_images_listed(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w())
    (tmp_path / "images" / "frame_2.png").unlink()
    (tmp_path / "images" / "frame_6.png").unlink()
    with pytest.raises(
        SceneError,
        match=rf"^{re.escape(str(tmp_path / 'images'))}: "
        r"2 image file\(s\) of the COLMAP model not found: frame_2.png, frame_6.png$",
    ):
        load_scene(tmp_path)


def test_resized_images_and_downscale(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w(n=2))
    for i in range(2):
        write_image(tmp_path / "images" / f"frame_{i}.png", RING_WIDTH * 2, RING_HEIGHT * 2)
    scene = load_scene(tmp_path, downscale=4, holdout_every=0)
    intr = scene.frames("train")[0].intrinsics
    # images are 80x60 (calibration 40x30 scaled by 2), then decoded at a quarter: 20x15
    assert (intr.width, intr.height, intr.fx, intr.cx, intr.cy) == (20, 15, RING_FOCAL / 2, 10.0, 7.5)
    assert (
        "colmap: 2 image(s) differ in size from their camera; intrinsics scaled to the files" in scene.notes
    )


def test_broken_models(tmp_path) -> None:
    write_colmap_scene(tmp_path, ring_c2w(n=2), binary=True)
    images_bin = tmp_path / "sparse" / "0" / "images.bin"
    images_bin.write_bytes(images_bin.read_bytes()[:30])
    with pytest.raises(SceneError, match=r"sparse/0: cannot read COLMAP model: "):
        load_scene(tmp_path)
    (tmp_path / "sparse" / "0" / "points3D.bin").unlink()
    with pytest.raises(SceneError, match=r"sparse/0: COLMAP model file points3D.bin/.txt not found"):
        load_scene(tmp_path)
    empty = tmp_path / "empty"
    (empty / "sparse" / "0").mkdir(parents=True)
    with pytest.raises(SceneError, match=r"empty/sparse: no COLMAP model"):
        colmap.load(empty, SceneOptions())


def test_camera_intrinsics_validation() -> None:
    with pytest.raises(SceneError, match=r"^cam: camera model PINHOLE needs 4 parameters, got 3$"):
        colmap.camera_intrinsics("PINHOLE", 40, 30, np.array([1.0, 2.0, 3.0]), "cam")
    with pytest.raises(SceneError, match=r"^cam: focal lengths and image size must be positive"):
        colmap.camera_intrinsics("SIMPLE_PINHOLE", 40, 30, np.array([-1.0, 2.0, 3.0]), "cam")
    with pytest.raises(SceneError, match=r"^cam: camera parameters contain NaN/Infinity"):
        colmap.camera_intrinsics("SIMPLE_PINHOLE", 40, 30, np.array([np.nan, 2.0, 3.0]), "cam")


def test_binary_model_without_rigs_and_frames_files(tmp_path) -> None:
    # Models written by COLMAP before 3.12 have no rigs.bin / frames.bin.
    ring = ring_c2w()
    write_colmap_scene(tmp_path, ring, binary=True)
    for name in ("rigs.bin", "frames.bin"):
        (tmp_path / "sparse" / "0" / name).unlink()
    scene = load_scene(tmp_path, holdout_every=0)
    got = np.stack([f.c2w for f in scene.frames("train")])
    np.testing.assert_allclose(got, expected_cube(ring), atol=1e-6)


def test_loading_a_colmap_scene_keeps_the_processes_sigterm_handler(tmp_path):
    """pycolmap's import installs glog's SIGTERM handler (a C stack trace, then death); a render or
    run of a COLMAP scene must still stop on SIGTERM through its own handler."""
    import subprocess
    import sys

    from tests.support.paths import REPO

    scene = write_colmap_scene(tmp_path / "scene", ring_c2w(n=4))
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('stopped by our handler'), sys.exit(3)))\n"
        "from trainer.data import load_scene\n"
        f"load_scene({str(scene)!r})\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(5)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Aborted" not in done.stderr and "stack trace" not in done.stderr
    assert (done.returncode, done.stdout.strip()) == (3, "stopped by our handler")
