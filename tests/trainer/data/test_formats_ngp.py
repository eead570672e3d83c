"""instant-ngp transforms.json loader: intrinsics, paths, splits, missing files and bad input."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest

from tests.support.scene_formats import (
    RING_FOCAL,
    RING_HEIGHT,
    RING_WIDTH,
    ring_c2w,
    write_image,
    write_json,
    write_ngp,
)
from trainer.data import SceneError, SkippedFrame, load_scene
from trainer.data.formats import ngp
from trainer.data.options import SceneOptions


def frame(file_path: str, i: int = 0, **extra: object) -> dict:
    return {"file_path": file_path, "transform_matrix": ring_c2w()[i % 8].tolist(), **extra}


def scene_json(tmp_path, frames: list[dict], images: list[str] | None = None, **root: object):
    """transforms.json in tmp_path with the given frames; writes ``images`` (default: every file_path)."""
    for name in images if images is not None else [f["file_path"] for f in frames]:
        write_image(tmp_path / name)
    data = {"camera_angle_x": 2 * math.atan(RING_WIDTH / (2 * RING_FOCAL)), "frames": frames, **root}
    write_json(tmp_path / "transforms.json", data)
    return tmp_path / "transforms.json"


def test_file_or_folder_give_the_same_scene(tmp_path) -> None:
    path = write_ngp(tmp_path, ring_c2w(), aabb_scale=8)
    a = load_scene(path)
    b = load_scene(tmp_path)
    assert a.format == b.format == "instant-ngp"
    assert a.aabb_scale == 8
    assert [f.name for f in a.frames("train")] == [f.name for f in b.frames("train")]
    np.testing.assert_array_equal(a.aabb, [[-3.5] * 3, [4.5] * 3])


def test_root_intrinsics_floats_and_distortion(tmp_path) -> None:
    path = write_ngp(
        tmp_path,
        ring_c2w()[:2],
        cx=19.5,
        cy=14.25,
        k1=0.1,
        k2=-0.02,
        p1=0.001,
        p2=-0.002,
        k3=0.003,
        k4=0.0004,
    )
    frame0 = load_scene(path, holdout_every=0).frames("train")[0]
    intr = frame0.intrinsics
    assert (intr.width, intr.height, intr.fx, intr.fy, intr.cx, intr.cy) == (
        RING_WIDTH,
        RING_HEIGHT,
        50.0,
        50.0,
        19.5,
        14.25,
    )
    assert intr.distortion == (0.1, -0.02, 0.001, -0.002, 0.003, 0.0004)
    assert frame0.sharpness is None


def test_per_frame_intrinsics_that_differ_are_honoured(tmp_path) -> None:
    frames = [
        frame("a.png", 0, fl_x=40.0, fl_y=41.0, cx=18.0, cy=14.0, k1=0.2),
        frame("b.png", 1),  # root values
        frame("c.png", 2, camera_angle_x=2 * math.atan(RING_WIDTH / (2 * 80.0))),  # focal only
    ]
    path = scene_json(tmp_path, frames, fl_x=50.0, fl_y=52.0, cx=20.0, cy=15.0, k1=0.01)
    a, b, c = load_scene(path, holdout_every=0).frames("train")
    assert (a.intrinsics.fx, a.intrinsics.fy, a.intrinsics.cx, a.intrinsics.cy, a.intrinsics.k1) == (
        40.0,
        41.0,
        18.0,
        14.0,
        0.2,
    )
    assert (b.intrinsics.fx, b.intrinsics.fy, b.intrinsics.cx, b.intrinsics.cy, b.intrinsics.k1) == (
        50.0,
        52.0,
        20.0,
        15.0,
        0.01,
    )
    # A frame's focal keys replace the root's focal lengths as a whole (fy = fx here); its other
    # lens keys come from the root.
    assert c.intrinsics.fx == pytest.approx(80.0) and c.intrinsics.fy == pytest.approx(80.0)
    assert (c.intrinsics.cx, c.intrinsics.k1) == (20.0, 0.01)


def test_only_camera_angle_x(tmp_path) -> None:
    angle = 0.6911112070083618
    path = scene_json(tmp_path, [frame("img.png")], camera_angle_x=angle)
    intr = load_scene(path).frames("test")[0].intrinsics
    expected = 0.5 * RING_WIDTH / math.tan(0.5 * angle)
    assert intr.fx == pytest.approx(expected, rel=1e-12)
    assert intr.fy == intr.fx
    assert (intr.cx, intr.cy) == (RING_WIDTH / 2, RING_HEIGHT / 2)


def test_camera_angle_y_and_fov_degrees(tmp_path) -> None:
    write_image(tmp_path / "img.png")
    write_json(
        tmp_path / "transforms.json", {"camera_angle_y": math.radians(90.0), "frames": [frame("img.png")]}
    )
    intr = load_scene(tmp_path).frames("test")[0].intrinsics
    assert intr.fx == pytest.approx(RING_HEIGHT / 2) and intr.fy == pytest.approx(RING_HEIGHT / 2)
    write_json(tmp_path / "transforms.json", {"x_fov": 90.0, "fl_y": 33.0, "frames": [frame("img.png")]})
    intr = load_scene(tmp_path).frames("test")[0].intrinsics
    assert (intr.fx, intr.fy) == (pytest.approx(RING_WIDTH / 2), 33.0)


def test_file_path_forms(tmp_path) -> None:
    frames = [
        frame("images/no_ext", 0),
        frame("./images/dot_slash.png", 1),
        frame("./images/both", 2),
        frame("images\\windows.png", 3),
    ]
    for name in ("images/no_ext.png", "images/dot_slash.png", "images/both.jpg", "images/windows.png"):
        write_image(tmp_path / "scene" / name)
    (tmp_path / "scene" / "images" / "both.jpg").write_bytes(
        (tmp_path / "scene" / "images" / "both.jpg").read_bytes()
    )
    path = scene_json(tmp_path / "scene", frames, images=[])
    got = {f.name: f.image_path for f in load_scene(path, holdout_every=0).frames("train")}
    base = (tmp_path / "scene" / "images").absolute()
    assert got == {
        "images/no_ext": base / "no_ext.png",
        "./images/dot_slash.png": base / "dot_slash.png",
        "./images/both": base / "both.jpg",
        "images\\windows.png": base / "windows.png",
    }


def test_exr_is_rejected_clearly(tmp_path) -> None:
    (tmp_path / "img.exr").write_bytes(b"v/1\x01")
    path = scene_json(tmp_path, [frame("img")], images=[])
    with pytest.raises(
        SceneError, match=r"frames\[0\] \('img'\): .*img\.exr: EXR/HDR images are not supported"
    ):
        load_scene(path)


def test_natural_sort_and_holdout(tmp_path) -> None:
    names = [f"img{i}.png" for i in (10, 2, 1, 33, 3, 20, 100, 9, 11)]
    path = scene_json(tmp_path, [frame(n, i) for i, n in enumerate(names)])
    scene = load_scene(path, holdout_every=4)
    ordered = [
        "img1.png",
        "img2.png",
        "img3.png",
        "img9.png",
        "img10.png",
        "img11.png",
        "img20.png",
        "img33.png",
        "img100.png",
    ]
    assert [f.name for f in scene.frames("test")] == ordered[0::4]
    assert [f.name for f in scene.frames("train")] == [n for i, n in enumerate(ordered) if i % 4]
    # every frame keeps its own pose after sorting: img10.png was written with ring camera 0
    img10 = next(f for f in scene.frames("test") if f.name == "img10.png")
    np.testing.assert_allclose(img10.c2w[:3, 3], (ring_c2w()[0][:3, 3] * 0.33 + 0.5)[[1, 2, 0]])
    all_train = load_scene(path, holdout_every=0)
    assert all_train.split_counts == {"train": 9, "test": 0}


def test_scale_offset_and_aabb_keys(tmp_path) -> None:
    c2w = np.eye(4)
    c2w[:3, 3] = (1.0, 2.0, 3.0)
    frames = [{"file_path": "img.png", "transform_matrix": c2w.tolist()}]
    path = scene_json(tmp_path, frames, scale=0.5, offset=[0.1, 0.2, 0.3])
    got = load_scene(path).frames("test")[0].c2w
    np.testing.assert_allclose(got[:3, 3], [1.2, 1.8, 0.6])  # cycle((0.6, 1.2, 1.8))
    write_json(
        tmp_path / "transforms.json", {"camera_angle_x": 1.0, "frames": frames, "offset": 0.0, "scale": 1.0}
    )
    np.testing.assert_allclose(load_scene(path).frames("test")[0].c2w[:3, 3], [2.0, 3.0, 1.0])
    # aabb [[-1,-1,-1],[3,1,1]]: longest side 4 -> scale 0.25, centre (1,0,0) -> offset (0.25, 0.5, 0.5)
    write_json(
        tmp_path / "transforms.json",
        {"camera_angle_x": 1.0, "frames": frames, "aabb": [[-1, -1, -1], [3, 1, 1]]},
    )
    np.testing.assert_allclose(load_scene(path).frames("test")[0].c2w[:3, 3], [1.0, 1.25, 0.5])


def test_downscale_scales_intrinsics(tmp_path) -> None:
    path = write_ngp(tmp_path, ring_c2w()[:1], cx=21.0)
    scene = load_scene(path, downscale=4)
    intr = scene.frames("test")[0].intrinsics
    assert scene.downscale == 4
    assert (intr.width, intr.height, intr.fx, intr.cx, intr.cy) == (10, 7, 12.5, 5.25, 3.75)


def test_image_smaller_than_w_h_scales_intrinsics_with_a_note(tmp_path) -> None:
    path = write_ngp(tmp_path, ring_c2w()[:1], w=80.0, h=60.0, fl_x=100.0, fl_y=100.0, cx=40.0, cy=30.0)
    scene = load_scene(path)
    intr = scene.frames("test")[0].intrinsics
    assert (intr.width, intr.height, intr.fx, intr.cx) == (40, 30, 50.0, 20.0)
    assert any("differ in size" in n for n in scene.notes)
    write_json(path, {**json.loads(path.read_text()), "w": 80.0, "h": 30.0})
    with pytest.raises(SceneError, match=r"frames\[0\] \('images/000.png'\): image is 40x30 .* 80x30"):
        load_scene(path)


# --- missing files -----------------------------------------------------------------------------


def five_frames(tmp_path, sharpness: bool):
    extra = [{"sharpness": 10.0 + i} if sharpness else {} for i in range(5)]
    frames = [frame(f"images/{i:04d}.png", i, **extra[i]) for i in range(5)]
    return scene_json(tmp_path, frames, images=[f"images/{i:04d}.png" for i in (0, 2, 4)])


def test_missing_images_with_sharpness_are_skipped_with_one_warning(tmp_path) -> None:
    path = five_frames(tmp_path, sharpness=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_scene(path, holdout_every=0)
    assert len(caught) == 1
    assert "images/0001.png" in str(caught[0].message) and "images/0003.png" in str(caught[0].message)
    assert [f.name for f in scene.frames("train")] == [
        "images/0000.png",
        "images/0002.png",
        "images/0004.png",
    ]
    assert [f.sharpness for f in scene.frames("train")] == [10.0, 12.0, 14.0]
    assert scene.skipped == [
        SkippedFrame("images/0001.png", f"image file not found: {tmp_path / 'images/0001.png'}"),
        SkippedFrame("images/0003.png", f"image file not found: {tmp_path / 'images/0003.png'}"),
    ]


def test_missing_images_without_sharpness_is_one_error_listing_both(tmp_path) -> None:
    path = five_frames(tmp_path, sharpness=False)
    with pytest.raises(SceneError) as err:
        load_scene(path)
    message = str(err.value)
    assert message.startswith(f"{path}: 2 image file(s) not found")
    assert "images/0001.png, images/0003.png" in message
    assert "\n" not in message


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_transform_matrix_names_the_frame(tmp_path, token: str) -> None:
    frames = [frame("a.png", 0), frame("b.png", 1)]
    path = scene_json(tmp_path, frames)
    text = path.read_text()
    # replace the first entry of b.png's matrix by the raw JSON token
    value = repr(float(ring_c2w()[1][0][0]))
    b_start = text.index('"b.png"')
    at = text.index(value, b_start)
    path.write_text(text[:at] + token + text[at + len(value) :])
    with pytest.raises(
        SceneError,
        match=rf"^{re.escape(str(path))}: frames\[1\] \('b.png'\): transform_matrix contains -?(nan|inf)",
    ):
        load_scene(path)


@pytest.mark.parametrize("value", [3, 0, -1, 256, "16", 2.5, True])
def test_bad_aabb_scale_is_rejected(tmp_path, value: object) -> None:
    path = scene_json(tmp_path, [frame("a.png")], aabb_scale=value)
    with pytest.raises(
        SceneError,
        match=rf"^{re.escape(str(path))}: aabb_scale must be a power of two in 1..128, "
        rf"got {re.escape(repr(value))}$",
    ):
        load_scene(path)


def test_aabb_scale_option_overrides_the_file(tmp_path) -> None:
    path = scene_json(tmp_path, [frame("a.png")], aabb_scale=4)
    assert load_scene(path).aabb_scale == 4
    assert load_scene(path, aabb_scale=32).aabb_scale == 32
    assert ngp.load(path, SceneOptions(aabb_scale=2)).aabb_scale == 2


def test_empty_frames_list(tmp_path) -> None:
    path = scene_json(tmp_path, [])
    with pytest.raises(SceneError, match=rf"^{re.escape(str(path))}: frames: the list is empty$"):
        load_scene(path)


def test_json_syntax_error_has_line_and_column(tmp_path) -> None:
    path = tmp_path / "transforms.json"
    path.write_text('{\n  "camera_angle_x": 0.7,\n  "frames": [\n    {"file_path": "a.png",}\n  ]\n}\n')
    with pytest.raises(SceneError, match=rf"^{re.escape(str(path))}:4:27: JSON syntax error: "):
        load_scene(path)


@pytest.mark.parametrize(
    ("matrix", "shape"),
    [
        (np.eye(4)[:3].tolist(), "3x4"),
        (np.eye(3).tolist(), "3x3"),
        ([[1, 0, 0, 0], [0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 1]], "4 rows of lengths [4, 3, 4, 4]"),
        (np.eye(4).reshape(-1).tolist(), "16 rows of lengths"),
    ],
)
def test_transform_matrix_not_4x4(tmp_path, matrix: list, shape: str) -> None:
    path = scene_json(tmp_path, [frame("a.png"), {"file_path": "b.png", "transform_matrix": matrix}])
    with pytest.raises(
        SceneError,
        match=rf"frames\[1\] \('b.png'\): transform_matrix must be a 4x4 matrix, got {re.escape(shape)}",
    ):
        load_scene(path)


@pytest.mark.parametrize(
    ("root", "frame_extra", "message"),
    [
        ({"fl_x": "50"}, {}, r"transforms.json: fl_x: expected a positive finite number, got '50'$"),
        ({}, {"fl_y": -5.0}, r"frames\[0\] \('a.png'\): fl_y: expected a positive finite number, got -5.0$"),
        ({}, {"cx": None}, r"frames\[0\] \('a.png'\): cx: expected a finite number, got None"),
        ({"w": 40.5}, {}, r"transforms.json: w: expected a whole number of pixels, got 40.5$"),
        ({}, {"h": 0}, r"frames\[0\] \('a.png'\): h: expected a positive finite number, got 0$"),
        ({"scale": 0}, {}, r"transforms.json: scale: expected a positive finite number, got 0"),
        ({"offset": [0.5, 0.5]}, {}, r"transforms.json: offset: expected 3 numbers, got 2"),
        ({"camera_angle_x": 4.0}, {}, r"camera_angle_x: field of view must be below 180 degrees"),
        ({"is_fisheye": True}, {}, r"is_fisheye: fisheye lenses are not supported"),
    ],
)
def test_bad_values_name_the_key(tmp_path, root: dict, frame_extra: dict, message: str) -> None:
    path = scene_json(tmp_path, [frame("a.png", 0, **frame_extra)], **root)
    with pytest.raises(SceneError, match=message):
        load_scene(path)


def test_no_focal_length(tmp_path) -> None:
    write_image(tmp_path / "a.png")
    write_json(tmp_path / "transforms.json", {"frames": [frame("a.png")]})
    with pytest.raises(SceneError, match=r"frames\[0\] \('a.png'\): no focal length"):
        load_scene(tmp_path)


def test_structure_errors(tmp_path) -> None:
    write_json(tmp_path / "transforms.json", [1, 2])
    with pytest.raises(SceneError, match="expected a JSON object at the top level, got list"):
        load_scene(tmp_path)
    write_json(tmp_path / "transforms.json", {"camera_angle_x": 1.0})
    with pytest.raises(SceneError, match="frames: key missing"):
        load_scene(tmp_path)
    write_json(
        tmp_path / "transforms.json",
        {"camera_angle_x": 1.0, "frames": [{"transform_matrix": np.eye(4).tolist()}]},
    )
    with pytest.raises(SceneError, match=r"frames\[0\].file_path: expected a non-empty string, got None"):
        load_scene(tmp_path)
    write_json(tmp_path / "transforms.json", {"camera_angle_x": 1.0, "frames": [{"file_path": "a.png"}]})
    with pytest.raises(SceneError, match=r"frames\[0\] \('a.png'\): transform_matrix: key missing"):
        load_scene(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SceneError, match="no transforms.json in this folder"):
        ngp.load(tmp_path / "empty", SceneOptions())


def test_unreadable_image_is_one_scene_error(tmp_path) -> None:
    (tmp_path / "a.png").write_bytes(b"not a png")
    path = scene_json(tmp_path, [frame("a.png")], images=[])
    with pytest.raises(SceneError, match=r"a.png: not a readable image"):
        load_scene(path)


def test_natural_sort_key() -> None:
    names = ["b10", "a2", "b2", "a10", "a1b3", "a1b12", "a"]
    assert sorted(names, key=ngp.natural_sort_key) == ["a", "a1b3", "a1b12", "a2", "a10", "b2", "b10"]
