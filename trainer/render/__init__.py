"""Rendering: ray/box intersection, the occupancy grid, ray marching and volume rendering.

Layering inside the package: ``aabb`` → ``occupancy`` → ``march`` (uses both); ``volrend`` is
independent of them and works on the packed samples ``march`` produces (DESIGN.md §2).
"""

from trainer.render.aabb import ray_aabb_intersect, scene_aabb
from trainer.render.march import PackedSamples, march_rays
from trainer.render.occupancy import MIN_OPTICAL_THICKNESS, MIN_STEP_SIZE, OccupancyGrid, pack_bits
from trainer.render.volrend import (
    EARLY_STOP_TRANSMITTANCE,
    RenderedRays,
    composite,
    composite_reference,
    composite_segment,
    composite_segments,
    render_weights,
)

__all__ = [
    "EARLY_STOP_TRANSMITTANCE",
    "MIN_OPTICAL_THICKNESS",
    "MIN_STEP_SIZE",
    "OccupancyGrid",
    "PackedSamples",
    "RenderedRays",
    "composite",
    "composite_reference",
    "composite_segment",
    "composite_segments",
    "march_rays",
    "pack_bits",
    "ray_aabb_intersect",
    "render_weights",
    "scene_aabb",
]
