"""`render`: test views equal evaluation's, videos, depth, subgrid checkpoints, several ranks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from tests.support.cli import first_statement, run_inference_cli
from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.data.images import load_pixel_table
from trainer.inference.loading import load_model
from trainer.inference.render_views import render_camera
from trainer.metrics_image import psnr
from trainer.train.evaluate import ground_truth


def test_a_test_camera_renders_what_evaluate_scored(trained_run):
    model = load_model(trained_run["run"], device="cpu")
    try:
        scene = model.scene
        frames = scene.frames("test")
        table = load_pixel_table(frames[:2], downscale=scene.downscale)
        background = torch.ones(3)
        for position in range(2):
            view = render_camera(model, frames[position], background)
            _, gt = ground_truth(table, position, background)
            h, w = frames[position].intrinsics.height, frames[position].intrinsics.width
            ours = psnr(torch.from_numpy(view.rgb), gt.reshape(h, w, 3))
            assert abs(ours - trained_run["eval"]["images"][position]["psnr_db"]) < 1e-3
    finally:
        model.close()


def test_cli_writes_frames_and_depth_in_source_units(trained_run, tmp_path, capsys):
    out = tmp_path / "frames"
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--frames", "2", "--depth",
                               "--out", out, "--quiet"], capsys)
    assert code == 0 and "rendered 2 frames of 32x32" in stdout
    import cv2

    rgb = cv2.imread(str(out / "test_000.png"), cv2.IMREAD_UNCHANGED)
    depth = cv2.imread(str(out / "test_000_depth.png"), cv2.IMREAD_UNCHANGED)
    assert rgb.shape == (32, 32, 3) and depth.dtype == np.uint16 and depth.shape == (32, 32)
    scale = json.loads((out / "depth.json").read_text())["depth_scale"]
    hit = depth > 0
    # the demo cameras sit at radius 4 around objects within radius 1.3 (NeRF units): the surfaces
    # seen lie between 4 − 1.3 and 4 + 1.3 from the camera (a briefly trained model has a few
    # floaters nearer)
    distances = depth[hit] * scale
    assert hit.mean() > 0.2 and 3.0 < np.median(distances) < 5.0
    assert np.mean((distances > 2.7) & (distances < 5.3)) > 0.9
    assert (out / "test_000_depth_preview.png").is_file()
    assert not list(out.glob(".*"))  # no temp files left


def test_orbit_video_opens_with_the_requested_frames_and_size(trained_run, tmp_path, capsys):
    import imageio.v2 as imageio

    video = tmp_path / "orbit.mp4"
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "5", "--width", "24",
                               "--height", "16", "--video", video, "--quiet"], capsys)
    assert code == 0 and str(video) in stdout
    reader = imageio.get_reader(str(video), format="FFMPEG")
    try:
        frames = [frame for frame in reader]
        assert reader.get_meta_data()["codec"] == "h264"
    finally:
        reader.close()
    assert len(frames) == 5 and frames[0].shape == (16, 24, 3)
    assert not list(tmp_path.glob(".*partial*"))


def test_without_imageio_ffmpeg_opencv_writes_the_video(trained_run, tmp_path, capsys, monkeypatch):
    import cv2

    from trainer.inference import outputs

    def no_ffmpeg() -> str:
        raise outputs.VideoUnavailable("no ffmpeg binary (test)")

    monkeypatch.setattr(outputs, "_ffmpeg_exe", no_ffmpeg)
    video = tmp_path / "orbit.mp4"
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "4", "--width", "24",
                               "--height", "16", "--video", video, "--quiet"], capsys)
    assert code == 0 and str(video) in stdout
    capture = cv2.VideoCapture(str(video))
    try:
        frames = []
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(frame)
    finally:
        capture.release()
    assert len(frames) == 4 and frames[0].shape == (16, 24, 3)
    assert not list(tmp_path.glob(".*partial*"))


def test_subgrid_checkpoint_renders_through_segment_compositing(demo_scene, tmp_path):
    from trainer.data.rays import camera_rays_for_image
    from trainer.parallel.subgrid_train import SubgridTrainer
    from trainer.contract.rundir import RunDir
    from trainer.contract.config import config_to_dict

    cfg = tiny_config(parallel__mode="subgrid", parallel__num_subgrids=2, data__scene=str(demo_scene))
    run = RunDir(tmp_path / "run").create()
    trainer = SubgridTrainer(cfg, load_scene(demo_scene), run)
    trainer.train(n_steps=12)
    folder = trainer.save_checkpoint()
    run.write_json(run.config_path, config_to_dict(cfg))
    frame = trainer.scene.frames("test")[0]
    rays_o, rays_d = camera_rays_for_image(frame, "cpu")
    expected = trainer.render_rays(rays_o, rays_d, torch.ones(3)).reshape(32, 32, 3).clamp(0, 1)
    trainer.close()
    for source in (run.root, folder):
        model = load_model(source, device="cpu")
        assert model.mode == "subgrid" and model.step == 12
        view = render_camera(model, frame, torch.ones(3), with_depth=True)
        model.close()
        assert torch.allclose(torch.from_numpy(view.rgb), expected, atol=1e-6)
        assert np.all(np.isfinite(view.depth)) and view.depth.max() > 0
    from trainer.inference.pointcloud import extract_pointcloud

    model = load_model(run.root, device="cpu")  # a point cloud of it (its first batch's estimate probed one field)
    cloud = extract_pointcloud(model, n_points=20, min_opacity=0.01, min_views=0)
    model.close()
    assert cloud["rays"] > 0 and cloud["points"].shape[1] == 3 and np.all(np.isfinite(cloud["points"]))


@pytest.mark.slow
def test_two_ranks_render_the_frames_of_one_process(trained_run, tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["render", trained_run["run"], "--cameras", "orbit", "--frames", "3", "--width", "16", "--height", "16",
              "--spp", "2", "--device", "cpu", "--quiet"]
    assert run_inference_cli(common + ["--out", one], capsys)[0] == 0
    shown = [a for a in common if a != "--quiet"]  # rank 0's progress, repeated by the launching process
    code, stdout, _ = run_inference_cli(shown + ["--out", two, "--nproc-per-node", "2"], capsys)
    assert code == 0 and "(2 ranks)" in stdout
    assert "rank 0: render 2/2 " in stdout  # rank 0's frames 0 and 2: its last progress line
    first, n = first_statement(stdout)  # as one process opens, from rank 0
    assert first.startswith(f"rendering {trained_run['run']}/snapshots/step_0000080.pt (step 80) with 2 ranks on cpu, ")
    assert first.endswith(": 3 frames of orbit of 16x16, spp 2"), first
    import cv2

    for i in range(3):
        a = cv2.imread(str(one / f"{i:05d}.png"))
        b = cv2.imread(str(two / f"{i:05d}.png"))
        assert a is not None and np.array_equal(a, b)


def _on_the_third_frame(monkeypatch, action) -> None:
    """Make ``action()`` happen as the render starts its third frame."""
    from trainer.inference import render_views

    calls = []
    real = render_views.render_camera

    def render_camera(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(render_views, "render_camera", render_camera)


def test_ctrl_c_during_a_render_keeps_the_finished_frames_and_writes_no_video(trained_run, tmp_path, capsys,
                                                                               monkeypatch):
    def interrupt():
        raise KeyboardInterrupt

    _on_the_third_frame(monkeypatch, interrupt)
    frames, video = tmp_path / "frames", tmp_path / "orbit.mp4"
    code, stdout, err = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "5", "--width", "16",
                                 "--height", "16", "--video", video, "--out", frames, "--quiet"], capsys)
    assert code == 130 and stdout.startswith("rendering")
    n = first_statement(stdout)[1]  # the first statement, then what the orbit sweeps, and no summary
    assert stdout.splitlines()[n:] == ["5 frames of orbit (a full circle) of 16x16, spp 1"]
    assert all(len(line) <= 80 for line in err.splitlines() if str(frames) not in line), err
    assert first_statement(err) == (f"interrupted: render stopped after 2 of 5 frames; no video written; the 2 frames "
                                    f"(00000.png to 00001.png) kept in {frames}", err.count("\n"))
    assert sorted(p.name for p in frames.iterdir()) == ["00000.png", "00001.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frames"]  # no video, no temporary file


def test_a_video_the_encoder_left_unplayable_is_removed_and_named(tmp_path):
    """ffmpeg cannot put H.264 into WebM: it leaves a header-only file; the check before the
    rename refuses it and removes the temporary file."""
    from trainer.contract.errors import ConfigError
    from trainer.inference.outputs import VideoFile

    video = VideoFile(tmp_path / "clip.webm", 30.0)
    for shade in (0, 128):
        video.append(np.full((16, 16, 3), shade, dtype=np.uint8))
    with pytest.raises(ConfigError, match=r"^--video .*clip\.webm: the encoder left no playable video \(OpenCV reads 0 "
                                          r"frame\(s\), first frame unreadable\); nothing was written$"):
        video.close()
    assert not list(tmp_path.iterdir())


def test_sigterm_during_a_video_render_says_so_and_leaves_no_temporary_file(trained_run, tmp_path, capsys,
                                                                             monkeypatch):
    import os
    import signal

    def unhandled(signum, frame):  # the render must handle SIGTERM itself (else this test's process would die)
        raise AssertionError("SIGTERM reached the caller: the render did not handle it")

    _on_the_third_frame(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))  # a scheduler or `kill`
    video = tmp_path / "orbit.mp4"
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        code, stdout, err = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "5", "--width",
                                     "16", "--height", "16", "--video", video, "--quiet"], capsys)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # the render put the caller's handler back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert code == 143 and stdout.startswith("rendering")
    n = first_statement(stdout)[1]  # the first statement, then what the orbit sweeps, and no summary
    assert stdout.splitlines()[n:] == ["5 frames of orbit (a full circle) of 16x16, spp 1"]
    assert err.startswith("terminated (SIGTERM): render stopped after ") and "no video written" in err
    assert first_statement(err)[1] == err.count("\n")  # one statement
    assert list(tmp_path.iterdir()) == []  # no video, no hidden .orbit.partial.mp4


def test_rendered_view_moves_host_copies_on_demand_and_rounds_as_to_uint8():
    from trainer.inference.outputs import to_uint8
    from trainer.inference.render_views import RenderedView

    generator = torch.Generator().manual_seed(5)
    rgb = torch.rand(16, 9, 3, generator=generator)
    # values on and either side of every rounding boundary k/255 - 0.5/255, and the ends
    edges = (torch.arange(256, dtype=torch.float32) - 0.5) / 255.0
    rgb.view(-1)[:256] = edges
    rgb.view(-1)[1:256:3] = torch.nextafter(edges[1:256:3], torch.tensor(2.0))
    rgb.view(-1)[2:256:3] = torch.nextafter(edges[2:256:3], torch.tensor(-1.0))
    rgb = rgb.clamp(0.0, 1.0)
    opacity, depth = torch.rand(16, 9, generator=generator), torch.rand(16, 9, generator=generator)
    view = RenderedView(rgb, opacity, depth)
    assert "rgb" not in view.__dict__ and "depth" not in view.__dict__  # nothing copied yet
    assert view.rgb8.dtype == np.uint8 and view.rgb8.shape == (16, 9, 3)
    assert np.array_equal(view.rgb8, to_uint8(rgb.numpy()))
    assert "rgb" not in view.__dict__  # the 8-bit colour alone was moved
    assert np.array_equal(view.rgb, rgb.numpy()) and np.array_equal(view.depth, depth.numpy())
    assert view.opacity is view.opacity  # one copy, kept


def test_a_render_gives_its_time_left_from_the_rays_before_its_first_frame_ends(trained_run, tmp_path, capsys,
                                                                                monkeypatch):
    """The progress counts a frame's rays chunk by chunk (2^11 rays on a CPU): one 96×64 frame
    shows its rate and time left after each of its 3 chunks, before the frame is done."""
    import re

    import trainer.inference.progress as progress_module

    monkeypatch.setattr(progress_module, "PLAIN_LINE_EVERY_S", 0.0)  # a line at every advance
    code, _, err = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "1",
                                      "--width", "96", "--height", "64", "--out", tmp_path / "frames"], capsys)
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("render ")]
    within = [line for line in lines if re.fullmatch(r"render 0/1  [0-9.]+( [kM])? rays/s  eta \d+:\d\d", line)]
    assert len(within) == 3, lines  # 2048 + 2048 + 2048 rays, each with a time left
    assert re.fullmatch(r"render 1/1  [0-9.]+( [kM])? rays/s  eta 0:00", lines[-1]), lines


def test_a_progress_with_its_items_known_gives_the_time_left_from_them(capsys, monkeypatch):
    import trainer.inference.progress as progress_module
    from trainer.inference.progress import Progress

    now = [50.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    counter = Progress("render", 2, quiet=True, total_items=40_000)
    assert counter.eta_text() == "-:--"
    now[0] = 60.0  # 10 000 rays of the first frame in 10 s: 30 000 more to go
    counter.advance(0, 10_000)
    assert counter.eta_text() == "0:30"
    now[0] = 80.0
    counter.advance(1, 10_000)
    counter.advance(1, 20_000)
    assert counter.eta_text() == "0:00"


def test_downscale_shrinks_the_size_asked_for_with_width_and_height(trained_run, tmp_path, capsys):
    """The long-render warning offers --downscale N; with --width/--height given it divides them."""
    from trainer.inference.cameras import resize_cameras

    model = load_model(trained_run["run"], device="cpu")
    try:
        frame = model.scene.frames("train")[0]
        small = resize_cameras([frame], 1920, 1080, 8)[0].intrinsics
        assert (small.width, small.height) == (240, 135)
        assert small.fx == pytest.approx(frame.intrinsics.fx * 240 / frame.intrinsics.width)
    finally:
        model.close()
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "1",
                                         "--width", "64", "--height", "48", "--downscale", "4", "--out",
                                         tmp_path / "frames", "--quiet"], capsys)
    assert code == 0 and "rendered 1 frame of 16x12" in stdout, stdout


def test_more_frames_than_the_split_has_render_all_of_them_and_say_so(trained_run, tmp_path, capsys):
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--frames", "1000",
                                         "--out", tmp_path / "frames", "--quiet"], capsys)
    n = len(load_scene(trained_run["scene"]).frames("test"))
    assert code == 0 and f"rendered {n} frames of 32x32" in stdout, stdout
    assert (f"{n} test views (all of them: --frames 1000 asks for more than the split has) of 32x32"
            in " ".join(stdout.split())), stdout


def test_the_planned_size_is_the_one_rendered_after_downscale():
    """The first line, said before the model is loaded, gives the size the frames will have:
    --width/--height shrunk by --downscale (as the cameras are)."""
    import argparse

    from trainer.inference.cli import planned_render_words

    args = argparse.Namespace(cameras="orbit", frames=4, fps=None, seconds=None, width=1920, height=1080, downscale=8,
                              spp=1)
    assert planned_render_words(args) == "4 frames of orbit of 240x135, spp 1"
    args.downscale = None
    assert planned_render_words(args) == "4 frames of orbit of 1920x1080, spp 1"
    args.background, args.depth, args.compare = "#202020", True, False
    assert planned_render_words(args) == "4 frames of orbit of 1920x1080, spp 1, over #202020, with depth"
