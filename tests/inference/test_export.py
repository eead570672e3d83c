"""`export mesh|pointcloud`: geometry of the analytic demo scene, in the source world frame."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import trimesh

from tests.inference.conftest import run_cli
from trainer.data.demo import surface_distance
from trainer.inference.loading import load_model
from trainer.inference.mesh import extract_mesh

# The two halves of the Chamfer distance, NeRF units (objects of radius 0.25-0.55), for the
# fixture's 80-step tiny model on 32-pixel views. Mesh vertices → analytic surface (mean):
# measured 0.128 at 64³ (0.068 after 200 steps); vertices in the wrong frame lie ~1.6 away.
MAX_MEAN_DISTANCE = 0.2
# Exposed sphere surface → nearest vertex (mean): measured 0.080.
MAX_COVERAGE_DISTANCE = 0.15
# Point cloud → surface (median): measured 0.079.
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
    code, stdout, _ = run_cli(["export", "mesh", trained_run["run"], "--resolution", "64", "--out", out, "--quiet"], capsys)
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
    assert surface_distance(in_default_frame).mean() < MAX_MEAN_DISTANCE
    assert surface_distance(mesh["vertices"]).mean() > 2 * MAX_MEAN_DISTANCE  # not the default frame


def test_pointcloud_points_lie_on_the_surface(trained_run, tmp_path, capsys):
    out = tmp_path / "cloud.ply"
    code, stdout, _ = run_cli(["export", "pointcloud", trained_run["run"], "--n-points", "3000", "--out", out,
                               "--quiet"], capsys)
    assert code == 0 and "points of 3000 rays" in stdout
    cloud = trimesh.load(str(out))
    points = np.asarray(cloud.vertices)
    assert len(points) > 500
    assert np.median(surface_distance(points)) < MAX_POINT_MEDIAN_DISTANCE


@pytest.mark.parametrize("argv, message", [
    (["--resolution", "0"], "--resolution 0: expected an integer >= 2"),
    (["--resolution", "-3"], "--resolution -3: expected an integer >= 2"),
    (["--resolution", "100000"], r"--resolution 100000: meshing needs about .* GiB of memory"),
    (["--out", "{tmp}/mesh.stl"], r"--out .*mesh.stl: unknown mesh extension '.stl'"),
    (["--out", "{tmp}/file/mesh.ply"], r"--out .*mesh.ply: cannot create its folder"),
    (["--aabb", "1", "0", "0", "0", "1", "1"], "--aabb 1 0 0 0 1 1: expected x0 y0 z0 x1 y1 z1"),
])
def test_bad_mesh_requests_are_refused_before_any_work(trained_run, tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("a file where a folder is expected")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = run_cli(["export", "mesh", trained_run["run"], *argv, "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1
    import re

    assert re.search(message, err), err
    assert not list(tmp_path.glob("*.ply")) and not (trained_run["run"] / "mesh.ply").exists()
