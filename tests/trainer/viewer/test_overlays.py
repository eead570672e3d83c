"""The viewer's occupied-cell overlay, and the mesh export's occupied box, draw the scene box's
cascades only: the unbounded model's background shell stands for contracted space."""

from __future__ import annotations

import types

import numpy as np
import torch

from trainer.inference.mesh import occupied_box
from trainer.render.occupancy import OccupancyGrid, pack_bits
from trainer.viewer.overlays import occupied_cell_centres


def _shell_grid() -> OccupancyGrid:
    grid = OccupancyGrid(aabb_scale=2, resolution=8, background_shell=True)
    mask = torch.zeros(grid.levels, grid.cells_per_cascade, dtype=torch.bool)
    mask[0, 0] = True  # one cell of the unit cube: its min corner (0, 0, 0)
    mask[-1] = True  # the whole shell
    grid.bitfield.copy_(pack_bits(mask))
    return grid


def test_the_overlay_leaves_the_background_shell_out():
    per_cascade = occupied_cell_centres(_shell_grid())
    assert [cascade for cascade, _, _ in per_cascade] == [0]
    np.testing.assert_allclose(per_cascade[0][1], [[1 / 16, 1 / 16, 1 / 16]])


def test_the_mesh_box_is_the_occupied_cells_of_the_scene_box_not_the_shell():
    trainer = types.SimpleNamespace(grid=_shell_grid(), scene=types.SimpleNamespace(aabb=np.array([[-0.5] * 3, [1.5] * 3])))
    np.testing.assert_allclose(occupied_box(trainer), [[0.0] * 3, [1 / 8] * 3])
