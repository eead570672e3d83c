"""Subgrid partition: box splits, tiling, weight balance, overlap, assignment, ray/box segments."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from trainer.contract.errors import ConfigError
from trainer.parallel.partition import (
    Box,
    BoxLocator,
    assign_boxes,
    box_weights,
    expand_box,
    occupancy_weights,
    ray_box_segments,
    split_boxes,
)
from trainer.render.occupancy import OccupancyGrid, pack_bits

UNIT = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


def _blob_weights(resolution: int = 24, seed: int = 0) -> torch.Tensor:
    """[R, R, R] occupancy (0/1) of an off-centre ball plus sparse random cells, indexed [x, y, z]."""
    g = torch.Generator().manual_seed(seed)
    centres = (torch.arange(resolution) + 0.5) / resolution
    x, y, z = torch.meshgrid(centres, centres, centres, indexing="ij")
    ball = ((x - 0.3) ** 2 + (y - 0.65) ** 2 + (z - 0.4) ** 2) < 0.2**2
    sparse = torch.rand(resolution, resolution, resolution, generator=g) < 0.05
    return (ball | sparse).double()


def _closed_membership(points: torch.Tensor, boxes: list[Box]) -> torch.Tensor:
    """[S, K] bool: point inside the closed box."""
    lo = torch.tensor([b.lo for b in boxes], dtype=points.dtype)
    hi = torch.tensor([b.hi for b in boxes], dtype=points.dtype)
    return ((points[:, None] >= lo) & (points[:, None] <= hi)).all(-1)


# ---------------------------------------------------------------------------- split_boxes


def test_split_boxes_equal_volume_hand_computed():
    aabb = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 1.0]])
    boxes = split_boxes(aabb, None, 3)
    # Root (3 boxes) cut along y (longest, 2) at 2/3 of the way: 4/3; the left child (2 boxes,
    # y-size 4/3 still the longest) at its middle: 2/3.
    expected = [((0, 0, 0), (1, 2 / 3, 1)), ((0, 2 / 3, 0), (1, 4 / 3, 1)), ((0, 4 / 3, 0), (1, 2, 1))]
    assert [b.index for b in boxes] == [0, 1, 2]
    for box, (lo, hi) in zip(boxes, expected):
        assert box.lo == pytest.approx(lo, abs=1e-15)
        assert box.hi == pytest.approx(hi, abs=1e-15)
        assert box.volume == pytest.approx(2 / 3)
    # Shared faces are the same float: the tiling has no gap.
    assert boxes[0].hi[1] == boxes[1].lo[1] and boxes[1].hi[1] == boxes[2].lo[1]


def test_split_boxes_four_boxes_cut_longest_axes():
    boxes = split_boxes(UNIT, None, 4)  # x at 0.5 (ties → lowest axis), then y at 0.5 in each half
    corners = [(b.lo, b.hi) for b in boxes]
    assert corners == [
        ((0.0, 0.0, 0.0), (0.5, 0.5, 1.0)),
        ((0.0, 0.5, 0.0), (0.5, 1.0, 1.0)),
        ((0.5, 0.0, 0.0), (1.0, 0.5, 1.0)),
        ((0.5, 0.5, 0.0), (1.0, 1.0, 1.0)),
    ]


@pytest.mark.parametrize("num_boxes", [1, 2, 3, 5, 8])
def test_split_boxes_tile_the_aabb(num_boxes):
    aabb = torch.tensor([[-1.5, -1.5, -1.5], [2.5, 2.5, 2.5]])
    boxes = split_boxes(aabb, _blob_weights(16, seed=num_boxes), num_boxes)
    assert len(boxes) == num_boxes
    assert sum(b.volume for b in boxes) == pytest.approx(4.0**3, rel=1e-12)
    for a, b in itertools.combinations(boxes, 2):  # pairwise overlap volume is zero
        overlap = math.prod(max(0.0, min(a.hi[i], b.hi[i]) - max(a.lo[i], b.lo[i])) for i in range(3))
        assert overlap == 0.0
    # Random points, points on every box face and corner: located in exactly one box that contains
    # them (closed), and only the half-open rule decides between boxes sharing a face.
    g = torch.Generator().manual_seed(1)
    points = [torch.rand(2000, 3, generator=g, dtype=torch.float64) * 4 - 1.5]
    for b in boxes:
        points.append(torch.tensor(list(itertools.product(*zip(b.lo, b.hi))), dtype=torch.float64))
    points = torch.cat(points)
    located = BoxLocator(boxes).locate(points)
    closed = _closed_membership(points, boxes)
    assert bool(closed[torch.arange(points.shape[0]), located].all())
    lo = torch.tensor([b.lo for b in boxes], dtype=torch.float64)[located]
    hi = torch.tensor([b.hi for b in boxes], dtype=torch.float64)[located]
    on_max_face = hi == aabb[1].double()
    assert bool(((points >= lo) & ((points < hi) | on_max_face)).all())


@pytest.mark.parametrize("num_boxes", [2, 3, 4, 5, 7])
def test_split_boxes_balance_occupied_cells(num_boxes):
    resolution = 24
    weights = _blob_weights(resolution)
    boxes = split_boxes(UNIT, weights, num_boxes)
    total = float(weights.sum())
    # Weight read as a piecewise-constant density: every box holds exactly total/K.
    held = box_weights(boxes, UNIT, weights)
    assert torch.allclose(held, torch.full_like(held, total / num_boxes), rtol=1e-9, atol=0)
    # Counting whole occupied cells by their centre, a box differs from its share by at most the
    # occupied cells its faces cut through (the cell layer along each face).
    centres_1d = (torch.arange(resolution, dtype=torch.float64) + 0.5) / resolution
    centres = torch.stack(torch.meshgrid(centres_1d, centres_1d, centres_1d, indexing="ij"), -1).reshape(-1, 3)
    owner = BoxLocator(boxes).locate(centres)
    occupied = weights.reshape(-1) > 0
    edges = torch.linspace(0, 1, resolution + 1, dtype=torch.float64)
    for box in boxes:
        count = int((occupied & (owner == box.index)).sum())
        fractions = [
            (edges[1:].clamp_max(box.hi[a]) - edges[:-1].clamp_min(box.lo[a])).clamp_min(0) * resolution
            for a in range(3)
        ]
        inside = torch.einsum("i,j,k->ijk", *fractions).reshape(-1)
        cut_cells = int((occupied & (inside > 0) & (inside < 1 - 1e-12)).sum())
        assert abs(count - total / num_boxes) <= cut_cells, (box, count, total / num_boxes, cut_cells)
    # An unbalanced (volume) split would be far off for this off-centre blob.
    volume_boxes = split_boxes(UNIT, None, num_boxes)
    assert float((box_weights(volume_boxes, UNIT, weights) - total / num_boxes).abs().max()) > 0.05 * total


def test_split_boxes_uniform_and_empty_weights_cut_by_volume():
    expected = split_boxes(UNIT, None, 5)
    for weights in (torch.ones(8, 8, 8), torch.zeros(8, 8, 8)):
        boxes = split_boxes(UNIT, weights, 5)
        for b, e in zip(boxes, expected):
            assert b.lo == pytest.approx(e.lo, abs=1e-12) and b.hi == pytest.approx(e.hi, abs=1e-12)


def test_split_boxes_weight_in_one_cell_splits_inside_it():
    weights = torch.zeros(4, 4, 4)
    weights[3, 0, 0] = 1.0  # all weight in the cell x ∈ [0.75, 1]: the x cut halves that cell
    boxes = split_boxes(UNIT, weights, 2)
    assert boxes[0].hi[0] == pytest.approx(0.875)


def test_split_boxes_errors():
    with pytest.raises(ConfigError, match=r"parallel\.num_subgrids.*got 0"):
        split_boxes(UNIT, None, 0)
    with pytest.raises(ConfigError, match=r"parallel\.num_subgrids"):
        split_boxes(UNIT, None, 2.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        split_boxes(UNIT, -torch.ones(2, 2, 2), 2)
    with pytest.raises(ValueError, match=r"\[Rx, Ry, Rz\]"):
        split_boxes(UNIT, torch.ones(4, 4), 2)
    with pytest.raises(ValueError, match="max > min"):
        split_boxes(torch.tensor([[0.0, 0, 0], [1, 0, 1]]), None, 2)


def test_occupancy_weights_resample_the_bitfield_and_density():
    grid = OccupancyGrid(aabb_scale=2, resolution=4)
    mask = torch.zeros(2, 64, dtype=torch.bool)
    mask[0, 1 + 2 * 4 + 3 * 16] = True  # cascade 0 (unit cube) cell x=1, y=2, z=3
    mask[1, 0] = True  # cascade 1 (the box [-0.5, 1.5]³) corner cell x=y=z=0
    grid.bitfield.copy_(pack_bits(mask))
    grid.density[0, 1 + 2 * 4 + 3 * 16] = 0.25
    # Resample over the unit cube at cascade 0's resolution: exactly the cascade-0 mask.
    unit = occupancy_weights(grid, UNIT, 4)
    expected = torch.zeros(4, 4, 4)
    expected[1, 2, 3] = 1.0
    assert torch.equal(unit, expected)
    assert occupancy_weights(grid, UNIT, 4, source="density")[1, 2, 3] == pytest.approx(0.25)
    # Over the whole scene box at 8³: a point outside the unit cube reads cascade 1, whose corner
    # cell [-0.5, 0]³ covers the 8³ cells [0, 2)³.
    scene = occupancy_weights(grid, grid.aabb, 8)
    assert scene[:2, :2, :2].sum() == 8 and scene.sum() == 8 + 1  # + the cascade-0 cell's centre
    with pytest.raises(ValueError, match="source"):
        occupancy_weights(grid, UNIT, 4, source="bits")


# ---------------------------------------------------------------------------- expand_box / locator


def test_expand_box_enlarges_and_clips_to_the_aabb():
    left, right = split_boxes(UNIT, None, 2)
    lo, hi = expand_box(left, 0.1, UNIT)
    assert lo.tolist() == [0.0, 0.0, 0.0]  # clipped at the AABB
    assert hi.tolist() == pytest.approx([0.55, 1.0, 1.0])
    inner = Box((0.25, 0.25, 0.25), (0.5, 0.75, 0.5), 0)
    lo, hi = expand_box(inner, 0.2, UNIT)
    assert lo.tolist() == pytest.approx([0.2, 0.15, 0.2]) and hi.tolist() == pytest.approx([0.55, 0.85, 0.55])
    for bad in (-0.1, 0.6, float("nan")):
        with pytest.raises(ConfigError, match=r"parallel\.overlap"):
            expand_box(inner, bad, UNIT)


def test_box_locator_half_open_faces_and_clamping():
    boxes = split_boxes(UNIT, None, 2)  # cut at x = 0.5
    points = torch.tensor(
        [
            [0.5, 0.3, 0.3],  # on the shared face → the box on its max side
            [0.4999999, 0.3, 0.3],
            [0.0, 0.0, 0.0],
            [1.0, 1.0, 1.0],  # the AABB's max corner is closed
            [-0.2, 0.5, 0.5],  # outside: clamped onto the AABB
            [1.3, 2.0, -1.0],
        ]
    )
    assert BoxLocator(boxes).locate(points).tolist() == [1, 0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="do not tile"):
        BoxLocator([boxes[0], Box((0.6, 0.0, 0.0), (1.0, 1.0, 1.0), 1)])


# ---------------------------------------------------------------------------- assign_boxes


def test_assign_boxes_contiguous_runs():
    assert assign_boxes(5, 2) == [0, 0, 0, 1, 1]
    assert assign_boxes(7, 3) == [0, 0, 0, 1, 1, 2, 2]
    assert assign_boxes(4, 4) == [0, 1, 2, 3]
    assert assign_boxes(3, 1) == [0, 0, 0]


def test_assign_boxes_longest_processing_time():
    # Descending: 5 → r0; 4 → r1; 3 → r1 (4 < 5); 3 → r0 (5 < 7); 3 → r1 (7 < 8). Loads 8 / 10.
    assert assign_boxes(5, 2, [5.0, 4.0, 3.0, 3.0, 3.0]) == [0, 1, 1, 0, 1]
    # Zero costs still give every rank a box (ties go to the rank with fewer boxes).
    assert assign_boxes(4, 3, [0.0, 0.0, 0.0, 0.0]) == [0, 1, 2, 0]
    assert assign_boxes(3, 2, torch.tensor([1.0, 10.0, 1.0])) == [1, 0, 1]


def test_assign_boxes_errors():
    with pytest.raises(ConfigError, match=r"^parallel\.num_subgrids: expected at least one box per rank \(>= world size 3\) in subgrid mode, got 2$"):
        assign_boxes(2, 3)
    with pytest.raises(ConfigError, match=r"distributed\.world_size"):
        assign_boxes(2, 0)
    with pytest.raises(ValueError, match="weights"):
        assign_boxes(3, 2, [1.0, 2.0])
    with pytest.raises(ValueError, match="weights"):
        assign_boxes(2, 2, [1.0, -1.0])


# ---------------------------------------------------------------------------- ray_box_segments


def test_ray_box_segments_hand_computed():
    boxes = split_boxes(UNIT, None, 2)  # x ∈ [0, 0.5) and [0.5, 1]
    rays_o = torch.tensor([[-1.0, 0.5, 0.5], [2.0, 0.25, 0.5], [-1.0, 2.0, 0.5], [0.75, 0.5, -1.0]])
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    seg = ray_box_segments(rays_o, rays_d, boxes)
    assert seg.hit.tolist() == [[True, True], [True, True], [False, False], [False, True]]
    assert seg.t_enter[0].tolist() == [1.0, 1.5] and seg.t_exit[0].tolist() == [1.5, 2.0]
    assert seg.t_enter[1].tolist() == [1.5, 1.0] and seg.t_exit[1].tolist() == [2.0, 1.5]
    assert seg.t_enter[3, 1] == 1.0 and seg.t_exit[3, 1] == 2.0
    assert seg.order.tolist() == [[0, 1], [1, 0], [0, 1], [1, 0]]


def test_ray_box_segments_order_is_front_to_back():
    boxes = split_boxes(UNIT, _blob_weights(12), 6)
    g = torch.Generator().manual_seed(3)
    rays_o = torch.randn(300, 3, generator=g) * 2 + 0.5
    rays_d = torch.nn.functional.normalize(torch.rand(300, 3, generator=g) - rays_o, dim=-1)
    seg = ray_box_segments(rays_o, rays_d, boxes)
    enter = torch.gather(seg.t_enter, 1, seg.order)
    exit_ = torch.gather(seg.t_exit, 1, seg.order)
    hit = torch.gather(seg.hit, 1, seg.order)
    n_hit = hit.sum(1)
    assert bool((hit == (torch.arange(6) < n_hit[:, None])).all())  # hit boxes first
    both = hit[:, 1:] & hit[:, :-1]
    # consecutive hit boxes abut: one is left where the next is entered, in increasing distance
    assert torch.allclose(exit_[:, :-1][both], enter[:, 1:][both], atol=1e-5)
    assert bool((enter[:, 1:][both] >= enter[:, :-1][both]).all())
    assert int(n_hit.max()) >= 3


def test_assign_boxes_by_static_rank_shares():
    # one box each, the K − W others by largest remainder of the shares, contiguous runs
    assert assign_boxes(6, 2, rank_shares=[0.75, 0.25]) == [0, 0, 0, 0, 1, 1]
    assert assign_boxes(4, 4, rank_shares=[0.1, 0.2, 0.3, 0.4]) == [0, 1, 2, 3]
    assert assign_boxes(7, 3, rank_shares=[0.2, 0.2, 0.6]) == [0, 0, 1, 1, 2, 2, 2]  # 4 extra: 0.8, 0.8, 2.4
    assert assign_boxes(5, 2, rank_shares=[0.5, 0.5]) == assign_boxes(5, 2)
