"""Cutting the scene box into subgrid boxes and giving the boxes to ranks (DESIGN.md §3).

Reference: Li et al. 2024, *NeRF-XL: Scaling NeRFs with Multiple GPUs*, §4 (spatial partition
balanced by occupancy, segments composited front to back); Bentley 1975 (k-d trees) for the
recursive median cuts.

Partition
---------
:func:`split_boxes` cuts the scene AABB recursively: a node that must hold ``k`` boxes is cut
along its longest axis into children holding ``⌈k/2⌉`` and ``⌊k/2⌋`` boxes, at the point where
the left child holds the share ``⌈k/2⌉/k`` of the node's weight. Weights are given on a grid of
cells over the AABB (for example the occupancy of the occupancy grid, :func:`occupancy_weights`)
and read as a piecewise-constant density (a cell's weight spread uniformly over the cell), so the
cut is the exact weighted quantile: every box holds ``total/K`` of the weight up to float
rounding. Without weights the density is uniform and the boxes have equal volumes. A cut value
is shared by the two children, so the boxes tile the AABB exactly: no gaps, no overlap.

Ownership of points
-------------------
A point belongs to exactly one box: boxes are half open, ``lo ≤ p < hi`` on every axis, closed
only on the AABB's max faces (:class:`BoxLocator`). Samples are assigned to boxes with it, so a
sample on a shared face is rendered by one box only and compositing the boxes is exact.

The encoding domain of a box may be enlarged (:func:`expand_box`, ``parallel.overlap``) so that
its hash grid also sees a margin of its neighbours; ownership stays with the un-enlarged box.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from trainer.contract.errors import ConfigError
from trainer.contract.world import check_boxes_per_rank
from trainer.parallel.balance import split_by_shares
from trainer.render.aabb import ray_aabb_intersect
from trainer.render.occupancy import OccupancyGrid

__all__ = [
    "Box",
    "BoxLocator",
    "RayBoxSegments",
    "assign_boxes",
    "box_weights",
    "expand_box",
    "occupancy_weights",
    "ray_box_segments",
    "split_boxes",
]

_Vec3 = tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Box:
    """One subgrid box: an axis-aligned part of the scene AABB.

    Attributes:
        lo: (x, y, z) min corner, world units (Python floats = float64, exact cut values).
        hi: (x, y, z) max corner, ``hi > lo`` on every axis.
        index: the box's number k in ``0 .. K-1`` (depth-first leaf order of the k-d tree, so
            neighbouring indices are neighbouring regions).
    """

    lo: _Vec3
    hi: _Vec3
    index: int

    def as_aabb(self, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
        """[2, 3] tensor (min corner, max corner) in ``dtype`` on ``device``."""
        return torch.tensor([self.lo, self.hi], dtype=dtype, device=device)

    @property
    def size(self) -> _Vec3:
        """(x, y, z) side lengths ``hi − lo``."""
        return tuple(h - l for l, h in zip(self.lo, self.hi))  # type: ignore[return-value]

    @property
    def volume(self) -> float:
        """Product of the side lengths (world units³)."""
        return math.prod(self.size)


def _check_aabb(aabb: Tensor | Sequence, where: str) -> Tensor:
    """[2, 3] float64 CPU copy of ``aabb``; ValueError when malformed."""
    box = torch.as_tensor(aabb).detach().to(device="cpu", dtype=torch.float64)
    if box.shape != (2, 3) or not bool(torch.isfinite(box).all()) or not bool((box[1] > box[0]).all()):
        raise ValueError(
            f"{where}: aabb must be [2, 3] finite (min corner, max corner) with max > min, got {box.tolist()}"
        )
    return box


def _check_count(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}: expected an integer >= 1, got {value!r}")
    return value


def _check_weights(weights: Tensor | None, where: str) -> Tensor | None:
    if weights is None:
        return None
    w = torch.as_tensor(weights).detach().to(device="cpu", dtype=torch.float64)
    if w.ndim != 3 or min(w.shape) < 1:
        raise ValueError(f"{where}: occupancy_weights must be a [Rx, Ry, Rz] grid, got shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError(f"{where}: occupancy_weights must be finite and >= 0")
    return w


def _cell_fractions(lo: float, hi: float, edges: Tensor) -> Tensor:
    """[R] share of each cell ``[edges[i], edges[i+1]]`` that lies inside ``[lo, hi]``."""
    covered = (edges[1:].clamp_max(hi) - edges[:-1].clamp_min(lo)).clamp_min(0)
    return covered / (edges[1:] - edges[:-1])


def _grid_edges(aabb: Tensor, shape: Sequence[int]) -> list[Tensor]:
    """Cell boundaries [R_a + 1] float64 of a weight grid of ``shape`` spanning ``aabb``."""
    return [
        torch.linspace(float(aabb[0, a]), float(aabb[1, a]), shape[a] + 1, dtype=torch.float64) for a in range(3)
    ]


def _layer_weights(lo: _Vec3, hi: _Vec3, axis: int, weights: Tensor, edges: list[Tensor]) -> Tensor:
    """[R_axis] weight inside the box ``[lo, hi]`` of each cell layer orthogonal to ``axis``."""
    fractions = [_cell_fractions(lo[a], hi[a], edges[a]) for a in range(3)]
    per_axis = torch.einsum("ijk,i,j,k->ijk", weights, *fractions)
    other = tuple(a for a in range(3) if a != axis)
    return per_axis.sum(dim=other)


def _weighted_cut(lo: float, hi: float, layer_weights: Tensor, edges: Tensor, share: float) -> float:
    """The coordinate ``c`` in (lo, hi) where the weight in ``[lo, c]`` is ``share`` of the total.

    The weight of layer i is spread uniformly over ``[max(e_i, lo), min(e_{i+1}, hi)]``; the
    cumulative weight is piecewise linear between these knots and is inverted on the segment where
    it first reaches the target. Falls back to the geometric cut ``lo + share·(hi − lo)`` when the
    node holds no weight.
    """
    total = float(layer_weights.sum())
    geometric = lo + share * (hi - lo)
    if total <= 0.0:
        return geometric
    knots = edges.clamp(lo, hi)
    cumulative = torch.cat((torch.zeros(1, dtype=torch.float64), torch.cumsum(layer_weights, 0)))
    target = share * total
    j = int(torch.searchsorted(cumulative[1:], torch.tensor(target, dtype=torch.float64)))
    j = min(j, layer_weights.numel() - 1)
    fraction = (target - float(cumulative[j])) / float(layer_weights[j])
    cut = float(knots[j]) + fraction * float(knots[j + 1] - knots[j])
    return cut if lo < cut < hi else geometric


def split_boxes(aabb: Tensor, occupancy_weights: Tensor | None, num_boxes: int) -> list[Box]:
    """Cut the scene AABB into ``num_boxes`` boxes balanced by weight (recursive median cuts).

    A node holding ``k > 1`` boxes is cut along its longest axis (the lowest axis on ties) into a
    left child of ``⌈k/2⌉`` and a right child of ``⌊k/2⌋`` boxes, at the weighted quantile
    ``⌈k/2⌉/k`` of the node's weight (see the module docstring: weights are a piecewise-constant
    density over their cells, so every box holds ``total/K`` of the weight up to rounding).

    Args:
        aabb: [2, 3] scene box (min corner, max corner), world units.
        occupancy_weights: [Rx, Ry, Rz] float ≥ 0, indexed ``[x, y, z]``, the weight of each cell of
            a regular grid spanning ``aabb`` (e.g. :func:`occupancy_weights`); None = uniform, which
            gives boxes of equal volume. A node without any weight is cut by volume.
        num_boxes: K ≥ 1 (``parallel.num_subgrids``); need not be a power of two.

    Returns:
        K :class:`Box` es with ``index`` 0..K-1 in depth-first order (left child first); they tile
        ``aabb`` exactly (shared cut values, no gap, no overlap).

    Raises:
        ConfigError: if ``num_boxes`` is not an integer ≥ 1 (names ``parallel.num_subgrids``).
        ValueError: for a malformed ``aabb`` or weights (wrong rank, negative, not finite).

    Example:
        >>> boxes = split_boxes(torch.tensor([[0.0, 0, 0], [1, 2, 1]]), None, 2)
        >>> [(b.lo, b.hi) for b in boxes]
        [((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), ((0.0, 1.0, 0.0), (1.0, 2.0, 1.0))]
    """
    num_boxes = _check_count(num_boxes, "parallel.num_subgrids")
    box = _check_aabb(aabb, "split_boxes")
    weights = _check_weights(occupancy_weights, "split_boxes")
    if weights is None:
        weights = torch.ones(1, 1, 1, dtype=torch.float64)
    edges = _grid_edges(box, weights.shape)

    leaves: list[tuple[_Vec3, _Vec3]] = []

    def split(lo: _Vec3, hi: _Vec3, k: int) -> None:
        if k == 1:
            leaves.append((lo, hi))
            return
        sizes = [h - l for l, h in zip(lo, hi)]
        axis = sizes.index(max(sizes))
        k_left = (k + 1) // 2
        layers = _layer_weights(lo, hi, axis, weights, edges)
        cut = _weighted_cut(lo[axis], hi[axis], layers, edges[axis], k_left / k)
        left_hi = tuple(cut if a == axis else hi[a] for a in range(3))
        right_lo = tuple(cut if a == axis else lo[a] for a in range(3))
        split(lo, left_hi, k_left)  # type: ignore[arg-type]
        split(right_lo, hi, k - k_left)  # type: ignore[arg-type]

    split(tuple(box[0].tolist()), tuple(box[1].tolist()), num_boxes)  # type: ignore[arg-type]
    return [Box(lo, hi, index) for index, (lo, hi) in enumerate(leaves)]


def box_weights(boxes: Sequence[Box], aabb: Tensor, occupancy_weights: Tensor | None) -> Tensor:
    """Weight held by each box, reading the grid as a piecewise-constant density (as
    :func:`split_boxes` does): ``Σ_cells w_cell · |cell ∩ box| / |cell|``.

    Args:
        boxes: K boxes inside ``aabb``.
        aabb: [2, 3] the box the weight grid spans.
        occupancy_weights: [Rx, Ry, Rz] ≥ 0 indexed ``[x, y, z]``, or None for uniform weight 1 per
            unit volume of ``aabb`` (so the result is each box's share of the volume).

    Returns:
        [K] float64.

    Raises:
        ValueError: for a malformed ``aabb`` or weights.
    """
    grid_box = _check_aabb(aabb, "box_weights")
    weights = _check_weights(occupancy_weights, "box_weights")
    if weights is None:
        weights = torch.ones(1, 1, 1, dtype=torch.float64)
    edges = _grid_edges(grid_box, weights.shape)
    out = torch.zeros(len(boxes), dtype=torch.float64)
    for k, b in enumerate(boxes):
        fractions = [_cell_fractions(b.lo[a], b.hi[a], edges[a]) for a in range(3)]
        out[k] = torch.einsum("ijk,i,j,k->", weights, *fractions)
    return out


@torch.no_grad()
def occupancy_weights(
    grid: OccupancyGrid, aabb: Tensor, resolution: int = 64, *, source: str = "bitfield"
) -> Tensor:
    """The occupancy grid resampled onto a regular grid over ``aabb``, as weights for :func:`split_boxes`.

    Each cell of an ``R³`` grid spanning ``aabb`` takes the value of the occupancy-grid cell that
    contains its centre, looked up in the finest cascade containing it (cascade 0 inside the unit
    cube, instant-ngp ``mip_from_pos``; see :meth:`OccupancyGrid.locate`).

    Args:
        grid: the occupancy grid.
        aabb: [2, 3] box to resample over (usually the scene AABB).
        resolution: R, cells per axis (≥ 1).
        source: ``"bitfield"`` (1 for occupied cells, else 0) or ``"density"`` (the stored optical
            thickness σ·Δt, unseen cells 0).

    Returns:
        [R, R, R] float32 on CPU, indexed ``[x, y, z]``.

    Raises:
        ValueError: for a bad ``resolution``, ``source`` or ``aabb``.
    """
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 1:
        raise ValueError(f"occupancy_weights: resolution must be an integer >= 1, got {resolution!r}")
    if source not in ("bitfield", "density"):
        raise ValueError(f"occupancy_weights: source must be 'bitfield' or 'density', got {source!r}")
    box = _check_aabb(aabb, "occupancy_weights")
    device = grid.density.device
    unit_centres = (torch.arange(resolution, dtype=torch.float64) + 0.5) / resolution
    centres_1d = [float(box[0, a]) + unit_centres * float(box[1, a] - box[0, a]) for a in range(3)]
    gx, gy, gz = torch.meshgrid(*centres_1d, indexing="ij")
    points = torch.stack((gx, gy, gz), dim=-1).reshape(-1, 3).to(device=device, dtype=torch.float32)
    if source == "bitfield":
        values = grid.occupied(points).float()
    else:
        cascade, cell, inside = grid.locate(points)
        values = grid.density[cascade, cell].clamp_min(0) * inside
    return values.reshape(resolution, resolution, resolution).cpu()


def expand_box(box: Box, overlap: float, aabb: Tensor) -> tuple[Tensor, Tensor]:
    """The encoding domain of a box: enlarged by ``overlap`` × its size on each side, clipped to
    the AABB (``parallel.overlap``, DESIGN.md §3).

    ``lo' = max(lo − overlap·(hi − lo), aabb_lo)``, ``hi' = min(hi + overlap·(hi − lo), aabb_hi)``.
    Only the field's domain grows; samples stay owned by the un-enlarged box (:class:`BoxLocator`).

    Args:
        box: the box.
        overlap: fraction of the box's size, in [0, 0.5].
        aabb: [2, 3] the scene box.

    Returns:
        (lo [3], hi [3]) float64 on CPU.

    Raises:
        ConfigError: if ``overlap`` is not in [0, 0.5] (names ``parallel.overlap``).
        ValueError: for a malformed ``aabb``.
    """
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0.0 <= overlap <= 0.5:
        raise ConfigError(f"parallel.overlap: expected a number in [0, 0.5], got {overlap!r}")
    scene = _check_aabb(aabb, "expand_box")
    lo = torch.tensor(box.lo, dtype=torch.float64)
    hi = torch.tensor(box.hi, dtype=torch.float64)
    margin = overlap * (hi - lo)
    return torch.maximum(lo - margin, scene[0]), torch.minimum(hi + margin, scene[1])


def assign_boxes(
    num_boxes: int,
    world_size: int,
    weights: Sequence[float] | Tensor | None = None,
    *,
    rank_shares: Sequence[float] | None = None,
) -> list[int]:
    """Owner rank of each box.

    Without weights: contiguous runs of box indices, the first ``K mod W`` ranks owning
    ``⌈K/W⌉`` boxes and the others ``⌊K/W⌋`` (neighbouring boxes stay on one rank); with
    ``rank_shares`` (static shares from ``distributed.gpu_capabilities``) rank r's run is one box
    plus its largest-remainder share of the other ``K − W`` boxes
    (:func:`~trainer.parallel.balance.split_by_shares`). With weights (e.g. the measured compute
    cost of each box): greedy longest-processing-time assignment (Graham 1969) — boxes in
    decreasing weight, each to the rank with the least load so far, ties to the rank with fewer
    boxes, then the lower rank — so every rank gets at least one box.

    Args:
        num_boxes: K (``parallel.num_subgrids``).
        world_size: W (``distributed.world_size``).
        weights: [K] costs ≥ 0, or None.
        rank_shares: [W] shares > 0 summing to 1 (only without ``weights``), or None for equal runs.

    Returns:
        K ranks in ``0 .. W-1``; ``owners[k]`` owns box k.

    Raises:
        ConfigError: if K or W is not an integer ≥ 1, or K < W (names ``parallel.num_subgrids`` and
            both values).
        ValueError: if ``weights`` is not K finite values ≥ 0.

    Example:
        >>> assign_boxes(5, 2)
        [0, 0, 0, 1, 1]
    """
    num_boxes = _check_count(num_boxes, "parallel.num_subgrids")
    world_size = _check_count(world_size, "distributed.world_size")
    check_boxes_per_rank(num_boxes, world_size)
    if weights is None:
        if rank_shares is None:
            base, extra = divmod(num_boxes, world_size)
            counts = [base + (1 if rank < extra else 0) for rank in range(world_size)]
        else:
            assert len(rank_shares) == world_size, (rank_shares, world_size)
            counts = [1 + n for n in split_by_shares(num_boxes - world_size, rank_shares)]
        owners: list[int] = []
        for rank, count in enumerate(counts):
            owners += [rank] * count
        return owners
    assert rank_shares is None, "assign_boxes: rank_shares applies to the contiguous assignment only"
    cost = torch.as_tensor(weights, dtype=torch.float64).flatten()
    if cost.numel() != num_boxes or not bool(torch.isfinite(cost).all()) or bool((cost < 0).any()):
        raise ValueError(f"assign_boxes: weights must be {num_boxes} finite values >= 0, got {cost.tolist()}")
    load = [0.0] * world_size
    count = [0] * world_size
    owners = [0] * num_boxes
    for k in sorted(range(num_boxes), key=lambda k: (-float(cost[k]), k)):
        rank = min(range(world_size), key=lambda r: (load[r], count[r], r))
        owners[k] = rank
        load[rank] += float(cost[k])
        count[rank] += 1
    return owners


class BoxLocator:
    """Which box owns each point: ``lo ≤ p < hi`` per axis, closed on the tiling's max faces.

    Built once from boxes that tile an AABB (as :func:`split_boxes` returns). The distinct box
    faces cut each axis into slabs; every point is located with one ``bucketize`` per axis and a
    table lookup, O(S·log K). Points outside the tiling are first clamped onto it (as
    :meth:`NGPField.normalise_positions` does), so every point has exactly one owner — also samples
    that float rounding puts a hair outside the scene box.

    Args:
        boxes: boxes tiling their bounding box, ``boxes[k].index == k``.

    Raises:
        ValueError: if the boxes are empty, misnumbered, or leave part of their bounding box
            uncovered.
    """

    def __init__(self, boxes: Sequence[Box]) -> None:
        if not boxes or any(b.index != k for k, b in enumerate(boxes)):
            raise ValueError("BoxLocator: expected a non-empty list of boxes with box.index == position")
        lo = torch.tensor([b.lo for b in boxes], dtype=torch.float64)
        hi = torch.tensor([b.hi for b in boxes], dtype=torch.float64)
        self.edges = [torch.unique(torch.cat((lo[:, a], hi[:, a]))) for a in range(3)]  # sorted
        shape = [e.numel() - 1 for e in self.edges]
        table = torch.full(shape, -1, dtype=torch.long)
        for k in range(len(boxes)):
            first = [int(torch.searchsorted(self.edges[a], lo[k, a])) for a in range(3)]
            last = [int(torch.searchsorted(self.edges[a], hi[k, a])) for a in range(3)]
            table[first[0] : last[0], first[1] : last[1], first[2] : last[2]] = k
        if bool((table < 0).any()):
            raise ValueError("BoxLocator: the boxes do not tile their bounding box (a region has no box)")
        self.table = table
        self.n_boxes = len(boxes)

    def locate(self, points: Tensor) -> Tensor:
        """Box index of each point.

        Args:
            points: [S, 3] float world positions.

        Returns:
            [S] int64 in ``0 .. K-1`` on the points' device.
        """
        assert points.ndim == 2 and points.shape[-1] == 3, tuple(points.shape)
        device = points.device
        slab = []
        for a in range(3):
            edges = self.edges[a].to(device=device, dtype=points.dtype)
            coordinate = points[:, a].clamp(edges[0], edges[-1])
            # right=True: a point on an interior face goes to the slab on its max side (half open).
            slab.append(torch.bucketize(coordinate, edges[1:-1], right=True))
        table = self.table.to(device)
        return table[slab[0], slab[1], slab[2]]


class RayBoxSegments(NamedTuple):
    """Where rays cross each box (:func:`ray_box_segments`).

    Attributes:
        t_enter: [n_rays, K] distance at which each ray enters each box.
        t_exit: [n_rays, K] distance at which it leaves.
        hit: [n_rays, K] bool, True where the ray crosses the box (``t_enter < t_exit``).
        order: [n_rays, K] int64, the box indices each ray meets front to back (missed boxes last,
            in index order).
    """

    t_enter: Tensor
    t_exit: Tensor
    hit: Tensor
    order: Tensor


def ray_box_segments(rays_o: Tensor, rays_d: Tensor, boxes: Sequence[Box], near: float = 0.0) -> RayBoxSegments:
    """Entry/exit distances of rays in every box and the front-to-back order of the boxes per ray.

    Each box is intersected with the slab method (:func:`trainer.render.aabb.ray_aabb_intersect`);
    boxes are disjoint and convex, so sorting the hit boxes by entry distance orders the ray's
    segments front to back (NeRF-XL §4).

    Args:
        rays_o: [n_rays, 3] float ray origins, world units.
        rays_d: [n_rays, 3] ray directions (unit length → distances in world units).
        boxes: K boxes.
        near: smallest distance that counts (≥ 0).

    Returns:
        :class:`RayBoxSegments` (t_enter, t_exit [n, K] in the rays' dtype, hit [n, K] bool,
        order [n, K] int64).

    Raises:
        ValueError: if the shapes are wrong (from ``ray_aabb_intersect``) or ``boxes`` is empty.
    """
    if not boxes:
        raise ValueError("ray_box_segments: boxes must not be empty")
    t_enter, t_exit, hit = zip(
        *(ray_aabb_intersect(rays_o, rays_d, b.as_aabb(rays_o.device, rays_o.dtype), near=near) for b in boxes)
    )
    t_enter_nk = torch.stack(t_enter, dim=1)
    t_exit_nk = torch.stack(t_exit, dim=1)
    hit_nk = torch.stack(hit, dim=1)
    sort_key = torch.where(hit_nk, t_enter_nk, torch.full_like(t_enter_nk, float("inf")))
    order = torch.argsort(sort_key, dim=1, stable=True)
    return RayBoxSegments(t_enter_nk, t_exit_nk, hit_nk, order)
