"""Which parts of the scene the training views support, for exports that leave out the rest.

A point is **on the surface of a training view** when it projects inside that camera's image and its
distance from the camera matches the depth the trained model renders at that pixel, within a margin.
A point on the surface of at least ``min_views`` training views is **supported**; the rest is
density that no training image shows as a surface: outside every view, hidden behind the object in
every view (under its base, inside closed parts), haze too thin to stop a training ray, or a
floater that only one or two views see (the usual explanation of a reflection or a blur in a few
images). Two views fix a point by triangulation and a third checks it, hence the default of 3
(:data:`trainer.contract.commandline.DEFAULT_MIN_VIEWS`); 0 turns the rule off.

How it is computed, once per export:

1. Depth maps: each training camera renders its expected depth ``Σ w_i t_i / Σ w_i`` through the
   trained model, one ray per pixel centre of a grid (the evaluation renderer); a pixel whose
   opacity stays below :data:`SURFACE_OPACITY` shows no surface. The grid is as fine as the
   lattice of step 2 needs and no finer (:func:`depth_map_side`): a pixel spans
   :data:`CELLS_PER_DEPTH_PIXEL` lattice cells at the box's distance from the camera, with at most
   :data:`DEPTH_MAP_SIDE` pixels on its longer side, so the depth maps of a coarse mesh cost a
   fraction of a fine one's (lego's 400-pixel training views and the box of its object: 37 to 39
   pixels a side for a 64³ mesh, a tenth of the rays at 128; 73 to 78 for the 128³ lattice of a
   256³ mesh).
2. The centres of a G³ lattice of cells over the exported box are projected into every camera
   (pinhole; lens distortion moves points by a few pixels of the full image, less than a pixel of
   the depth map) and count the views in which they are on the surface. The margin is
   :data:`MARGIN_CELL_DIAGONALS` cell diagonals plus :data:`MARGIN_PIXELS` depth-map pixels at
   the cell's distance (a surface tilted away from the camera changes depth across a pixel).
3. A point is looked up in the cell holding it; points outside the box are unsupported.

The test is the photo-hull idea of space carving with rendered depth maps (Kutulakos & Seitz,
*A theory of shape by space carving*, IJCV 38(3), 2000): keep what the views agree on. instant-ngp
marks occupancy-grid cells that no training camera sees as untrained
(``mark_untrained_density_grid``), the frustum part of the test alone; on lego every cell of the
unit cube is inside at least 5 training frusta, so that part alone removes nothing there.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

import numpy as np
import torch

from trainer.contract.runstatus import fitted_warning
from trainer.contract.textlines import estimate_text
from trainer.inference.cameras import resize_cameras

__all__ = ["CELLS_PER_DEPTH_PIXEL", "DEPTH_MAP_SIDE", "SUPPORT_RESOLUTION", "SupportGrid", "build_support",
           "camera_depth_maps", "depth_map_side", "depth_map_size"]

#: Cells per axis of the support lattice.
SUPPORT_RESOLUTION = 128
#: Longest side of the depth maps, pixels (never more than the training image).
DEPTH_MAP_SIDE = 128
#: Lattice cells one depth-map pixel spans at the box's distance from its camera: a cell is judged
#: within :data:`MARGIN_CELL_DIAGONALS` cell diagonals plus :data:`MARGIN_PIXELS` pixels of the
#: surface, so a finer map changes little; a coarser one blurs silhouettes over more cells.
CELLS_PER_DEPTH_PIXEL = 2.0
#: Shortest longer side of a depth map, pixels (unless the image is smaller).
MIN_DEPTH_MAP_SIDE = 16
#: Opacity from which a depth-map pixel shows a surface.
SURFACE_OPACITY = 0.5
#: Distance from a depth-map surface that still counts as on it: cell diagonals plus depth-map pixels.
MARGIN_CELL_DIAGONALS = 2.0
MARGIN_PIXELS = 2.0
#: Seconds from which the depth maps' time, estimated from the first view, is announced with the
#: flag that skips them.
LONG_SUPPORT_S = 30.0


@dataclasses.dataclass(frozen=True)
class SupportGrid:
    """Training views on whose rendered surface each cell of a lattice over ``box`` lies.

    Attributes:
        box: [2, 3] float64 unit-cube corners of the lattice.
        views: [G, G, G] int32, views per cell (indexed along x, y, z).
        min_views: cells with at least this many are supported.
    """

    box: np.ndarray
    views: np.ndarray
    min_views: int

    def supported(self, points: np.ndarray) -> np.ndarray:
        """[n] bool for ``points`` [n, 3] in the unit cube: the cell holding each lies on the
        surface of at least ``min_views`` views (False outside the box)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        resolution = self.views.shape[0]
        cell = np.floor((points - self.box[0]) / (self.box[1] - self.box[0]) * resolution).astype(np.int64)
        inside = np.all((cell >= 0) & (cell < resolution), axis=1)
        out = np.zeros(points.shape[0], dtype=bool)
        i, j, k = cell[inside].T
        out[inside] = self.views[i, j, k] >= self.min_views
        return out

    @property
    def supported_fraction(self) -> float:
        """Share of the lattice's cells that are supported."""
        return float(np.mean(self.views >= self.min_views))


def depth_map_side(frame: Any, box: np.ndarray, resolution: int, longest: int = DEPTH_MAP_SIDE) -> int:
    """Longer side (pixels) of ``frame``'s depth map for a lattice of ``resolution`` cells per axis
    over ``box`` ([2, 3] unit cube): a pixel :data:`CELLS_PER_DEPTH_PIXEL` cells (the largest cell
    edge) wide at the distance from the camera to the box's centre (at least half the box's
    diagonal: a camera inside the box looks at its walls), within [:data:`MIN_DEPTH_MAP_SIDE`,
    ``longest``] and never more than the image's longer side.

    Raises:
        ValueError: ``resolution`` or ``longest`` below 1.
    """
    if resolution < 1 or longest < 1:
        raise ValueError(f"depth_map_side: expected resolution >= 1 and longest >= 1, got {resolution}, {longest}")
    k = frame.intrinsics
    box = np.asarray(box, dtype=np.float64)
    image_side = max(k.width, k.height)
    cell = float(np.max(box[1] - box[0])) / resolution
    distance = max(float(np.linalg.norm(np.asarray(frame.c2w, dtype=np.float64)[:3, 3] - box.mean(axis=0))),
                   0.5 * float(np.linalg.norm(box[1] - box[0])))
    if cell <= 0 or distance <= 0:
        return min(image_side, longest)
    image_px_per_pixel = CELLS_PER_DEPTH_PIXEL * cell * max(k.fx, k.fy) / distance  # image pixels one map pixel spans
    side = math.ceil(image_side / max(image_px_per_pixel, 1e-9))
    return max(1, min(image_side, longest, max(side, MIN_DEPTH_MAP_SIDE)))


@torch.no_grad()
def camera_depth_maps(model: Any, side: int = DEPTH_MAP_SIDE, quiet: bool = True, box: np.ndarray | None = None,
                      resolution: int | None = None) -> list[tuple[Any, torch.Tensor]]:
    """``(frame with shrunk intrinsics, depth [h, w] float32 on the device)`` per training camera
    (module docstring, step 1); depth is distance along the unit ray, NaN where no surface. Each
    map's longer side is ``side`` pixels, or with ``box`` and ``resolution`` (the support lattice)
    :func:`depth_map_side` of at most ``side``. Progress by views (a bar on a terminal, plain
    lines off one) unless ``quiet``; a warning, after the first view, when all of them would take
    :data:`LONG_SUPPORT_S` or more."""
    from trainer.inference.progress import Progress
    from trainer.inference.render_views import subgrid_sample_renderer

    trainer = model.trainer
    frames = trainer.scene.frames("train")
    renderer = subgrid_sample_renderer(trainer, True) if model.mode == "subgrid" else None
    background = torch.zeros(3, device=trainer.device)
    sizes = [depth_map_size(frame, side if box is None or resolution is None
                            else depth_map_side(frame, box, resolution, side)) for frame in frames]
    rays = [width * height for width, height in sizes]
    out = []
    progress = Progress("support views", len(frames), quiet=quiet, rate_name="rays", total_items=sum(rays))
    started = time.perf_counter()
    try:
        for frame, size in zip(frames, sizes):
            out.append(_depth_map(trainer, frame, size, renderer, background))
            progress.advance(1, out[-1][1].numel())
            if len(out) == 1 and len(frames) > 1:  # the first view's rate, over every view's rays
                estimate_s = (time.perf_counter() - started) * sum(rays) / max(rays[0], 1)
                if estimate_s >= LONG_SUPPORT_S:
                    print("warning: " + fitted_warning(f"the depth maps of {len(frames)} training views (what --min-views checks) take "
                                       f"about {estimate_text(estimate_s)}; --min-views 0 skips them"),
                          file=sys.stderr, flush=True)
    finally:
        progress.close()
    return out


def depth_map_size(frame: Any, side: int) -> tuple[int, int]:
    """``(width, height)`` of ``frame``'s depth map whose longer side is ``side`` pixels (the
    image's own size when that is smaller), the image's aspect kept."""
    k = frame.intrinsics
    factor = max(1.0, max(k.width, k.height) / side)
    return max(1, round(k.width / factor)), max(1, round(k.height / factor))


def _depth_map(trainer: Any, frame: Any, size: tuple[int, int], renderer: Any,
               background: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """One training camera's entry of :func:`camera_depth_maps`, its map ``size`` (width, height)
    pixels (:func:`depth_map_size`)."""
    from trainer.data.rays import IntrinsicsTensors, generate_rays
    from trainer.train.evaluate import render_ray_buffers

    device = trainer.device
    small = resize_cameras([frame], width=size[0], height=size[1])[0]
    w, h = small.intrinsics.width, small.intrinsics.height
    v, u = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
    c2w = torch.as_tensor(np.asarray(small.c2w, dtype=np.float32)[:3, :4], device=device).expand(h * w, 3, 4)
    cameras = IntrinsicsTensors.from_intrinsics([small.intrinsics], device)[torch.zeros(h * w, dtype=torch.long, device=device)]
    o, d = generate_rays(c2w, cameras, u.reshape(-1), v.reshape(-1))
    with trainer.inference_weights():
        rendered = render_ray_buffers(trainer, o, d, background, render_samples=renderer)
    surface = rendered.opacity >= SURFACE_OPACITY
    depth = torch.where(surface, rendered.depth / rendered.opacity.clamp_min(1e-6), torch.full_like(rendered.depth, float("nan")))
    return small, depth.reshape(h, w)


@torch.no_grad()
def build_support(model: Any, box: np.ndarray, min_views: int, resolution: int = SUPPORT_RESOLUTION,
                  depth_side: int = DEPTH_MAP_SIDE, quiet: bool = True) -> SupportGrid:
    """The :class:`SupportGrid` of ``box`` [2, 3] (unit cube) for a loaded model's training cameras.

    Args:
        model: a :class:`trainer.inference.loading.LoadedModel`.
        box: [2, 3] unit-cube corners of the lattice.
        min_views: cameras a supported cell needs (>= 1).
        resolution: cells per axis.
        depth_side: most pixels on the longer side of a depth map (:func:`depth_map_side` sizes
            each for the lattice).
        quiet: no progress of the depth maps (:func:`camera_depth_maps`).
    """
    device = model.trainer.device
    box = np.asarray(box, dtype=np.float64)
    axes = [torch.linspace(float(box[0, a]), float(box[1, a]), resolution + 1, device=device) for a in range(3)]
    centres = [0.5 * (ax[1:] + ax[:-1]) for ax in axes]
    grid = torch.stack(torch.meshgrid(*centres, indexing="ij"), dim=-1).reshape(-1, 3)
    cell_margin = MARGIN_CELL_DIAGONALS * float(np.linalg.norm((box[1] - box[0]) / resolution))
    views = torch.zeros(grid.shape[0], dtype=torch.int32, device=device)
    for frame, depth in camera_depth_maps(model, depth_side, quiet, box=box, resolution=resolution):
        k = frame.intrinsics
        c2w = torch.as_tensor(np.asarray(frame.c2w, dtype=np.float32), device=device)
        local = (grid - c2w[:3, 3]) @ c2w[:3, :3]  # camera axes: x right, y up, looking down −z
        z = -local[:, 2]
        front = z > 1e-6
        z_safe = torch.where(front, z, torch.ones_like(z))
        u = torch.floor(k.cx + k.fx * local[:, 0] / z_safe)
        v = torch.floor(k.cy - k.fy * local[:, 1] / z_safe)
        inside = front & (u >= 0) & (u < k.width) & (v >= 0) & (v < k.height)
        pixel = (v.clamp(0, k.height - 1) * k.width + u.clamp(0, k.width - 1)).long()
        distance = torch.linalg.vector_norm(local, dim=1)
        margin = cell_margin + MARGIN_PIXELS * distance / min(k.fx, k.fy)
        on_surface = (distance - depth.reshape(-1)[pixel]).abs() <= margin  # False where NaN: no surface
        views += (inside & on_surface).int()
    return SupportGrid(box=box, views=views.reshape(resolution, resolution, resolution).cpu().numpy(), min_views=int(min_views))
