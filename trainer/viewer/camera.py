"""The browser's camera and the trainer's cameras, both ways, and the size of a frame.

viser reports a browser's viewport camera as ``wxyz`` (a unit quaternion, the rotation world ←
camera), ``position`` [3], a vertical field of view in radians and the canvas size in pixels, with
OpenCV camera axes (x right, y down, looking along +z). The trainer's :class:`Frame` holds a
camera-to-world matrix with OpenGL axes (x right, y up, looking along −z), so the two rotations
differ by ``diag(1, −1, −1)`` on the camera side. Both live in the trainer's unit-cube world.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from trainer.data.scene import Frame
from trainer.inference.cameras import pinhole_intrinsics

__all__ = ["ViewCamera", "frame_size", "view_camera_of_frame"]

OPENCV_FROM_OPENGL = np.diag([1.0, -1.0, -1.0])  # flips y and z of the camera axes


@dataclasses.dataclass(frozen=True)
class ViewCamera:
    """A browser's viewport camera.

    Attributes:
        wxyz: [4] float64 unit quaternion (w, x, y, z), rotation world ← camera, OpenCV axes.
        position: [3] float64 camera centre in the unit-cube world.
        fov_y: vertical field of view in radians, in (0, π).
        width, height: canvas size in pixels (>= 1).
    """

    wxyz: tuple[float, float, float, float]
    position: tuple[float, float, float]
    fov_y: float
    width: int
    height: int

    def frame(self, width: int | None = None, height: int | None = None, name: str = "view") -> Frame:
        """The trainer's camera for this view, rendered at ``width`` × ``height`` pixels (default:
        the canvas size); a smaller image of the same aspect covers the same field of view.

        Returns:
            a :class:`Frame` with a distortion-free pinhole camera (square pixels, centred
            principal point) and a [4, 4] float64 camera-to-world matrix, OpenGL axes.
        """
        width, height = width or self.width, height or self.height
        w, x, y, z = self.wxyz
        rotation_cv = Rotation.from_quat([x, y, z, w]).as_matrix()  # scipy: scalar last
        c2w = np.eye(4)
        c2w[:3, :3] = rotation_cv @ OPENCV_FROM_OPENGL
        c2w[:3, 3] = self.position
        intrinsics = pinhole_intrinsics(width, height, math.degrees(self.fov_y))
        return Frame(name=name, image_path=Path(""), c2w=c2w, intrinsics=intrinsics)


def view_camera_of_frame(frame: Frame) -> tuple[np.ndarray, np.ndarray, float]:
    """``(wxyz [4], position [3], fov_y radians)`` that put a browser's camera where ``frame`` is
    (its vertical field of view from ``fy`` and the image height; the canvas keeps its own aspect)."""
    c2w = np.asarray(frame.c2w, dtype=np.float64)
    x, y, z, w = Rotation.from_matrix(c2w[:3, :3] @ OPENCV_FROM_OPENGL).as_quat()
    k = frame.intrinsics
    fov_y = 2.0 * math.atan(0.5 * k.height / k.fy)
    return np.array([w, x, y, z]), c2w[:3, 3].copy(), fov_y


def frame_size(width: int, height: int, max_side: int | None = None, max_pixels: int | None = None) -> tuple[int, int]:
    """The size of a frame for a ``width`` × ``height`` canvas: the canvas's aspect, the longest
    side at most ``max_side`` and at most ``max_pixels`` pixels (each when given), never more than
    the canvas, at least 1 × 1.

    Raises:
        ValueError: a canvas side, ``max_side`` or ``max_pixels`` below 1.
    """
    if width < 1 or height < 1:
        raise ValueError(f"frame_size: canvas {width}x{height} has no pixels")
    scale = 1.0
    if max_side is not None:
        if max_side < 1:
            raise ValueError(f"frame_size: max_side must be >= 1, got {max_side}")
        scale = min(scale, max_side / max(width, height))
    if max_pixels is not None:
        if max_pixels < 1:
            raise ValueError(f"frame_size: max_pixels must be >= 1, got {max_pixels}")
        scale = min(scale, math.sqrt(max_pixels / (width * height)))
    return max(1, int(width * scale)), max(1, int(height * scale))
