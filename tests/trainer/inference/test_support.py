"""Exports leave out what the training views do not show as a surface (``--min-views``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.cli import run_inference_cli
from trainer.data.demo import surface_distance
from trainer.inference.loading import load_model
from trainer.inference.mesh import extract_mesh
from trainer.inference.support import SupportGrid, build_support
from trainer.inference.worldframe import world_to_cube

# The demo scene's primitives span this box (NeRF world): the sphere (radius 0.55 at 0), the
# turned box (x up to 0.72 + 0.28·(cos 30° + sin 30°) = 1.10) and the cylinder (x down to −0.93,
# y up to 0.67, z from −0.70 to 0.30).
OBJECTS_LO = np.array([-0.93, -0.55, -0.70])
OBJECTS_HI = np.array([1.10, 0.67, 0.55])
# The fixture's 80-step model on 32-pixel views meshes haze out to the scene box (±1.5; measured
# corners (−1.52, −1.34, −1.36) and (1.33, 1.52, 1.52) at 64³). With the rule the mesh's box is
# measured at most 0.19 beyond the objects' (the surface of a model that rough is soft): 0.3 bounds it.
BOX_SLACK = 0.3


@pytest.fixture(scope="module")
def model(trained_run):
    loaded = load_model(trained_run["run"], device="cpu")
    yield loaded
    loaded.close()


def test_the_mesh_box_shrinks_to_what_the_views_show(model) -> None:
    everything = extract_mesh(model, 64, min_views=0)
    supported = extract_mesh(model, 64, min_views=3)
    lo, hi = everything["vertices"].min(axis=0), everything["vertices"].max(axis=0)
    assert np.any(lo < OBJECTS_LO - BOX_SLACK) or np.any(hi > OBJECTS_HI + BOX_SLACK)  # the haze, without the rule
    lo, hi = supported["vertices"].min(axis=0), supported["vertices"].max(axis=0)
    assert np.all(lo > OBJECTS_LO - BOX_SLACK) and np.all(hi < OBJECTS_HI + BOX_SLACK), (lo, hi)
    assert supported["faces_unsupported"] == len(everything["faces"]) - len(supported["faces"]) > 0
    assert everything["faces_unsupported"] == 0
    # what is left is closer to the true surface (measured mean 0.135 → 0.076)
    assert surface_distance(supported["vertices"]).mean() < 0.8 * surface_distance(everything["vertices"]).mean()
    assert len(supported["colours"]) == len(supported["vertices"]) == len(supported["normals"])
    assert supported["faces"].max() == len(supported["vertices"]) - 1


def test_views_count_the_visible_surface_not_the_unseen_corner(model) -> None:
    support = build_support(model, np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]), min_views=3, resolution=64)
    # the sphere's surface up and to the side, facing most cameras of the upper hemisphere (measured
    # on the surface of 15 of the 16 training views)
    points = world_to_cube(np.array([[-0.55 / np.sqrt(2), 0.0, 0.55 / np.sqrt(2)],
                                     [1.4, 1.4, -1.4],  # a lower corner of the scene box: nothing there
                                     [0.0, 0.0, 1.2]]),  # empty space above the sphere
                           model.scene)
    assert support.supported(points).tolist() == [True, False, False]


def test_a_support_grid_looks_points_up_in_their_cell() -> None:
    views = np.zeros((2, 2, 2), dtype=np.int32)
    views[1, 0, 1] = 3
    views[0, 1, 0] = 2
    grid = SupportGrid(box=np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]]), views=views, min_views=3)
    points = np.array([[1.5, 0.5, 1.5], [0.5, 1.5, 0.5], [1.5, 0.5, 2.5], [-0.1, 0.5, 1.5]])
    assert grid.supported(points).tolist() == [True, False, False, False]
    assert grid.supported_fraction == pytest.approx(1 / 8)


def test_a_negative_min_views_is_refused_before_any_work(trained_run, tmp_path, capsys) -> None:
    for kind in ("mesh", "pointcloud"):
        code, _, err = run_inference_cli(["export", kind, trained_run["run"], "--min-views", "-1", "--out",
                                tmp_path / "x.ply", "--quiet"], capsys)
        assert code == 2 and err.startswith("error: --min-views -1: expected an integer >= 0"), err
    assert not list(tmp_path.iterdir())


def _camera(side: int, distance: float, focal: float):
    """A frame of ``side``² pixels at ``distance`` from the unit cube's centre, looking at it."""
    import types

    c2w = np.eye(4)
    c2w[:3, 3] = [0.5, 0.5, 0.5 + distance]  # looking down −z at the centre
    return types.SimpleNamespace(intrinsics=types.SimpleNamespace(width=side, height=side, fx=focal, fy=focal), c2w=c2w)


def test_the_depth_maps_are_as_fine_as_the_lattice_needs() -> None:
    """A depth-map pixel spans two lattice cells at the box's distance: the maps of a coarse
    lattice are smaller (a 64³ mesh's fewer rays than a 256³ one's), within the cap and the image."""
    from trainer.inference.support import CELLS_PER_DEPTH_PIXEL, DEPTH_MAP_SIDE, MIN_DEPTH_MAP_SIDE, depth_map_side

    box = np.array([[0.2, 0.2, 0.2], [0.8, 0.8, 0.8]])
    frame = _camera(400, 1.3, 555.0)  # lego's 400-pixel views
    sides = {resolution: depth_map_side(frame, box, resolution) for resolution in (16, 32, 64, 128)}
    cell_px = 0.6 / 64 * 555.0 / 1.3  # image pixels a 64³ cell spans at the box's centre
    assert sides[64] == int(np.ceil(400 / (CELLS_PER_DEPTH_PIXEL * cell_px)))  # 50
    assert sides[16] == MIN_DEPTH_MAP_SIDE < sides[32] < sides[64] < sides[128] == 100
    assert depth_map_side(frame, box, 512) == DEPTH_MAP_SIDE  # the cap
    assert depth_map_side(_camera(32, 1.3, 44.0), box, 512) == 32  # never more than the image
    inside = depth_map_side(_camera(400, 0.0, 555.0), box, 64)  # a camera in the box: its walls' distance
    assert inside == int(np.ceil(400 / (CELLS_PER_DEPTH_PIXEL * 0.6 / 64 * 555.0 / (0.5 * 0.6 * np.sqrt(3)))))
    with pytest.raises(ValueError, match="resolution >= 1"):
        depth_map_side(frame, box, 0)


def test_a_coarse_lattice_renders_smaller_depth_maps(model) -> None:
    from trainer.inference.support import MIN_DEPTH_MAP_SIDE, camera_depth_maps

    box = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    fine = camera_depth_maps(model, box=box, resolution=128)
    coarse = camera_depth_maps(model, box=box, resolution=4)
    assert all(max(depth.shape) == 32 for _, depth in fine)  # the 32-pixel views: as large as the image
    assert all(max(depth.shape) == MIN_DEPTH_MAP_SIDE for _, depth in coarse)
    assert all(max(f.intrinsics.width, f.intrinsics.height) == MIN_DEPTH_MAP_SIDE for f, _ in coarse)


def test_the_depth_maps_time_is_estimated_from_the_first_views_rate_over_every_views_rays(monkeypatch, capsys) -> None:
    """Views of different sizes: the first (32×32, 1024 rays) takes 1.024 s at 1 ms a ray; the
    three others (128×64, 8192 rays each) make 25.6 s in all, not 4 × 1.024 s."""
    import types

    import torch

    import trainer.inference.support as support

    frames = [types.SimpleNamespace(intrinsics=types.SimpleNamespace(width=w, height=h))
              for w, h in ((32, 32), (256, 128), (256, 128), (256, 128))]
    model = types.SimpleNamespace(mode="single", trainer=types.SimpleNamespace(
        scene=types.SimpleNamespace(frames=lambda split: frames), device=torch.device("cpu")))
    now = [0.0]

    def depth_map(trainer, frame, size, renderer, background):
        width, height = size
        now[0] += width * height * 1e-3
        return frame, torch.zeros(height, width)

    monkeypatch.setattr(support, "_depth_map", depth_map)
    monkeypatch.setattr(support.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(support, "LONG_SUPPORT_S", 0.0)  # every estimate is announced
    maps = support.camera_depth_maps(model, side=128)
    assert [tuple(depth.shape) for _, depth in maps] == [(32, 32), (64, 128), (64, 128), (64, 128)]
    assert "take about 25.6 s; --min-views 0 skips them" in " ".join(capsys.readouterr().err.split())
