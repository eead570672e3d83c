"""The instant-ngp ``transforms.json`` of a reconstruction.

Poses are placed the way instant-ngp's ``scripts/colmap2nerf.py`` places them, so the file means the
same to instant-ngp and to the trainer's instant-ngp loader (``scale`` 0.33 and ``offset`` 0.5 left at
their defaults):

1. camera-to-world matrices with OpenGL camera axes (x right, y up, looking down −z): COLMAP's
   world-to-camera pose inverted, its y and z camera axes negated;
2. the world turned so that the mean camera up vector is +z;
3. the centre of the content at the origin: the per-axis median of the sparse points that pass the
   outlier test below (colmap2nerf uses the point the optical axes pass closest to, which is
   undefined when they are nearly parallel, as in a forward-facing capture);
4. scaled so that the cameras are 4 units from it on average.

``aabb_scale`` is the smallest power of two (1..128) whose cube around the centre holds, with 10 %
room, the cameras and the box of the sparse points (per axis their 1st–99th percentile, points with
a reprojection error above 3× the median left out), so that every training ray starts inside the
scene box and the content seen in the views lies in it. One camera shared by all images is written
at the top level, several cameras per frame. Frames carry ``sharpness`` (variance of the Laplacian).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ngptune.prepare.frames import IMAGES_DIR, CaptureImages

__all__ = ["Placement", "TransformsFile", "camera_keys", "colmap_cameras_to_world", "place_capture", "write_transforms"]

#: Mean distance of the cameras from the content centre after placement (colmap2nerf).
MEAN_CAMERA_DISTANCE = 4.0
#: instant-ngp's default NeRF-world → unit-cube scale, which the written file leaves in place.
NGP_SCALE = 0.33
#: Room around the cameras and the point box in the chosen cube.
BOX_MARGIN = 1.1
#: Per-axis percentiles of the sparse points spanned by the content box.
POINT_PERCENTILES = (1.0, 99.0)
#: Points with a reprojection error above this multiple of the median are outliers.
MAX_ERROR_OVER_MEDIAN = 3.0
MAX_AABB_SCALE = 128


@dataclasses.dataclass(frozen=True)
class Placement:
    """Cameras placed in the NeRF world of ``transforms.json``.

    Attributes:
        c2w: [n, 4, 4] float64 camera-to-world, OpenGL camera axes.
        aabb_scale: power of two, 1..128.
        box_lo, box_hi: [3] float64 corners of the content box (sparse points), NeRF world; None
            when fewer than 4 points passed the outlier test.
        n_points: sparse points that passed the outlier test.
    """

    c2w: np.ndarray
    aabb_scale: int
    box_lo: np.ndarray | None
    box_hi: np.ndarray | None
    n_points: int


def colmap_cameras_to_world(reconstruction: Any) -> tuple[list[str], np.ndarray]:
    """``(image names, c2w [n, 4, 4] float64)`` of the registered images in name order; c2w in
    COLMAP's world with OpenCV camera axes (x right, y down, looking down +z)."""
    names, matrices = [], []
    for image in sorted((reconstruction.image(i) for i in reconstruction.reg_image_ids()), key=lambda im: im.name):
        pose = image.cam_from_world() if callable(image.cam_from_world) else image.cam_from_world
        w2c = np.asarray(pose.matrix(), dtype=np.float64)
        c2w = np.eye(4)
        c2w[:3, :3] = w2c[:3, :3].T
        c2w[:3, 3] = -w2c[:3, :3].T @ w2c[:3, 3]
        names.append(image.name)
        matrices.append(c2w)
    return names, np.stack(matrices)


def reliable_points(reconstruction: Any) -> np.ndarray:
    """[m, 3] sparse points whose reprojection error is at most :data:`MAX_ERROR_OVER_MEDIAN` × the median."""
    points = list(reconstruction.points3D.values())
    if not points:
        return np.zeros((0, 3))
    xyz = np.array([p.xyz for p in points], dtype=np.float64)
    errors = np.array([p.error for p in points], dtype=np.float64)
    return xyz[errors <= MAX_ERROR_OVER_MEDIAN * max(float(np.median(errors)), 1e-9)]


def _up_to_z(c2w_opengl: np.ndarray) -> np.ndarray:
    """[3, 3] rotation taking the mean camera up vector to +z (identity when they cancel out)."""
    from scipy.spatial.transform import Rotation

    up = c2w_opengl[:, :3, 1].sum(axis=0)
    if np.linalg.norm(up) < 1e-9:
        return np.eye(3)
    rotation, _ = Rotation.align_vectors([[0.0, 0.0, 1.0]], [up / np.linalg.norm(up)])
    return rotation.as_matrix()


def place_capture(c2w_opencv: np.ndarray, points: np.ndarray) -> Placement:
    """Place cameras and content as the module docstring says.

    Args:
        c2w_opencv: [n, 4, 4] camera-to-world, OpenCV camera axes, any world.
        points: [m, 3] reliable sparse points in the same world (:func:`reliable_points`).

    Returns:
        The placement; with fewer than 4 points the content centre is the cameras' mean position
        and only the cameras set ``aabb_scale``.
    """
    c2w = np.array(c2w_opencv, dtype=np.float64)
    c2w[:, :3, 1:3] *= -1.0
    rotation = _up_to_z(c2w)
    c2w[:, :3, :] = np.einsum("ij,njk->nik", rotation, c2w[:, :3, :])
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3) @ rotation.T
    has_box = points.shape[0] >= 4
    centre = np.median(points, axis=0) if has_box else c2w[:, :3, 3].mean(axis=0)
    c2w[:, :3, 3] -= centre
    points = points - centre
    mean_distance = float(np.mean(np.linalg.norm(c2w[:, :3, 3], axis=1)))
    scale = MEAN_CAMERA_DISTANCE / mean_distance if mean_distance > 1e-12 else 1.0
    c2w[:, :3, 3] *= scale
    extent = float(np.max(np.abs(c2w[:, :3, 3])))
    box_lo = box_hi = None
    if has_box:
        box_lo, box_hi = np.percentile(points * scale, POINT_PERCENTILES, axis=0)
        extent = max(extent, float(np.max(np.abs(box_lo))), float(np.max(np.abs(box_hi))))
    aabb_scale = 1
    while aabb_scale < MAX_AABB_SCALE and aabb_scale < 2.0 * extent * NGP_SCALE * BOX_MARGIN:
        aabb_scale *= 2
    return Placement(c2w=c2w, aabb_scale=aabb_scale, box_lo=box_lo, box_hi=box_hi, n_points=int(points.shape[0]))


#: COLMAP model → its parameter names as ``transforms.json`` keys (COLMAP ``src/colmap/sensor/models.h``).
_PARAM_KEYS = {
    "SIMPLE_PINHOLE": ("f", "cx", "cy"),
    "PINHOLE": ("fl_x", "fl_y", "cx", "cy"),
    "SIMPLE_RADIAL": ("f", "cx", "cy", "k1"),
    "RADIAL": ("f", "cx", "cy", "k1", "k2"),
    "OPENCV": ("fl_x", "fl_y", "cx", "cy", "k1", "k2", "p1", "p2"),
}


def camera_keys(model: str, width: int, height: int, params: Any) -> dict[str, float]:
    """The ``transforms.json`` camera keys of a COLMAP camera: ``w h fl_x fl_y cx cy k1 k2 p1 p2``
    and ``camera_angle_x/_y`` (radians). COLMAP and instant-ngp both put the centre of the top-left
    pixel at (0.5, 0.5), so ``cx cy`` carry over unchanged.

    Raises:
        ValueError: a model outside ``_PARAM_KEYS``.
    """
    if model not in _PARAM_KEYS:
        raise ValueError(f"camera model {model} cannot be written to transforms.json")
    values = dict(zip(_PARAM_KEYS[model], (float(v) for v in params)))
    if "f" in values:
        values["fl_x"] = values["fl_y"] = values.pop("f")
    keys: dict[str, float] = {
        "camera_angle_x": 2.0 * math.atan(0.5 * width / values["fl_x"]),
        "camera_angle_y": 2.0 * math.atan(0.5 * height / values["fl_y"]),
        "fl_x": values["fl_x"],
        "fl_y": values["fl_y"],
        "cx": values["cx"],
        "cy": values["cy"],
        "w": float(width),
        "h": float(height),
    }
    for name in ("k1", "k2", "p1", "p2"):
        keys[name] = values.get(name, 0.0)
    return keys


@dataclasses.dataclass(frozen=True)
class TransformsFile:
    """A written ``transforms.json``: its path, frames, cameras and placement."""

    path: Path
    n_frames: int
    n_cameras: int
    placement: Placement


def write_transforms(path: Path, reconstruction: Any, images: CaptureImages) -> TransformsFile:
    """Write ``transforms.json`` for the registered images of ``reconstruction`` (module docstring)."""
    names, c2w_opencv = colmap_cameras_to_world(reconstruction)
    placement = place_capture(c2w_opencv, reliable_points(reconstruction))
    cameras = {}
    for camera_id, camera in reconstruction.cameras.items():
        cameras[camera_id] = camera_keys(camera.model_name, camera.width, camera.height, camera.params)
    image_camera = {reconstruction.image(i).name: reconstruction.image(i).camera_id for i in reconstruction.reg_image_ids()}
    used = sorted({image_camera[name] for name in names})
    shared = len(used) == 1
    sharpness = images.sharpness_by_name
    data: dict[str, Any] = dict(cameras[used[0]]) if shared else {}
    data["aabb_scale"] = placement.aabb_scale
    frames = []
    for name, c2w in zip(names, placement.c2w):
        frame: dict[str, Any] = {"file_path": f"{IMAGES_DIR}/{name}", "sharpness": sharpness.get(name, 0.0)}
        if not shared:
            frame.update(cameras[image_camera[name]])
        frame["transform_matrix"] = c2w.tolist()
        frames.append(frame)
    data["frames"] = frames
    path.write_text(json.dumps(data, indent=2) + "\n")
    return TransformsFile(path=path, n_frames=len(frames), n_cameras=len(used), placement=placement)
