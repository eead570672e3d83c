"""`export mesh|pointcloud`: geometry of the analytic demo scene, in the source world frame."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import trimesh

from tests.support.cli import deepest_bracket, first_statement, run_inference_cli
from trainer.contract.textlines import LINE_WIDTH, joined
from trainer.data.demo import surface_distance
from trainer.contract.commandline import MAX_RAYS_PER_POINT
from trainer.inference.loading import load_model
from trainer.inference.mesh import extract_mesh

# The two halves of the Chamfer distance, NeRF units (objects of radius 0.25-0.55), for the
# fixture's 80-step tiny model on 32-pixel views. Mesh vertices → analytic surface (mean):
# measured 0.076 at 64³ (0.135 with --min-views 0, which keeps the haze out to the scene box);
# vertices in the wrong frame lie ~1.6 away.
MAX_MEAN_DISTANCE = 0.2
# Exposed sphere surface → nearest vertex (mean): measured 0.077 (0.070 with --min-views 0).
MAX_COVERAGE_DISTANCE = 0.15
# Point cloud → surface (median): measured 0.090 (the same with --min-views 0: 39 of 1539 points left out).
MAX_POINT_MEDIAN_DISTANCE = 0.15


def _surface_samples(n: int = 3000) -> np.ndarray:
    """Points on the demo sphere's surface that no other primitive covers (radius 0.55 at 0)."""
    rng = np.random.default_rng(0)
    d = rng.normal(size=(n, 3))
    points = 0.55 * d / np.linalg.norm(d, axis=1, keepdims=True)
    return points[surface_distance(points) < 1e-9]


def _chamfer_halves(vertices: np.ndarray) -> tuple[float, float]:
    from scipy.spatial import cKDTree

    to_surface = float(surface_distance(vertices).mean())
    coverage = float(cKDTree(vertices).query(_surface_samples())[0].mean())
    return to_surface, coverage


def test_mesh_lies_on_the_analytic_surface(trained_run, tmp_path, capsys):
    out = tmp_path / "mesh.ply"
    code, stdout, _ = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "64", "--out", out, "--quiet"], capsys)
    assert code == 0 and "triangles at 64^3" in stdout
    mesh = trimesh.load(str(out), process=False)
    assert len(mesh.faces) > 1000 and mesh.visual.vertex_colors.shape == (len(mesh.vertices), 4)
    to_surface, coverage = _chamfer_halves(np.asarray(mesh.vertices))
    assert to_surface < MAX_MEAN_DISTANCE and coverage < MAX_COVERAGE_DISTANCE, (to_surface, coverage)
    # the sphere is checkered off-white/red, the cylinder orange/purple with yellow caps: red
    # outweighs blue on the sphere's vertices (measured: mean R − B ≈ 0.1)
    colours = mesh.visual.vertex_colors[:, :3].astype(float) / 255
    on_sphere = np.abs(np.linalg.norm(mesh.vertices, axis=1) - 0.55) < 0.03
    assert on_sphere.sum() > 100 and (colours[on_sphere, 0] - colours[on_sphere, 2]).mean() > 0.05


def test_mesh_of_a_scene_with_other_scale_and_offset_is_in_that_scene_s_frame(trained_run, tmp_path):
    """The same unit-cube cameras written with scale 0.25 and offset (0.4, 0.5, 0.6): the model
    trained on the default scene fits it, and its mesh must come out in the new source frame."""
    scale0, offset0, scale1, offset1 = 0.33, np.full(3, 0.5), 0.25, np.array([0.4, 0.5, 0.6])
    moved = tmp_path / "moved"
    shutil.copytree(trained_run["scene"], moved)
    for file in moved.glob("transforms_*.json"):
        data = json.loads(file.read_text())
        for frame in data["frames"]:
            m = np.asarray(frame["transform_matrix"])
            m[:3, 3] = (m[:3, 3] * scale0 + offset0 - offset1) / scale1
            frame["transform_matrix"] = m.tolist()
        data.update(scale=scale1, offset=offset1.tolist())
        file.write_text(json.dumps(data))
    model = load_model(trained_run["run"], scene_path=moved, device="cpu")
    try:
        mesh = extract_mesh(model, 48)
    finally:
        model.close()
    in_default_frame = (mesh["vertices"] * scale1 + offset1 - offset0) / scale0
    in_scene_frame = surface_distance(in_default_frame).mean()
    assert in_scene_frame < MAX_MEAN_DISTANCE
    # read in the default frame instead, the vertices miss the objects (measured 0.36 against 0.08)
    assert surface_distance(mesh["vertices"]).mean() > 3 * in_scene_frame


def test_pointcloud_points_lie_on_the_surface(trained_run, tmp_path, capsys):
    out = tmp_path / "cloud.ply"
    code, stdout, _ = run_inference_cli(["export", "pointcloud", trained_run["run"], "--n-points", "1500", "--out", out,
                               "--quiet"], capsys)
    rays = int(re.search(r"point cloud: 1,500 points from ([\d,]+) rays", stdout).group(1).replace(",", ""))
    assert code == 0 and 1500 < rays <= MAX_RAYS_PER_POINT * 1500
    cloud = trimesh.load(str(out))
    points = np.asarray(cloud.vertices)
    assert len(points) == 1500
    assert np.median(surface_distance(points)) < MAX_POINT_MEDIAN_DISTANCE


def test_pointcloud_stops_at_the_ray_cap_and_says_so(trained_run, tmp_path, capsys):
    """10^12 points: every training pixel (16 views of 32x32) is cast once, what reaches the
    opacity is written, one warning (in lines under 80 columns) says the cloud fell short."""
    out = tmp_path / "cloud.ply"
    code, stdout, err = run_inference_cli(["export", "pointcloud", trained_run["run"], "--n-points", 10**12, "--out", out,
                                 "--quiet"], capsys)
    lines = err.strip().splitlines()
    assert all(len(line) <= LINE_WIDTH for line in lines), lines
    starts = [i for i, line in enumerate(lines) if line.startswith("warning: ")] + [len(lines)]
    warnings = [lines[a:b] for a, b in zip(starts, starts[1:])]  # a slow machine adds the depth maps' warning
    shortfall = [w for w in warnings if w[0].startswith("warning: --n-points")]
    assert code == 0 and len(shortfall) == 1, err
    lines = shortfall[0]
    found = re.search(r"^warning: --n-points 1000000000000: only ([\d,]+) rays of 16,384 cast reached opacity 0\.5"
                      r"( on the surface of --min-views training views \([\d,]+ others left out\))? before "
                      r"the ray cap \(every pixel of the training images\); the cloud has \1 points$", joined(lines))
    assert found, err
    assert f"point cloud: {found.group(1)} points from 16,384 rays" in stdout  # thousands separated
    assert len(trimesh.load(str(out)).vertices) == int(found.group(1).replace(",", "")) < 16384


def test_a_threshold_below_every_density_of_the_box_is_named(trained_run, tmp_path, capsys):
    """A box inside the demo sphere (radius 0.55 at the origin): σ > 0 at every lattice point."""
    out = tmp_path / "mesh.ply"
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "8", "--aabb", "-0.1", "-0.1", "-0.1",
                            "0.1", "0.1", "0.1", "--threshold", "0", "--out", out, "--quiet"], capsys)
    statement, n = first_statement(err)
    assert code == 2 and err.count("\n") == n, err
    assert re.search(r"^error: --threshold 0: every cell of the box is denser than it \(lowest σ [0-9.e+-]+\); raise it",
                     statement), err
    assert not out.exists()


def test_ctrl_c_during_an_export_leaves_no_file_and_one_line(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.inference import mesh

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mesh, "density_grid", interrupted)
    out = tmp_path / "mesh.ply"
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "8", "--out", out, "--quiet"], capsys)
    assert code == 130 and first_statement(err) == (f"interrupted: export mesh stopped; {out} was not written",
                                                    err.count("\n"))
    assert not list(tmp_path.iterdir())


def test_sigterm_during_an_export_says_so_and_leaves_no_file(trained_run, tmp_path, capsys, monkeypatch):
    """SIGTERM (``timeout``, a scheduler) stops an export as Ctrl-C does, with one line and 143."""
    import os
    import signal

    from trainer.inference import mesh

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the export did not take SIGTERM")

    def unhandled(signum, frame):
        raise AssertionError("SIGTERM reached the caller: the export did not handle it")

    monkeypatch.setattr(mesh, "density_grid", terminated)
    out = tmp_path / "mesh.ply"
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "8", "--out", out,
                                          "--quiet"], capsys)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # the caller's handler is back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert code == 143 and first_statement(err) == (
        f"terminated (SIGTERM): export mesh stopped; {out} was not written", err.count("\n"))
    assert not list(tmp_path.iterdir())
    # more signals while it stops (a scheduler's second SIGTERM, an impatient Ctrl-C): only noted
    from trainer.inference import cli

    real_say = cli._say_stopped

    def said_under_more_signals(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        return real_say(*args)

    monkeypatch.setattr(cli, "_say_stopped", said_under_more_signals)
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "8", "--out", out,
                                          "--quiet"], capsys)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert code == 143 and first_statement(err) == (
        f"terminated (SIGTERM): export mesh stopped; {out} was not written", err.count("\n"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_during_the_density_pass_says_how_many_slices_were_done(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.inference import mesh
    from trainer.inference.progress import Progress

    class StopsAfterThree(Progress):
        def advance(self, units=1, items=0):
            super().advance(units, items)
            if self.done == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(mesh, "CHUNK_POINTS", 2 * 8 * 8)  # two slices of the 8^3 lattice a chunk
    monkeypatch.setattr(mesh, "Progress", StopsAfterThree)
    out = tmp_path / "mesh.ply"
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "8", "--out", out, "--quiet"], capsys)
    assert code == 130 and first_statement(err) == (
        f"interrupted: export mesh stopped after 6 of 8 density slices; {out} was not written", err.count("\n"))
    assert not list(tmp_path.iterdir())


def test_ctrl_c_while_casting_a_point_clouds_rays_says_how_far_it_got(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.inference import pointcloud
    from trainer.inference.progress import Progress

    class StopsAtTheSecondBatch(Progress):
        def advance(self, units=1, items=0):
            super().advance(units, items)
            if self.done > 0:  # the first batch's points are counted
                raise KeyboardInterrupt

    monkeypatch.setattr(pointcloud, "Progress", StopsAtTheSecondBatch)
    out = tmp_path / "cloud.ply"
    code, _, err = run_inference_cli(["export", "pointcloud", trained_run["run"], "--n-points", "1500", "--min-views",
                                      "0", "--out", out, "--quiet"], capsys)
    statement, _ = first_statement(err)
    found = re.fullmatch(r"interrupted: export pointcloud stopped after 1,500 rays cast, with ([\d,]+) of 1,500 "
                         rf"points; {re.escape(str(out))} was not written", statement)
    assert code == 130 and found, err  # the first batch casts n-points rays
    assert 0 < int(found.group(1).replace(",", "")) <= 1500
    assert not out.exists()


def test_a_point_cloud_whose_first_rays_take_long_says_so_before_casting(trained_run, tmp_path, capsys, monkeypatch):
    """Before the first batch is cast (one ray per point asked), its estimated time is said when
    it is long; a short one says nothing."""
    from trainer.inference import estimate

    out = tmp_path / "cloud.ply"
    argv = ["export", "pointcloud", trained_run["run"], "--n-points", "1500", "--min-views", "0", "--out", out, "--quiet"]
    code, _, err = run_inference_cli(argv, capsys)
    assert code == 0 and "warning" not in err, err
    monkeypatch.setattr(estimate, "first_camera_seconds", lambda trainer, frame: 1e6)  # far too slow a camera
    out.unlink()
    code, _, err = run_inference_cli(argv, capsys)
    warning, n = first_statement(err)
    assert code == 0 and re.fullmatch(r"warning: the first 1,500 rays \(one per point asked; a point is kept where a ray "
                                      r"meets a surface\) take about .+, and more follow where rays miss; a smaller "
                                      r"--n-points is faster", warning), err
    assert all(len(line) <= LINE_WIDTH for line in err.splitlines()[:n]), err


def test_a_mesh_export_says_its_density_estimate_before_the_pass(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.inference import cli, mesh

    seen = []
    real = mesh.density_grid
    monkeypatch.setattr(mesh, "density_grid", lambda *a, **k: seen.append(capsys.readouterr()) or real(*a, **k))
    out = tmp_path / "mesh.ply"
    code, _, _ = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--out", out,
                                    "--quiet"], capsys)
    assert code == 0 and len(seen) == 1
    said = seen[0].out.splitlines()
    n = first_statement(seen[0].out)[1]
    assert re.fullmatch(r"density of 16\^3 points estimated [0-9]+\.[0-9] m?s \(measured on a sample of them\)",
                        first_statement("\n".join(said[n:]))[0]), said
    assert "warning" not in seen[0].err
    assert cli.mesh_estimate_lines(512, 662.0) == ["density of 512^3 points estimated 11 min 2 s (measured on a sample of them)"]
    assert cli.long_mesh_warning(512, 500.0) is None
    assert cli.long_mesh_warning(512, 662.0) == ("this export's density pass is estimated at 11 min 2 s; --resolution 256 "
                                                 "is 8x faster; Ctrl-C writes nothing")
    monkeypatch.setattr(mesh, "density_grid", real)
    monkeypatch.setattr(cli, "LONG_RENDER_S", 0.0)  # every estimate counts as long
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--out", out,
                                      "--quiet"], capsys)
    warning, n = first_statement(err)
    assert code == 0 and all(len(line) <= LINE_WIDTH for line in err.splitlines()[:n]), err
    assert re.fullmatch(r"warning: this export's density pass is estimated at [0-9]+\.[0-9] m?s; --resolution 8 is "
                        r"8x faster; Ctrl-C writes nothing", warning), err


def test_the_density_estimate_scales_a_probe_to_the_lattice(trained_run):
    from trainer.inference.mesh import density_seconds_estimate

    model = load_model(trained_run["run"], None, "cpu")
    try:
        small = density_seconds_estimate(model.trainer, 8)
        large = density_seconds_estimate(model.trainer, 512)
    finally:
        model.close()
    assert 0 < small < large  # 2^18 times the points: the probe's time per point scaled to each lattice


@pytest.mark.parametrize("argv, message", [
    (["--resolution", "0"], "--resolution 0: expected an integer >= 2"),
    (["--resolution", "-3"], "--resolution -3: expected an integer >= 2"),
    (["--resolution", "100000"], r"--resolution 100000: meshing needs about .* GiB of memory"),
    (["--out", "{tmp}/mesh.stl"], r"--out .*mesh.stl: unknown mesh extension '.stl'"),
    (["--out", "{tmp}/file/mesh.ply"], r"--out .*mesh.ply: cannot create its folder"),
    (["--aabb", "1", "0", "0", "0", "1", "1"], "--aabb 1 0 0 0 1 1: expected x0 y0 z0 x1 y1 z1"),
    (["--threshold", "nan"], r"--threshold nan: expected a finite density σ >= 0 \(default 2\.5\)"),
    (["--threshold", "inf"], r"--threshold inf: expected a finite density σ >= 0"),
    (["--threshold", "-1"], r"--threshold -1: expected a finite density σ >= 0"),
])
def test_bad_mesh_requests_are_refused_before_any_work(trained_run, tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("a file where a folder is expected")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], *argv, "--quiet"], capsys)
    statement, n = first_statement(err)
    assert code == 2 and err.count("\n") == n and statement.startswith("error: "), err
    assert re.search(message, statement), err
    assert not list(tmp_path.glob("*.ply")) and not (trained_run["run"] / "mesh.ply").exists()


def test_the_export_result_lines_fit_80_columns():
    import argparse

    from trainer.inference.cli import mesh_result_lines, pointcloud_result_lines

    args = argparse.Namespace(resolution=512, min_views=3, threshold=2.5, min_opacity=0.5)
    out = Path("runs/lego-with-a-rather-long-name/exports/lego-mesh-at-full-resolution.ply")
    mesh = {"vertices": [0] * 1_234_567, "faces": [0] * 2_469_134, "faces_unsupported": 20_311, "support_s": 12.34,
            "density_s": 3.456, "marching_s": 0.0391, "seconds": 16.2}
    lines = mesh_result_lines(mesh, args, out)
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines  # was one line of 200
    # one statement of the time (it had two bracketed ones), no bracket inside another
    assert joined(lines) == ("mesh: 1,234,567 vertices, 2,469,134 triangles at 512^3, threshold 2.5, 20,311 left out "
                             "(on the surface of fewer than 3 training views), in 16.2 s (density 3.5 s, "
                             f"marching cubes 39.1 ms, support 12.3 s) -> {out}")
    everything = mesh_result_lines(mesh, argparse.Namespace(resolution=64, min_views=0, threshold=2.5), Path("m.ply"))
    assert joined(everything) == ("mesh: 1,234,567 vertices, 2,469,134 triangles at 64^3, threshold 2.5, in 16.2 s "
                                  "(density 3.5 s, marching cubes 39.1 ms) -> m.ply")
    cloud = {"points": [0], "rays": 1, "unsupported": 0}
    assert pointcloud_result_lines(cloud, argparse.Namespace(min_views=0, min_opacity=0.5), Path("p.ply")) == [
        "point cloud: 1 point from 1 ray (opacity >= 0.5) -> p.ply"]
    cloud = {"points": [0] * 5, "rays": 9, "unsupported": 3}
    supported = joined(pointcloud_result_lines(cloud, argparse.Namespace(min_views=3, min_opacity=0.5), Path("p.ply")))
    assert supported == ("point cloud: 5 points from 9 rays (opacity >= 0.5), 3 left out (on the surface of fewer "
                         "than 3 training views) -> p.ply")  # was "(opacity >= 0.5, 3 left out (... views))"
    assert max(deepest_bracket(joined(lines)), deepest_bracket(supported)) == 1


def test_progress_lines_and_the_bar_give_the_time_left_as_the_training_does(capsys, monkeypatch):
    """Off a terminal and on one the time left reads ``eta M:SS`` (``eta -:--`` before the first
    unit is done), as the training's progress line writes it."""
    import io

    from rich.console import Console

    import trainer.inference.progress as progress_module
    from trainer.inference.progress import Progress

    monkeypatch.setattr(progress_module, "PLAIN_LINE_EVERY_S", 0.0)  # a line at every advance
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    counter = Progress("density", 75, rate_name="points")
    counter.advance(0, 0)
    now[0] = 101.0  # the first chunk took a second: 74 more to go
    counter.advance(1, 133_000)
    assert counter.eta_text() == "1:14"
    now[0] = 102.0
    counter.advance(74, 133_000)
    assert capsys.readouterr().err.splitlines() == ["density 0/75  0 points/s  eta -:--",
                                                    "density 1/75  133 k points/s  eta 1:14",
                                                    "density 75/75  133 k points/s  eta 0:00"]
    monkeypatch.undo()
    screen = io.StringIO()
    bar = Progress("render", 4, console=Console(file=screen, width=80, force_terminal=True, color_system=None))
    bar.advance(2, 1000)
    bar.close()  # the bar's last frame stays on the screen
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()).replace("\r", "\n").splitlines()
    shown = [line for line in drawn if "2/4" in line]
    assert shown and re.search(r" eta \d+:\d\d$", shown[-1].rstrip()), drawn
    assert "ETA" not in screen.getvalue() and "-:--:--" not in screen.getvalue()


def test_export_progress_and_its_last_line_read_in_human_units(trained_run, tmp_path, capsys):
    code, stdout, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16",
                                           "--out", tmp_path / "m.ply"], capsys)
    assert code == 0 and "points/s" in err and "e+" not in err + stdout, err
    assert re.search(r"  [0-9.]+( [kMG])? points/s  ", err), err
    lines = stdout.splitlines()
    result = lines[next(i for i, line in enumerate(lines) if line.startswith("mesh: ")):]
    assert all(len(line) <= LINE_WIDTH for line in result if " " in line.strip()), result  # a long path stays whole
    assert re.search(r", threshold 2\.5, \d+ left out \(on the surface of fewer than 3 training views\), "
                     r"in \d+\.\d m?s \(density \d+\.\d m?s, marching cubes \d+\.\d m?s, support \d+\.\d m?s\) -> ",
                     joined(result)), result


def test_a_piped_pointcloud_export_shows_its_progress_within_each_batch(trained_run, tmp_path, capsys, monkeypatch):
    """Off a terminal (stderr captured) the export prints plain lines: the support's depth maps
    view by view, then the rays cast within a batch, before its points are counted, each with
    the time left (from the rays foreseen)."""
    import trainer.inference.progress as progress_module

    monkeypatch.setattr(progress_module, "PLAIN_LINE_EVERY_S", 0.0)  # a line at every chunk (no timing read)
    code, _, err = run_inference_cli(["export", "pointcloud", trained_run["run"], "--n-points", "1500", "--out",
                                      tmp_path / "cloud.ply"], capsys)
    lines = err.splitlines()
    assert code == 0
    views = [line for line in lines if line.startswith("support views ")]
    assert views[0].startswith("support views 1/16  ") and views[-1].startswith("support views 16/16  "), views
    first_batch = [line for line in lines if line.startswith("points 0/1,500  ")]
    assert first_batch, lines  # rays of the first batch before any point is counted, with the time left
    assert all(re.match(r"points 0/1,500  [0-9.]+( [kM])? rays/s  eta \d+:\d\d$", line) for line in first_batch), first_batch
    assert re.match(r"points 1,500/1,500  [0-9.]+( [kM])? rays/s  eta 0:00$", lines[-1]), lines[-1]


def test_long_support_depth_maps_are_announced_with_the_flag_that_skips_them(trained_run, tmp_path, capsys,
                                                                             monkeypatch):
    import trainer.inference.support as support

    monkeypatch.setattr(support, "LONG_SUPPORT_S", 0.0)  # every estimate counts as long
    out = tmp_path / "mesh.ply"
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--out", out,
                                      "--quiet"], capsys)
    assert code == 0 and out.is_file()
    assert all(len(line) <= LINE_WIDTH for line in err.splitlines()), err
    warnings = [w for w in joined(err.splitlines()).split("warning: ")[1:] if w.startswith("the depth maps of ")]
    assert len(warnings) == 1 and warnings[0].rstrip().endswith("; --min-views 0 skips them"), err
    assert " training views (what --min-views checks) take about " in warnings[0]
    code, _, err = run_inference_cli(["export", "mesh", trained_run["run"], "--resolution", "16", "--out", out,
                                      "--min-views", "0", "--quiet"], capsys)
    assert code == 0 and "depth maps" not in err  # no support views: nothing to announce


def test_the_rays_a_point_cloud_foresees_follow_its_hit_rate():
    from trainer.inference.pointcloud import MAX_RAYS_PER_POINT, rays_foreseen

    assert rays_foreseen(1000, 0, 0, 1000, 10**6) == 1000  # before any batch: one hit per ray
    assert rays_foreseen(1000, 250, 1000, 3600, 10**6) == 4600  # 1 in 4 hit: the batch covers the 750 missing
    assert rays_foreseen(1000, 250, 1000, 1000, 10**6) == 4000  # 1 in 4 hit: 2000 more after the batch
    assert rays_foreseen(1000, 0, 1000, 5000, 10**6) == 1000 + 5000 + 1000 * MAX_RAYS_PER_POINT  # none hit yet
    assert rays_foreseen(1000, 250, 1000, 3600, 2000) == 2000  # within the ray cap
