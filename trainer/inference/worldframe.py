"""The trainer's unit-cube world and the capture's own world frame.

Scene loaders map cameras into instant-ngp's unit cube (:mod:`trainer.data.convention`): a point
``p`` of the NeRF world becomes ``cycle(p · scale + offset)`` with ``cycle(x, y, z) = (y, z, x)``;
COLMAP and LLFF captures are first normalised like colmap2nerf (``p' = s · (R p − c)``,
:class:`~trainer.data.convention.PoseNormalization`). The functions here undo (or redo) both, so
exported geometry lines up with the frame the capture was made in (the ``transforms.json`` world,
or COLMAP's).
"""

from __future__ import annotations

import numpy as np

from trainer.data.scene import Scene

__all__ = ["cube_c2w_to_world", "cube_to_world", "units_per_cube_unit", "world_c2w_to_cube", "world_to_cube"]


def cube_to_world(points: np.ndarray, scene: Scene) -> np.ndarray:
    """Unit-cube points → the capture's world frame.

    Args:
        points: [n, 3] float, unit-cube coordinates.
        scene: the loaded scene (its ``world_scale``, ``world_offset``, ``pose_normalization``).

    Returns:
        [n, 3] float64 in the source world (NeRF world; COLMAP's world for normalised captures).
    """
    q = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    nerf = q[:, [2, 0, 1]]  # undo the cycle: old x = new z, old y = new x, old z = new y
    nerf = (nerf - np.asarray(scene.world_offset, dtype=np.float64)) / float(scene.world_scale)
    norm = scene.pose_normalization
    if norm is not None:  # p' = s (R p − c)  →  p = Rᵀ (p'/s + c)
        nerf = (nerf / float(norm.scale) + np.asarray(norm.centre)) @ np.asarray(norm.rotation)
    return nerf


def world_to_cube(points: np.ndarray, scene: Scene) -> np.ndarray:
    """The inverse of :func:`cube_to_world`: [n, 3] world points → [n, 3] float64 unit-cube points."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    norm = scene.pose_normalization
    if norm is not None:
        p = float(norm.scale) * (p @ np.asarray(norm.rotation).T - np.asarray(norm.centre))
    p = p * float(scene.world_scale) + np.asarray(scene.world_offset, dtype=np.float64)
    return p[:, [1, 2, 0]]


def units_per_cube_unit(scene: Scene) -> float:
    """Length in the capture's world of one unit-cube unit (distances along rays: depth)."""
    norm = scene.pose_normalization
    return 1.0 / (float(scene.world_scale) * (float(norm.scale) if norm is not None else 1.0))


def world_c2w_to_cube(c2w: np.ndarray, scene: Scene) -> np.ndarray:
    """Camera-to-world matrices of the capture's world (OpenGL camera axes) → the unit cube.

    Args:
        c2w: [n, 4, 4] float, rotation columns the camera axes, last column the position.

    Returns:
        [n, 4, 4] float64: positions through :func:`world_to_cube`, rotations through the same
        normalisation rotation and axis cycle (never scaled).
    """
    c2w = np.asarray(c2w, dtype=np.float64).reshape(-1, 4, 4)
    rotation = c2w[:, :3, :3]
    norm = scene.pose_normalization
    if norm is not None:
        rotation = np.einsum("ij,njk->nik", np.asarray(norm.rotation), rotation)
    out = np.zeros_like(c2w)
    out[:, :3, :3] = rotation[:, [1, 2, 0], :]
    out[:, :3, 3] = world_to_cube(c2w[:, :3, 3], scene)
    out[:, 3, 3] = 1.0
    return out


def cube_c2w_to_world(c2w: np.ndarray, scene: Scene) -> np.ndarray:
    """The inverse of :func:`world_c2w_to_cube`: [n, 4, 4] unit-cube camera-to-world matrices
    (OpenGL camera axes) → [n, 4, 4] float64 in the capture's world."""
    c2w = np.asarray(c2w, dtype=np.float64).reshape(-1, 4, 4)
    rotation = c2w[:, :3, :3][:, [2, 0, 1], :]  # undo the axis cycle of the rows
    norm = scene.pose_normalization
    if norm is not None:
        rotation = np.einsum("ji,njk->nik", np.asarray(norm.rotation), rotation)
    out = np.zeros_like(c2w)
    out[:, :3, :3] = rotation
    out[:, :3, 3] = cube_to_world(c2w[:, :3, 3], scene)
    out[:, 3, 3] = 1.0
    return out
