"""The viewer's cameras and frames: a browser camera put where a training camera is renders that
camera; frame sizes keep the canvas's aspect; a frame rendered in bands equals ``ngptune render``'s
render of the whole camera; a saved view is a camera path that ``render`` reads back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainer.inference.cameras import path_cameras, read_camera_path, resize_cameras
from trainer.viewer.camera import ViewCamera, frame_size, view_camera_of_frame


def test_a_view_of_a_training_camera_is_that_camera(trained_run):
    from trainer.data import load_scene

    frame = load_scene(trained_run["scene"]).frames("train")[3]
    k = frame.intrinsics
    wxyz, position, fov_y = view_camera_of_frame(frame)
    assert np.linalg.norm(wxyz) == pytest.approx(1.0)
    view = ViewCamera(wxyz=tuple(wxyz), position=tuple(position), fov_y=fov_y, width=k.width, height=k.height)
    again = view.frame()
    np.testing.assert_allclose(again.c2w, frame.c2w, atol=1e-12)
    assert (again.intrinsics.width, again.intrinsics.height) == (k.width, k.height)
    assert again.intrinsics.fy == pytest.approx(k.fy) and again.intrinsics.fx == pytest.approx(k.fy)
    assert (again.intrinsics.cx, again.intrinsics.cy) == (k.width / 2, k.height / 2)
    # a smaller frame of the same view covers the same field of view
    half = view.frame(k.width // 2, k.height // 2)
    assert half.intrinsics.fy == pytest.approx(k.fy / 2)


def test_opencv_camera_axes_are_the_trainer_s_opengl_axes_flipped():
    # looking along world -z with y up (OpenGL identity) is, in OpenCV axes, a half turn about x
    view = ViewCamera(wxyz=(0.0, 1.0, 0.0, 0.0), position=(1.0, 2.0, 3.0), fov_y=1.0, width=4, height=3)
    np.testing.assert_allclose(view.frame().c2w, [[1, 0, 0, 1], [0, 1, 0, 2], [0, 0, 1, 3], [0, 0, 0, 1]], atol=1e-12)


@pytest.mark.parametrize("canvas, max_side, max_pixels, expected", [
    ((1280, 720), None, None, (1280, 720)),
    ((1280, 720), 640, None, (640, 360)),
    ((1280, 720), 4096, None, (1280, 720)),  # never more than the canvas
    ((720, 1280), 640, None, (360, 640)),
    ((1280, 720), None, 1280 * 720 // 4, (640, 360)),
    ((1280, 720), 1920, 100, (13, 7)),
    ((3, 1), None, 1, (1, 1)),
])
def test_frame_size_keeps_the_canvas_aspect_within_the_caps(canvas, max_side, max_pixels, expected):
    assert frame_size(*canvas, max_side=max_side, max_pixels=max_pixels) == expected


@pytest.mark.parametrize("args", [(0, 10), (10, 10, 0), (10, 10, None, 0)])
def test_frame_size_refuses_no_pixels(args):
    with pytest.raises(ValueError):
        frame_size(*args)


@pytest.mark.parametrize("mode", ["rgb", "depth", "opacity"])
def test_a_frame_rendered_in_bands_is_the_render_of_the_whole_camera(trained_run, mode):
    from trainer.inference.loading import load_model
    from trainer.inference.outputs import depth_preview, to_uint8
    from trainer.inference.render_views import render_camera
    from trainer.viewer.frames import BandedFrame, FrameRequest

    model = load_model(trained_run["run"])
    try:
        frame = resize_cameras(model.scene.frames("test")[:1], 14, 10)[0]
        request = FrameRequest(frame=frame, mode=mode, background=(0.2, 0.4, 0.6))
        banded = BandedFrame(model, request, band_rays=3 * 14)  # 3 rows per band: 4 bands
        bands = 0
        while not banded.done:
            banded.render_band()
            bands += 1
        assert bands == 4
        whole = render_camera(model, frame, torch.tensor([0.2, 0.4, 0.6]), with_depth=True)
    finally:
        model.close()
    expected = {"rgb": to_uint8(whole.rgb), "depth": depth_preview(whole.depth),
                "opacity": np.repeat(to_uint8(whole.opacity)[..., None], 3, axis=-1)}[mode]
    image = banded.image()
    assert image.shape == (10, 14, 3) and image.dtype == np.uint8
    assert np.abs(image.astype(int) - expected.astype(int)).max() <= 1
    assert image.std() > 0  # the model shows something


def test_a_saved_view_is_a_camera_path_that_render_reads_back(trained_run, tmp_path):
    from trainer.data import load_scene
    from trainer.inference.cameras import nerfstudio_camera_path

    scene = load_scene(trained_run["scene"])
    frame = resize_cameras(scene.frames("train")[5:6], 40, 24)[0]
    path = tmp_path / "view.json"
    path.write_text(json.dumps(nerfstudio_camera_path([frame], scene)))
    camera_path = read_camera_path(path, scene)
    assert (camera_path.width, camera_path.height, camera_path.fps, camera_path.seconds) == (40, 24, 1.0, 1.0)
    again = path_cameras(camera_path, 1, 40, 24)[0]
    np.testing.assert_allclose(again.c2w, frame.c2w, atol=1e-9)
    assert again.intrinsics.fy == pytest.approx(frame.intrinsics.fy)
