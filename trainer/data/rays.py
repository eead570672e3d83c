"""Camera → rays: pinhole projection with OpenCV lens distortion, as pure torch functions.

Conventions (:mod:`trainer.data.scene`): pixel ``(u, v)`` (column, row; ``v`` grows downwards) has
its centre at ``(u + 0.5, v + 0.5)``; camera axes are OpenGL's (x right, y up, the camera looks
down −z); ``c2w`` maps camera to world coordinates.

Distortion is OpenCV's model on normalised image coordinates ``(x, y)`` (OpenCV axes, y down),
with ``r² = x² + y²``::

    x_d = x (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r²) + 2 p1 x y + p2 (r² + 2 x²)
    y_d = y (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r²) + p1 (r² + 2 y²) + 2 p2 x y

(OpenCV ``calib3d`` "Detailed description", coefficients ``(k1, k2, p1, p2, k3, k4)``; k4 is the
first denominator term). A pixel is mapped to a ray by inverting it with Newton's method, as
instant-ngp (``iterative_camera_undistortion``, taken from COLMAP's ``IterativeUndistortion``)
does, here with the analytic 2×2 Jacobian and a fixed number of iterations so that the code is
vectorised and never synchronises with the host.

All functions work on any device; nothing here is differentiable on purpose (camera poses are not
optimised), but nothing prevents autograd either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from trainer.data.scene import Frame, Intrinsics

# Newton steps of the undistortion; the error roughly squares each step, so from the distorted
# point as the start, 6 steps reach float32 precision for any distortion a calibration tool
# produces inside the image.
UNDISTORT_ITERATIONS = 6


@dataclasses.dataclass(frozen=True)
class IntrinsicsTensors:
    """Intrinsics of n cameras (or of n rays, after indexing) as tensors on one device.

    Attributes:
        focal: [n, 2] float32, ``(fx, fy)`` in pixels.
        principal: [n, 2] float32, ``(cx, cy)`` in pixels.
        distortion: [n, 6] float32, OpenCV ``(k1, k2, p1, p2, k3, k4)``.
        has_distortion: False when every distortion coefficient is zero (known on the host, so
            the undistortion can be skipped without a device sync).
    """

    focal: torch.Tensor
    principal: torch.Tensor
    distortion: torch.Tensor
    has_distortion: bool

    @classmethod
    def from_intrinsics(
        cls, intrinsics: Sequence[Intrinsics], device: torch.device | str = "cpu"
    ) -> "IntrinsicsTensors":
        """Stack a list of :class:`Intrinsics` (one row each) on ``device``."""
        rows = np.array(
            [(i.fx, i.fy, i.cx, i.cy, *i.distortion) for i in intrinsics], dtype=np.float32
        ).reshape(-1, 10)
        table = torch.from_numpy(rows).to(device)
        return cls(
            focal=table[:, 0:2],
            principal=table[:, 2:4],
            distortion=table[:, 4:10],
            has_distortion=any(i.has_distortion for i in intrinsics),
        )

    def __len__(self) -> int:
        return int(self.focal.shape[0])

    def __getitem__(self, index: torch.Tensor) -> "IntrinsicsTensors":
        """Rows ``index`` ([m] int64 on the same device) → intrinsics of m rays."""
        return IntrinsicsTensors(
            focal=self.focal[index],
            principal=self.principal[index],
            distortion=self.distortion[index],
            has_distortion=self.has_distortion,
        )


def distort_normalized(xy: torch.Tensor, distortion: torch.Tensor) -> torch.Tensor:
    """OpenCV's forward lens distortion of normalised image coordinates.

    Args:
        xy: [n, 2] undistorted normalised coordinates ``((u - cx) / fx, (v - cy) / fy)``
            (OpenCV axes: y down).
        distortion: [n, 6] or [6] ``(k1, k2, p1, p2, k3, k4)``.

    Returns:
        [n, 2] distorted normalised coordinates (formula in the module docstring), same dtype.
    """
    k1, k2, p1, p2, k3, k4 = distortion.unbind(-1)
    x, y = xy.unbind(-1)
    r2 = x * x + y * y
    radial = (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + k4 * r2)
    x_d = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    y_d = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return torch.stack([x_d, y_d], dim=-1)


def undistort_normalized(
    xy_distorted: torch.Tensor, distortion: torch.Tensor, iterations: int = UNDISTORT_ITERATIONS
) -> torch.Tensor:
    """Invert :func:`distort_normalized` with ``iterations`` Newton steps (vectorised).

    Newton's method on ``f(x, y) = distort(x, y) − (x_d, y_d)`` starting from ``(x_d, y_d)``, with
    the analytic Jacobian (instant-ngp ``iterative_camera_undistortion`` / COLMAP
    ``IterativeUndistortion`` use a numerical one and stop at a tolerance; a fixed count keeps
    this free of host syncs). Valid where the distortion model is invertible, i.e. inside the
    calibrated field of view.

    Args:
        xy_distorted: [n, 2] distorted normalised coordinates (OpenCV axes).
        distortion: [n, 6] or [6] ``(k1, k2, p1, p2, k3, k4)``.
        iterations: number of Newton steps.

    Returns:
        [n, 2] undistorted normalised coordinates, same dtype as the input.
    """
    k1, k2, p1, p2, k3, k4 = distortion.unbind(-1)
    x_d, y_d = xy_distorted.unbind(-1)
    x, y = x_d, y_d
    for _ in range(iterations):
        r2 = x * x + y * y
        numerator = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
        denominator = 1 + k4 * r2
        radial = numerator / denominator
        # d(radial)/d(r²), quotient rule
        d_radial = ((k1 + r2 * (2 * k2 + 3 * k3 * r2)) * denominator - numerator * k4) / (
            denominator * denominator
        )
        residual_x = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) - x_d
        residual_y = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y - y_d
        # Jacobian of (x_d, y_d) with respect to (x, y); d(r²)/dx = 2x, d(r²)/dy = 2y
        j_xx = radial + 2 * x * x * d_radial + 2 * p1 * y + 6 * p2 * x
        j_yy = radial + 2 * y * y * d_radial + 6 * p1 * y + 2 * p2 * x
        j_xy = 2 * x * y * d_radial + 2 * p1 * x + 2 * p2 * y  # = d(y_d)/dx as well
        determinant = j_xx * j_yy - j_xy * j_xy
        x = x - (j_yy * residual_x - j_xy * residual_y) / determinant
        y = y - (j_xx * residual_y - j_xy * residual_x) / determinant
    return torch.stack([x, y], dim=-1)


def pixel_to_camera_dirs(
    u: torch.Tensor,
    v: torch.Tensor,
    intrinsics: IntrinsicsTensors,
    iterations: int = UNDISTORT_ITERATIONS,
) -> torch.Tensor:
    """Camera-space directions through image points, lens distortion removed.

    Args:
        u, v: [n] float image coordinates in pixels (continuous: the centre of pixel ``(i, j)``
            is ``(i + 0.5, j + 0.5)``; ``v`` grows downwards).
        intrinsics: per-point intrinsics (n rows; index an :class:`IntrinsicsTensors` by image).
        iterations: Newton steps of :func:`undistort_normalized` (skipped without distortion).

    Returns:
        [n, 3] float32 directions ``(x, −y, −1)`` in OpenGL camera axes (x right, y up, −z
        forward), where ``(x, y)`` are the undistorted normalised OpenCV coordinates; the z
        component is −1, so they are not unit length.
    """
    pixel = torch.stack([u, v], dim=-1).to(intrinsics.focal.dtype)
    xy = (pixel - intrinsics.principal) / intrinsics.focal
    if intrinsics.has_distortion:
        xy = undistort_normalized(xy, intrinsics.distortion, iterations)
    x, y = xy.unbind(-1)
    return torch.stack([x, -y, -torch.ones_like(x)], dim=-1)


def camera_dirs_to_world(
    c2w: torch.Tensor, dirs_camera: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate camera-space directions into the world and normalise them.

    Args:
        c2w: [n, 3, 4] or [n, 4, 4] camera-to-world matrices (float32), one per direction.
        dirs_camera: [n, 3] camera-space directions (any length > 0).

    Returns:
        ``rays_o`` [n, 3] (the camera centres) and ``rays_d`` [n, 3] unit directions, world
        coordinates, both contiguous.
    """
    rotation = c2w[:, :3, :3]
    rays_d = (rotation * dirs_camera[:, None, :]).sum(-1)
    rays_d = rays_d / torch.linalg.vector_norm(rays_d, dim=-1, keepdim=True)
    return c2w[:, :3, 3].contiguous(), rays_d


def generate_rays(
    c2w: torch.Tensor,
    intrinsics: IntrinsicsTensors,
    u: torch.Tensor,
    v: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays through the centres of pixels ``(u, v)``.

    Args:
        c2w: [n, 3, 4] or [n, 4, 4] float32 camera-to-world (OpenGL camera axes), one per ray.
        intrinsics: n rows, one per ray.
        u, v: [n] integer (or float) pixel indices: column and row; the ray goes through the pixel
            centre ``(u + 0.5, v + 0.5)``.

    Returns:
        ``rays_o`` [n, 3] float32 origins and ``rays_d`` [n, 3] float32 unit directions (world).

    Example:
        >>> from trainer.data.scene import Intrinsics
        >>> camera = Intrinsics(4, 2, fx=2.0, fy=2.0, cx=2.0, cy=1.0)
        >>> cams = IntrinsicsTensors.from_intrinsics([camera])
        >>> o, d = generate_rays(torch.eye(4)[None], cams, torch.tensor([1]), torch.tensor([0]))
        >>> [round(x, 4) for x in d[0].tolist()]
        [-0.2357, 0.2357, -0.9428]
    """
    dtype = intrinsics.focal.dtype
    dirs = pixel_to_camera_dirs(u.to(dtype) + 0.5, v.to(dtype) + 0.5, intrinsics)
    return camera_dirs_to_world(c2w.to(dirs.dtype), dirs)


def camera_rays_for_image(
    frame: Frame, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays through every pixel of one frame, row-major (for rendering a whole test view).

    Args:
        frame: the frame (its ``c2w`` and ``intrinsics`` width × height).
        device: where the rays are built.

    Returns:
        ``rays_o`` and ``rays_d``, each [height * width, 3] float32; row ``v * width + u`` is
        pixel ``(u, v)``, the same order as a :class:`~trainer.data.images.PixelTable` image.
    """
    width, height = frame.intrinsics.width, frame.intrinsics.height
    v, u = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    u, v = u.reshape(-1), v.reshape(-1)
    cameras = IntrinsicsTensors.from_intrinsics([frame.intrinsics], device)
    rows = torch.zeros_like(u)
    c2w = torch.as_tensor(np.asarray(frame.c2w, dtype=np.float32), device=device)[None]
    dirs = pixel_to_camera_dirs(u.float() + 0.5, v.float() + 0.5, cameras[rows])
    return camera_dirs_to_world(c2w.expand(u.shape[0], -1, -1), dirs)


def composite_background(
    rgb: torch.Tensor, alpha: torch.Tensor, background: torch.Tensor
) -> torch.Tensor:
    """Composite straight-alpha colour over a background: ``rgb · α + background · (1 − α)``.

    Args:
        rgb: [n, 3] straight (not premultiplied) colour in [0, 1].
        alpha: [n, 1] opacity in [0, 1].
        background: [n, 3] per-ray or [3] shared background colour in [0, 1].

    Returns:
        [n, 3] composited colour (Porter & Duff 1984, "over").
    """
    return rgb * alpha + background * (1.0 - alpha)
