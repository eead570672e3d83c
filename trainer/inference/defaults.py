"""Defaults of the ``export`` flags that ``--help`` shows, kept free of torch so the command
line can print them without loading it (:mod:`trainer.inference.mesh` and
:mod:`trainer.inference.pointcloud` use the same values)."""

from __future__ import annotations

__all__ = ["DEFAULT_MESH_THRESHOLD", "DEFAULT_MIN_VIEWS", "MAX_RAYS_PER_POINT"]

DEFAULT_MESH_THRESHOLD = 2.5  # σ (1/unit-cube units), instant-ngp's marching-cubes default
# ``export pointcloud --n-points N`` casts at most this many training rays per point asked for
# (and never more than the training images have pixels) before it writes what it has.
MAX_RAYS_PER_POINT = 20
# ``export mesh|pointcloud --min-views N``: keep only what lies on the rendered surface of at least N
# training views (:mod:`trainer.inference.support`); two views triangulate a point, a third checks it.
# 0 keeps everything.
DEFAULT_MIN_VIEWS = 3
