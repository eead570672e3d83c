"""How finely the training views see the scene: the hash-grid resolution across the scene box at
which one grid cell spans one pixel.

For a training view with focal length f (pixels) whose camera sits at distance d from the box
centre, one pixel covers d / f world units at the centre (pinhole model). A grid of resolution N
across a box of side s has cells of s / N; cells as wide as pixels need ``N = s · f / d``. The scene's
value is the median over the training views. The finest hash-grid level is set from it
(:meth:`trainer.contract.config.EncodingConfig.finest_resolution`): levels finer than the views' pixels only
add hash collisions. On lego_400 (400-pixel views, f = 556 px, d = 1.33 in the unit cube) it gives
418, rounded up to 512 — the best of 256/512/1024/2048 measured on its test views
(``configs/nerf_synthetic_400.json``), where instant-ngp's fixed rule gives 2048.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from trainer.data.scene import Frame

__all__ = ["footprint_resolution"]


def footprint_resolution(frames: Sequence[Frame], aabb: np.ndarray) -> float | None:
    """The grid resolution across the box at which a cell at the box centre spans one pixel of the
    median training view (module docstring).

    Args:
        frames: the training frames (poses in the unit-cube world, intrinsics as decoded).
        aabb: [2, 3] float64, min and max corner of the scene box (a cube).

    Returns:
        ``s · f / d`` (dimensionless, > 0), the median over ``frames``; None when no frame has its
        camera away from the box centre (nothing to measure).
    """
    lo, hi = np.asarray(aabb, dtype=np.float64)
    centre = 0.5 * (lo + hi)
    side = float(np.max(hi - lo))
    values = []
    for frame in frames:
        distance = float(np.linalg.norm(np.asarray(frame.c2w)[:3, 3] - centre))
        focal_px = 0.5 * (frame.intrinsics.fx + frame.intrinsics.fy)
        if distance > 1e-6 * side and focal_px > 0 and math.isfinite(distance):
            values.append(side * focal_px / distance)
    return float(np.median(values)) if values else None
