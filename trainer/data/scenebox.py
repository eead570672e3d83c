"""The scene box of captures without an authored one (LLFF, COLMAP), derived from the data.

The box is found in the normalised ("NeRF") world of :func:`trainer.data.convention.normalize_poses`:

* COLMAP: the sparse points, after outlier rejection (:func:`points_box`): points seen in fewer than
  two images or with a reprojection error above three times the median are dropped, then per axis
  the 1st–99th percentile.
* LLFF: the near/far bounds of ``poses_bounds.npy`` inside every camera's frustum
  (:func:`frusta_box`): the four image corners and the centre pixel at the near and at the far
  depth of each camera, then per axis the 1st–99th percentile.

:func:`place_capture` then puts the capture into instant-ngp's unit-cube world: content that fits
the unit cube is mapped onto it (centre at 0.5, longest side × :data:`BOX_MARGIN` = 1, the way a
``transforms.json`` ``aabb`` key does) with ``aabb_scale`` 1; larger content keeps instant-ngp's
scale and gets the smallest power-of-two ``aabb_scale`` holding it. A box that leaves more than
:data:`MAX_MISSED_RAY_FRACTION` of the cameras' pixel rays outside it (:func:`missed_ray_fraction`:
sparse points only on the central object, a background around it) is not mapped onto the unit
cube, since those rays would have no sample and could only show the background colour: instant-ngp's
scale and the smallest power-of-two cube holding the box and the cameras, so that every ray
starts inside the box. Forward-facing captures
(:func:`forward_facing_spread_deg`) are boxed the same way: the content between the near and far
bounds, not a cube of fixed size around the cameras.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainer.data.scene import Intrinsics

#: The unit cube's side is the box's longest side times this (room for points just outside the
#: percentile range).
BOX_MARGIN = 1.1
#: Per-axis percentiles of the points kept in the box.
BOX_PERCENTILES = (1.0, 99.0)
#: Optical axes all within this many degrees of their mean: a forward-facing capture.
FORWARD_FACING_DEG = 40.0


@dataclasses.dataclass(frozen=True)
class SceneBox:
    """An axis-aligned box in the normalised world, and how it was found.

    Attributes:
        lo, hi: [3] float64 corners.
        how: one line naming the source and the rejection applied.
    """

    lo: np.ndarray
    hi: np.ndarray
    how: str

    @property
    def size(self) -> np.ndarray:
        return self.hi - self.lo


def robust_box(points: np.ndarray, how: str) -> SceneBox | None:
    """Per-axis :data:`BOX_PERCENTILES` box of ``points`` [n, 3]; None for fewer than 4 finite points
    or a box without volume in some axis."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    points = points[np.all(np.isfinite(points), axis=1)]
    if points.shape[0] < 4:
        return None
    lo, hi = np.percentile(points, BOX_PERCENTILES, axis=0)
    if not np.all(hi - lo > 1e-9 * max(1.0, float(np.abs(points).max()))):
        return None
    return SceneBox(lo=lo, hi=hi, how=how)


def points_box(xyz: np.ndarray, errors: np.ndarray, track_lengths: np.ndarray) -> SceneBox | None:
    """The box of a COLMAP sparse point cloud after outlier rejection.

    Args:
        xyz: [n, 3] points in the normalised world.
        errors: [n] mean reprojection errors (pixels).
        track_lengths: [n] number of images observing each point.

    Returns:
        The box, or None when too few points survive.
    """
    errors = np.asarray(errors, dtype=np.float64)
    tracks = np.asarray(track_lengths)
    keep = tracks >= 2
    if np.any(keep):
        median = float(np.median(errors[keep]))
        keep &= errors <= 3.0 * max(median, 1e-6)
    n_kept = int(np.count_nonzero(keep))
    how = (
        f"sparse points: {n_kept} of {len(errors)} kept (seen in ≥ 2 images, reprojection error ≤ 3× median), "
        f"per-axis {BOX_PERCENTILES[0]:g}–{BOX_PERCENTILES[1]:g} percentile"
    )
    return robust_box(np.asarray(xyz)[keep], how)


def frusta_box(c2w: np.ndarray, intrinsics: list[Intrinsics], near: np.ndarray, far: np.ndarray) -> SceneBox | None:
    """The box of the camera frusta between each camera's near and far depth.

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL camera axes, normalised world.
        intrinsics: n pinhole cameras (distortion ignored: the corners move by a few pixels).
        near, far: [n] depths along the optical axis, normalised-world units.
    """
    points = []
    for cam, intr, z_near, z_far in zip(np.asarray(c2w), intrinsics, near, far):
        pixels = [(0, 0), (intr.width, 0), (0, intr.height), (intr.width, intr.height), (intr.cx, intr.cy)]
        for u, v in pixels:
            ray = np.array([(u - intr.cx) / intr.fx, -(v - intr.cy) / intr.fy, -1.0])
            direction = cam[:3, :3] @ ray
            points.append(cam[:3, 3] + z_near * direction)
            points.append(cam[:3, 3] + z_far * direction)
    how = (
        f"near/far bounds inside the {len(intrinsics)} camera frusta, "
        f"per-axis {BOX_PERCENTILES[0]:g}–{BOX_PERCENTILES[1]:g} percentile"
    )
    return robust_box(np.array(points), how)


def unit_cube_mapping(box: SceneBox) -> tuple[float, np.ndarray]:
    """``(scale, offset [3])`` for :func:`trainer.data.convention.nerf_to_unit_cube` that puts the
    box's centre at 0.5 and makes its longest side × :data:`BOX_MARGIN` the unit length."""
    side = float(np.max(box.size)) * BOX_MARGIN
    scale = 1.0 / side
    centre = 0.5 * (box.lo + box.hi)
    return scale, 0.5 - centre * scale


def forward_facing_spread_deg(c2w: np.ndarray) -> float:
    """Largest angle (degrees) between a camera's optical axis and the mean optical axis."""
    backs = np.asarray(c2w)[:, :3, 2]
    backs = backs / np.linalg.norm(backs, axis=1, keepdims=True)
    mean = backs.sum(axis=0)
    norm = np.linalg.norm(mean)
    if norm < 1e-12:
        return 180.0
    cosines = np.clip(backs @ (mean / norm), -1.0, 1.0)
    return float(np.degrees(np.arccos(cosines.min())))


def describe_box(box: SceneBox, scale: float, forward_spread_deg: float) -> str:
    """One line for ``Scene.notes``: the box, its source and the capture kind."""
    kind = (
        f"forward-facing (optical axes within {forward_spread_deg:.0f}° of their mean): tight box, no space behind the cameras"
        if forward_spread_deg <= FORWARD_FACING_DEG
        else f"optical axes spread {forward_spread_deg:.0f}°"
    )
    size = " x ".join(f"{v:.3g}" for v in box.size)
    return f"scene box from the data: {box.how}; size {size} (normalised world), scale {scale:.4g}; {kind}"


#: A content box missed by more than this fraction of the cameras' pixel rays is not the unit cube.
MAX_MISSED_RAY_FRACTION = 0.05
#: Pixel rays per image side tested by :func:`missed_ray_fraction`.
MISSED_RAY_GRID = 16


def pixel_grid_rays(c2w: np.ndarray, intrinsics: list[Intrinsics], n_side: int = MISSED_RAY_GRID) -> tuple[np.ndarray, np.ndarray]:
    """``(origins, directions)`` [n · n_side², 3] of an ``n_side`` × ``n_side`` grid of pixel centres
    of every pinhole camera (distortion ignored), OpenGL camera axes, world of ``c2w`` [n, 4, 4]."""
    origins, directions = [], []
    for cam, intr in zip(np.asarray(c2w, dtype=np.float64), intrinsics):
        u, v = np.meshgrid((np.arange(n_side) + 0.5) * intr.width / n_side, (np.arange(n_side) + 0.5) * intr.height / n_side)
        rays = np.stack([(u - intr.cx) / intr.fx, -(v - intr.cy) / intr.fy, -np.ones_like(u)], axis=-1).reshape(-1, 3)
        directions.append(rays @ cam[:3, :3].T)
        origins.append(np.broadcast_to(cam[:3, 3], directions[-1].shape))
    return np.concatenate(origins), np.concatenate(directions)


def missed_ray_fraction(c2w: np.ndarray, intrinsics: list[Intrinsics], box: SceneBox) -> float:
    """Fraction of the cameras' pixel rays (:func:`pixel_grid_rays`) that miss ``box`` (slab test,
    Kay & Kajiya 1986; only the part in front of the camera counts).

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL axes, the box's world.
        intrinsics: n pinhole cameras.
        box: the box.
    """
    origins, directions = pixel_grid_rays(c2w, intrinsics)
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = 1.0 / directions
        t_lo = (box.lo - origins) * inverse
        t_hi = (box.hi - origins) * inverse
    t_enter = np.nanmax(np.minimum(t_lo, t_hi), axis=1).clip(min=0.0)
    t_exit = np.nanmin(np.maximum(t_lo, t_hi), axis=1)
    return float(np.mean(~(t_enter < t_exit)))


#: ``aabb_scale`` of a capture whose box cannot be derived (colmap2nerf's default).
FALLBACK_AABB_SCALE = 16


@dataclasses.dataclass(frozen=True)
class Placement:
    """A capture placed in the unit-cube world.

    Attributes:
        c2w: [n, 4, 4] float64 camera-to-world in the unit-cube world.
        aabb_scale: the scene's ``aabb_scale``.
        box_source: ``"data"``, ``"override"`` or ``"file"`` (the fallback), as ``Scene.box_source``.
        note: one line for ``Scene.notes``.
        world_scale, world_offset: the NeRF-world → unit-cube mapping ``p · scale + offset`` applied
            (before the axis cycle), as ``Scene.world_scale`` / ``Scene.world_offset``.
    """

    c2w: np.ndarray
    aabb_scale: int
    box_source: str
    note: str
    world_scale: float
    world_offset: tuple[float, float, float]


def smallest_power_of_two_cube(box: SceneBox, scale: float, offset: np.ndarray) -> int:
    """Smallest ``aabb_scale`` (power of two, at most 128) whose cube around (0.5, 0.5, 0.5) holds
    the box mapped by ``p · scale + offset`` with :data:`BOX_MARGIN` room (the unit-cube axis cycle
    does not change a cube centred there)."""
    lo = box.lo * scale + offset
    hi = box.hi * scale + offset
    half = float(max(np.max(np.abs(lo - 0.5)), np.max(np.abs(hi - 0.5)))) * BOX_MARGIN
    aabb_scale = 1
    while aabb_scale < 128 and aabb_scale < 2.0 * half:
        aabb_scale *= 2
    return aabb_scale


def place_capture(
    c2w_normalised: np.ndarray,
    box: SceneBox | None,
    aabb_scale: int | None,
    fmt: str,
    intrinsics: list[Intrinsics] | None = None,
) -> Placement:
    """Map a normalised capture into the unit-cube world and choose its ``aabb_scale``.

    * Content that fits instant-ngp's unit cube at its default scale (longest side × margin × 0.33 ≤ 1,
      an object the cameras look at): the box is mapped onto the unit cube (:func:`unit_cube_mapping`),
      ``aabb_scale`` 1: no empty space around it, finer grid cells on the content.
    * Larger content (a room, a forward-facing capture with a far background): instant-ngp's mapping
      (scale 0.33, the centre of attention at 0.5) and the smallest power-of-two ``aabb_scale`` whose
      cube holds the box (:func:`smallest_power_of_two_cube`); the occupancy cascades and cone
      stepping cover the background at coarser steps.
    * Content that would fit but whose box misses more than :data:`MAX_MISSED_RAY_FRACTION` of the
      pixel rays of ``intrinsics`` (checked when they are given): instant-ngp's mapping and the
      smallest power-of-two cube holding the box and the camera positions.
    * No box (no usable points or bounds): instant-ngp's mapping and ``aabb_scale``
      :data:`FALLBACK_AABB_SCALE`.

    Args:
        c2w_normalised: [n, 4, 4] camera-to-world, OpenGL axes, normalised world.
        box: the derived content box, or None when none could be derived.
        aabb_scale: ``--aabb-scale`` (replaces the derived ``aabb_scale``, mapping unchanged), or None.
        fmt: format name for the note.
        intrinsics: the n cameras, for the ray-coverage check (None: no check).
    """
    from trainer.data.convention import NERF_OFFSET, NERF_SCALE, nerf_to_unit_cube

    override = "" if aabb_scale is None else f"; aabb_scale {aabb_scale} from --aabb-scale"
    if box is None:
        chosen = aabb_scale if aabb_scale is not None else FALLBACK_AABB_SCALE
        note = (
            f"{fmt}: no scene box could be derived from the data; aabb_scale {chosen} around the cameras' "
            "centre of attention (colmap2nerf's placement)"
        )
        return Placement(nerf_to_unit_cube(c2w_normalised), chosen, "override" if aabb_scale else "file", note,
                         float(NERF_SCALE), tuple(float(v) for v in NERF_OFFSET))
    spread = forward_facing_spread_deg(c2w_normalised)
    missed = 0.0 if intrinsics is None else missed_ray_fraction(c2w_normalised, intrinsics, box)
    fits = float(np.max(box.size)) * BOX_MARGIN * NERF_SCALE <= 1.0
    if fits and missed > MAX_MISSED_RAY_FRACTION:
        scale, offset = NERF_SCALE, np.asarray(NERF_OFFSET, dtype=np.float64)
        positions = np.asarray(c2w_normalised)[:, :3, 3]
        with_cameras = SceneBox(np.minimum(box.lo, positions.min(axis=0)), np.maximum(box.hi, positions.max(axis=0)), box.how)
        derived = smallest_power_of_two_cube(with_cameras, scale, offset)
        how = (
            f"the box misses {missed:.0%} of the pixel rays (more than {MAX_MISSED_RAY_FRACTION:.0%}: content "
            "outside the sparse points): scale 0.33, smallest power-of-two cube holding it and the cameras"
        )
    elif fits:
        scale, offset = unit_cube_mapping(box)
        derived = 1
        how = "content box mapped onto the unit cube"
    else:
        scale, offset = NERF_SCALE, np.asarray(NERF_OFFSET, dtype=np.float64)
        derived = smallest_power_of_two_cube(box, scale, offset)
        how = "content larger than the unit cube: scale 0.33, smallest power-of-two cube holding it"
    note = f"{fmt}: " + describe_box(box, scale, spread) + f"; {how}: aabb_scale {derived}{override}"
    return Placement(
        nerf_to_unit_cube(c2w_normalised, scale, offset),
        aabb_scale if aabb_scale is not None else derived,
        "override" if aabb_scale is not None else "data",
        note,
        float(scale),
        tuple(float(v) for v in offset),
    )
