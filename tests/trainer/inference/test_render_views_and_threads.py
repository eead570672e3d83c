"""`render` and `export` on a CPU: the trainer's thread rule and a first line that says it; the
model of any run folder (train-many's final.pt in the root included); a split's views named after
the views, scored against their ground truth (scores.json, --compare) and a long render announced."""

from __future__ import annotations

import json
import re
import shutil

import cv2
import numpy as np
import pytest
import torch

from tests.support.cli import deepest_bracket, first_statement, run_inference_cli
from trainer.contract.textlines import LINE_WIDTH, joined
from trainer.contract.threads import available_cores
from trainer.inference.loading import load_model


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # a count no rule below gives on its own
    yield
    torch.set_num_threads(before)


def _result(stdout: str) -> str:
    """The render's result statement (its lines from ``rendered ...`` on, joined)."""
    lines = stdout.splitlines()
    return joined(lines[next(i for i, line in enumerate(lines) if line.startswith("rendered ")):])


def test_the_render_result_fits_80_columns_and_counts_in_words():
    import types

    from trainer.inference.cli import render_result_lines

    camera = types.SimpleNamespace(intrinsics=types.SimpleNamespace(width=400, height=400))
    job = types.SimpleNamespace(cameras=[camera], spp=8)
    summary = {"frames": 8, "seconds": 183.42, "frames_per_s": 0.0436, "rays_per_s": 6980.2,
               "out_dir": "runs/lego-with-a-rather-long-name/views", "mean_psnr_db": 23.0412, "mean_ssim": 0.81234,
               "scores_path": "runs/lego-with-a-rather-long-name/views/scores.json"}
    lines = render_result_lines(summary, job, ranks=2)
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines  # was one line of ~200
    assert joined(lines) == ("rendered 8 frames of 400x400, spp 8, in 183.4 s: 22.9 s per frame, 6.98 k rays/s "
                             "(2 ranks) -> runs/lego-with-a-rather-long-name/views; against the ground truth: "
                             "PSNR 23.04 dB, SSIM 0.812 (mean over the views, per view in "
                             "runs/lego-with-a-rather-long-name/views/scores.json)")
    one = render_result_lines({"frames": 1, "seconds": 0.25, "frames_per_s": 4.0, "rays_per_s": 6.4e5}, job)
    assert one == ["rendered 1 frame of 400x400, spp 8, in 250.0 ms: 4.00 frames/s, 640 k rays/s"]


def test_a_slow_render_reads_in_seconds_per_frame():
    from trainer.inference.cli import frame_rate_text

    assert frame_rate_text(0.0535) == "18.7 s per frame"  # not "0.0535 frames/s"
    assert frame_rate_text(1.0) == "1.00 frames/s"
    assert frame_rate_text(25.3) == "25.3 frames/s"
    assert frame_rate_text(0.5) == "2.0 s per frame"


def test_render_takes_the_runs_thread_rule_and_says_so(trained_run, tmp_path, capsys, restore_threads):
    assert trained_run["config"].training.cpu_threads == 0  # the rule: cores // ranks
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "1", "--width", "8",
                               "--height", "8", "--out", tmp_path / "a", "--quiet"], capsys)
    assert code == 0
    cores = available_cores()
    first, n = first_statement(stdout)
    assert all(len(line) <= LINE_WIDTH for line in stdout.splitlines()[:n]), stdout
    assert first.startswith(f"rendering {trained_run['run']}/snapshots/step_0000080.pt (step 80) on cpu, {cores} CPU thread")
    assert f"per rank ({cores} cores // 1 rank): 1 frame of orbit of 8x8, spp 1" in first, first
    assert deepest_bracket(first) == 1, first  # no "(... (...))"
    assert torch.get_num_threads() == cores
    assert re.search(r" (frames/s|s per frame), [0-9.]+( [kMG])? rays/s", _result(stdout)), stdout  # 64.0 k, not 6.4e+04


def test_cpu_threads_flag_sets_the_threads_of_render_and_export(trained_run, tmp_path, capsys, restore_threads):
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "1", "--width", "8",
                               "--height", "8", "--out", tmp_path / "a", "--cpu-threads", "1", "--quiet"], capsys)
    assert code == 0 and "on cpu, 1 CPU thread per rank (--cpu-threads): " in first_statement(stdout)[0]
    assert torch.get_num_threads() == 1
    torch.set_num_threads(3)
    code, stdout, _ = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--cpu-threads", "2",
                               "--out", tmp_path / "m.ply", "--quiet"], capsys)
    assert code == 0, stdout
    first = first_statement(stdout)[0]
    assert first == (f"exporting a 16^3 mesh of {trained_run['run']}/snapshots/step_0000080.pt "
                     "(step 80) on cpu, 2 CPU threads per rank (--cpu-threads)")
    assert deepest_bracket(first) == 1, first
    assert torch.get_num_threads() == 2
    code, _, err = run_inference_cli(["export", "pointcloud", trained_run["run"], "--cpu-threads", "-1"], capsys)
    assert code == 2 and err == "error: --cpu-threads -1: expected an integer >= 0 (0: cores // ranks)\n"


def test_a_run_folder_with_final_pt_in_its_root_still_loads(trained_run, tmp_path, capsys):
    run = tmp_path / "old-train-many-job"
    run.mkdir()
    shutil.copy(trained_run["run"] / "config.json", run / "config.json")
    shutil.copy(trained_run["snapshot"], run / "final.pt")
    model = load_model(run, device="cpu")
    try:
        assert model.source == run / "final.pt" and model.step == 80
    finally:
        model.close()
    code, stdout, err = run_inference_cli(["render", run, "--frames", "1", "--quiet"], capsys)
    assert code == 0, err
    assert (run / "render-test" / "test_000.png").is_file()


def test_test_views_are_named_after_the_views_and_scored_against_the_ground_truth(trained_run, tmp_path, capsys):
    out = tmp_path / "views"
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--compare", "--out", out, "--quiet"],
                              capsys)
    assert code == 0
    evaluated = trained_run["eval"]["images"]  # the evaluation's own scores of the same views
    names = [f"test_{image['index']:03d}" for image in evaluated]
    assert sorted(p.name for p in out.glob("test_*.png")) == sorted(
        [f"{n}.png" for n in names] + [f"{n}_compare.png" for n in names])
    scores = json.loads((out / "scores.json").read_text())
    assert [r["file"] for r in scores["images"]] == [f"{n}.png" for n in names]
    for ours, theirs in zip(scores["images"], evaluated):
        assert ours["name"] == theirs["name"]
        assert abs(ours["psnr_db"] - theirs["psnr_db"]) < 1e-3 and abs(ours["ssim"] - theirs["ssim"]) < 1e-4
    assert abs(scores["mean_psnr_db"] - trained_run["eval"]["mean_psnr_db"]) < 1e-3
    assert f"against the ground truth: PSNR {scores['mean_psnr_db']:.2f} dB" in _result(stdout)
    side = cv2.imread(str(out / f"{names[0]}_compare.png"))
    alone = cv2.imread(str(out / f"{names[0]}.png"))
    band = 14  # the caption band: max(14, h // 12) rows of black text on white
    assert side.shape == (32 + band, 64, 3) and (side[band:, :32] == alone).all()
    assert (side[:band] < 128).any() and (side[:band, :32] < 128).any() and (side[:band, 32:] < 128).any()
    assert (side[:band] == 255).mean() > 0.5  # text on a white band


def test_side_by_side_captions_each_half_within_its_width():
    from trainer.inference.outputs import side_by_side

    render = np.zeros((480, 640, 3), np.uint8)
    truth = np.full((480, 640, 3), 200, np.uint8)
    image = side_by_side(render, truth, 31.237)
    assert image.shape == (480 + 40, 1280, 3)  # band 480 // 12 rows
    assert (image[40:, :640] == 0).all() and (image[40:, 640:] == 200).all()
    caption = image[:40]
    inked = np.flatnonzero((caption < 128).any(axis=(0, 2)))
    assert inked.min() < 640 <= inked.max()  # a caption over each half
    assert not (caption[:, 638:642] < 128).any()  # neither runs into the other
    assert side_by_side(render, truth).shape == image.shape  # without a PSNR
    # captions shorten before they shrink below a legible size: the 46-pixel-wide halves of 64-row
    # views hold "31.24 dB" and "truth" at one size, not "render, PSNR 31.24 dB" cut after "PSNR"
    narrow = side_by_side(render[:64, :46], truth[:64, :46], 31.237)
    shorter = side_by_side(render[:64, :46], truth[:64, :46], None)
    left_ink = np.flatnonzero((narrow[:13, :46] < 128).any(axis=(0, 2)))
    assert left_ink.max() < 45  # "31.24 dB" ends inside its half: not cut at the edge
    assert (shorter[:13, :46] < 128).any()  # "render" without a PSNR
    tall = side_by_side(render[:, :20].repeat(5, axis=0), truth[:, :20].repeat(5, axis=0), 30.0)
    assert tall.shape[0] == 2400 + 48  # the band stays at 48 rows under tall views
    assert (image[39] == 160).all()  # a grey line under the band
    tiny = side_by_side(render[:24, :24], truth[:24, :24], 31.237)  # too narrow for the caption: cut
    assert tiny.shape == (24 + 14, 48, 3) and (tiny[:14, :24] < 128).any() and (tiny[:14, 24:] < 128).any()
    assert not (tiny[:14, 24:26] < 128).any()  # the left caption stops at its half's edge (the right one starts 3 px in)


def test_compare_needs_the_views_of_a_split_at_their_own_size(trained_run, tmp_path, capsys):
    code, _, err = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--compare", "--out", tmp_path / "o"],
                           capsys)
    assert code == 2 and err.startswith("error: --compare: needs the views of a split at their own size")
    code, _, err = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--width", "16", "--compare",
                            "--out", tmp_path / "o"], capsys)
    assert code == 2 and first_statement(err)[0].endswith("got --cameras test with a new size")


def test_a_model_that_renders_nan_is_one_error_line_and_writes_nothing(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.inference import render_views

    real = render_views.render_camera

    def poisoned(*args, **kwargs):  # what a diverged model (or an overflowing precision) renders
        view = real(*args, **kwargs)
        rgb = view._device["rgb"].clone()
        rgb[0, :3] = float("nan")
        return render_views.RenderedView(rgb, view._device["opacity"], view._device["depth"])

    monkeypatch.setattr(render_views, "render_camera", poisoned)
    out = tmp_path / "views"
    code, _, err = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--frames", "2", "--out", out,
                                      "--quiet"], capsys)
    assert code != 0 and "Traceback" not in err
    statement = " ".join(first_statement(err)[0].split())
    assert statement.startswith("error: ") and "rendered 3 pixel(s) of NaN or infinite colour" in statement, err
    assert not list(out.glob("*.png"))


def test_a_long_render_is_estimated_and_announced_before_it_starts(trained_run, tmp_path, capsys, monkeypatch):
    import trainer.inference.cli as inference_cli
    import trainer.inference.estimate as estimate

    monkeypatch.setattr(inference_cli, "ESTIMATE_MIN_RAYS", 1)
    monkeypatch.setattr(estimate, "first_camera_seconds", lambda trainer, frame: 3600.0)  # x spp 2
    code, stdout, err = run_inference_cli(["render", trained_run["run"], "--cameras", "test", "--frames", "1", "--spp", "2",
                                 "--out", tmp_path / "v", "--quiet"], capsys)
    assert code == 0
    first, n = first_statement(stdout)
    second, m = first_statement("\n".join(stdout.splitlines()[n:]))
    assert first.startswith("rendering") and first.endswith("): 1 test view, spp 2")  # before the scene was loaded
    assert second == "1 test view of 32x32, spp 2, estimated 2 h 0 min (measured on a sample of its rays)"
    assert all(len(line) <= LINE_WIDTH for line in stdout.splitlines()[n:n + m])
    warning, k = first_statement(err)
    assert all(len(line) <= LINE_WIDTH for line in err.splitlines()[:k]), err
    assert warning == ("warning: this render is estimated at 2 h 0 min: --frames N renders fewer views (evenly "
                                   "spaced); --spp 1 is 2x faster; --downscale N renders smaller images; Ctrl-C keeps "
                                   "the frames written so far")


def test_the_estimate_probes_the_first_camera_before_the_first_frame(trained_run, tmp_path, capsys, monkeypatch):
    """A render whose first frame takes minutes says its estimate before that frame: the probe
    renders a few hundred rays of the first camera only, scaled to every camera's rays."""
    import trainer.inference.cli as inference_cli
    import trainer.inference.render_views as render_views
    import trainer.inference.estimate as estimate

    probed, before_first_frame = [], []
    real_measure, real_render = estimate.first_camera_seconds, render_views.render_camera

    def measure(trainer, frame):
        probed.append((frame.intrinsics.width, frame.intrinsics.height))
        return real_measure(trainer, frame)

    def render_camera(*args, **kwargs):
        if not before_first_frame:
            before_first_frame.append(capsys.readouterr().out)
        return real_render(*args, **kwargs)

    monkeypatch.setattr(inference_cli, "ESTIMATE_MIN_RAYS", 1)
    monkeypatch.setattr(estimate, "first_camera_seconds", measure)
    monkeypatch.setattr(render_views, "render_camera", render_camera)
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "3", "--width",
                                         "40", "--height", "30", "--spp", "2", "--out", tmp_path / "o", "--quiet"], capsys)
    assert code == 0 and probed == [(40, 30)]  # the first camera alone
    said = before_first_frame[0].splitlines()
    n = first_statement(before_first_frame[0])[1]
    assert re.fullmatch(r"3 frames of orbit \(a full circle\) of 40x30, spp 2, estimated [0-9]+\.[0-9] m?s \(measured on a sample of its rays\)",
                        first_statement("\n".join(said[n:]))[0]), said
    assert "rendered 3 frames" in stdout


def test_the_estimate_scales_the_first_camera_to_every_ray(monkeypatch):
    import types

    import trainer.inference.cli as inference_cli
    import trainer.inference.estimate as estimate

    def camera(w, h):
        return types.SimpleNamespace(intrinsics=types.SimpleNamespace(width=w, height=h))

    job = types.SimpleNamespace(cameras=[camera(1920, 1080)] * 300, spp=4)
    model = types.SimpleNamespace(mode="single", trainer=None)
    monkeypatch.setattr(estimate, "first_camera_seconds", lambda trainer, frame: 2.5)
    assert inference_cli.render_estimate_s(model, job) == 2.5 * 300 * 4
    assert inference_cli.render_estimate_s(model, job, job.cameras[:150]) == 2.5 * 150 * 4  # a rank's share
    assert inference_cli.render_estimate_s(model, types.SimpleNamespace(cameras=[camera(8, 8)], spp=1)) is None


def test_the_probe_builds_the_rays_of_the_pixels_it_renders(trained_run):
    from trainer.data.rays import camera_rays_for_image
    from trainer.inference.estimate import pixel_rays, first_camera_seconds
    from trainer.inference.cameras import orbit_cameras, scene_orbit
    from trainer.data.scene import Intrinsics

    model = load_model(trained_run["run"], None, "cpu")
    try:
        frame = orbit_cameras(scene_orbit(model.scene), 1, Intrinsics(width=40, height=30, fx=35, fy=35, cx=20, cy=15))[0]
        pixels = torch.tensor([0, 39, 40, 1199, 617])
        o, d = pixel_rays(frame, pixels, torch.device("cpu"))
        all_o, all_d = camera_rays_for_image(frame)
        assert torch.allclose(o, all_o[pixels]) and torch.allclose(d, all_d[pixels])
        assert first_camera_seconds(model.trainer, frame) > 0
    finally:
        model.close()


def test_scores_json_is_strict_json_with_a_reason_for_each_null(tmp_path):
    import json as strict_json

    from trainer.inference.render_views import write_scores

    summary = {"split": "test", "mean_psnr_db": 21.5, "mean_psnr_affine_db": float("nan"),
               "images": [{"index": 0, "psnr_db": float("inf")}]}
    text = write_scores(tmp_path, summary).read_text()

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    parsed = strict_json.loads(text, parse_constant=refuse)
    assert parsed["mean_psnr_affine_db"] is None and parsed["images"][0]["psnr_db"] is None
    assert set(parsed["null_reasons"]) == {"mean_psnr_affine_db", "images[0].psnr_db"}
    assert parsed["mean_psnr_db"] == 21.5


def test_the_first_line_is_printed_before_the_scene_is_loaded(trained_run, tmp_path, capsys, monkeypatch):
    """A large render on a slow CPU spends minutes loading the scene and measuring a sample: the
    model, device, threads and what is asked are said before any of it, the estimate after."""
    import trainer.inference.cli as inference_cli
    import trainer.inference.loading as loading
    import trainer.inference.estimate as estimate

    seen = []
    real_load_scene = loading._load_scene

    def load_scene(cfg, scene_path, *rest):
        seen.append(("scene", capsys.readouterr().out))
        return real_load_scene(cfg, scene_path, *rest)

    def measure(trainer, frame):
        seen.append(("estimate", capsys.readouterr().out))
        return 6.0  # the first of the 2 frames

    monkeypatch.setattr(loading, "_load_scene", load_scene)
    monkeypatch.setattr(inference_cli, "ESTIMATE_MIN_RAYS", 1)
    monkeypatch.setattr(estimate, "first_camera_seconds", measure)
    code, stdout, _ = run_inference_cli(["render", trained_run["run"], "--cameras", "orbit", "--frames", "2", "--width",
                                         "12", "--height", "10", "--out", tmp_path / "o", "--cpu-threads", "1", "--quiet"],
                                        capsys)
    assert code == 0
    assert [what for what, _ in seen] == ["scene", "estimate"]
    assert first_statement(seen[0][1]) == (
        f"rendering {trained_run['run']}/snapshots/step_0000080.pt (step 80) on cpu, 1 CPU thread per "
        "rank (--cpu-threads): 2 frames of orbit of 12x10, spp 1", seen[0][1].count("\n"))
    assert seen[1][1] == ""  # nothing more until the estimate is known
    assert first_statement(stdout)[0] == "2 frames of orbit (a full circle) of 12x10, spp 1, estimated 12.0 s (measured on a sample of its rays)"
    seen.clear()
    code, stdout, _ = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--cpu-threads", "1",
                                         "--out", tmp_path / "m.ply", "--quiet"], capsys)
    assert code == 0 and seen[0][0] == "scene"
    assert seen[0][1].startswith("exporting a 16^3 mesh of") and first_statement(seen[0][1])[1] == seen[0][1].count("\n")


def test_a_launched_render_says_its_threads_without_nested_brackets():
    """``render --nproc-per-node 2`` on a CPU: the threads each of the ranks takes, in one bracket."""
    import argparse

    from trainer.contract.config import load_config
    from trainer.inference.cli import device_words

    cfg = load_config(None)
    cores = available_cores()
    per_rank = max(1, cores // 2)
    words = device_words(argparse.Namespace(cpu_threads=None), cfg, "cpu", 2)
    assert words == (f"on cpu, {per_rank} CPU thread{'s' if per_rank != 1 else ''} per rank "
                     f"({cores} cores // 2 ranks)"), words
    assert device_words(argparse.Namespace(cpu_threads=1), cfg, "cpu", 2) == "on cpu, 1 CPU thread per rank (--cpu-threads)"
    assert device_words(argparse.Namespace(cpu_threads=None), cfg, "cuda", 2) == "on cuda"


def test_rank_0s_opening_lines_reach_the_launchers_console(tmp_path, capsys):
    """``render --nproc-per-node 2``: what one process says second (frames, size, estimate), written
    by rank 0 while the launcher waits, is printed once, as soon as it is written."""
    import threading

    from trainer.inference.opening import OpeningRelay, write_opening

    path = tmp_path / "opening.json"
    lines = ["3 test views of 800x800, spp 8, estimated 4 min 12 s (measured on a sample of", "  its rays)"]
    with OpeningRelay(path, poll_s=0.01) as relay:
        assert not relay.printed and capsys.readouterr().out == ""
        write_opening(path, lines, "this render is estimated at 4 min 12 s: ...")
        waited = threading.Event()
        for _ in range(500):  # the ranks are still rendering: the relay prints without waiting for them
            if relay.printed:
                break
            waited.wait(0.01)
        assert relay.printed
        said = capsys.readouterr()
        assert said.out.splitlines() == lines
        assert said.err == "warning: this render is estimated at 4 min 12 s: ...\n"
    assert capsys.readouterr().out == ""  # once
    with OpeningRelay(tmp_path / "never.json", poll_s=10.0):
        pass  # rank 0 failed before it wrote them: nothing to print
    assert capsys.readouterr() == ("", "")


def test_the_opening_line_of_several_ranks_names_the_model_and_its_step():
    import argparse
    import types

    from trainer.inference.cli import render_opening_lines

    args = argparse.Namespace(cameras="test", frames=8, spp=8, width=None, height=None)
    located = types.SimpleNamespace(source="runs/lego/snapshots/final.pt", step=2000)
    where = "on cpu, 1 CPU thread per rank (2 cores // 2 ranks)"
    assert joined(render_opening_lines(args, located, where, 2)) == (
        "rendering runs/lego/snapshots/final.pt (step 2000) with 2 ranks on cpu, 1 CPU thread per rank "
        "(2 cores // 2 ranks): 8 test views, spp 8")
    assert joined(render_opening_lines(args, located, where)).startswith("rendering runs/lego/snapshots/final.pt (step "
                                                                           "2000) on cpu, ")
