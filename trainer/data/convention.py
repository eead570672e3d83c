"""Camera conventions shared by the scene loaders, as small pure numpy functions.

Every loader ends with cameras in the trainer's convention (:mod:`trainer.data.scene`): camera-to-world
4×4 float64, OpenGL camera axes (x right, y up, looking down −z), world mapped into instant-ngp's unit
cube. The steps there:

* source camera axes → OpenGL axes: :func:`opencv_to_opengl_c2w` (COLMAP), :func:`llff_to_opengl`
  (LLFF ``poses_bounds.npy``); :func:`w2c_to_c2w` inverts a rigid world-to-camera transform;
* captures without a canonical frame (LLFF, COLMAP) → "NeRF-sized" world:
  :func:`normalize_poses` (instant-ngp ``scripts/colmap2nerf.py``);
* NeRF world → unit cube: :func:`nerf_to_unit_cube` (instant-ngp ``nerf_matrix_to_ngp``);
* intrinsics → the image as decoded: :func:`fit_intrinsics_to_image`, :func:`decoded_intrinsics`;
* the train/test holdout rule of formats without splits: :func:`holdout_splits`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from trainer.data.imageinfo import exif_orientation, image_size
from trainer.data.scene import Intrinsics
from trainer.contract.errors import SceneError

#: instant-ngp's default NeRF scale (``NERF_SCALE`` in ``nerf_loader.h``) and offset.
NERF_SCALE = 0.33
NERF_OFFSET = (0.5, 0.5, 0.5)

#: colmap2nerf scales the scene so that the mean camera distance to the centre is this.
MEAN_CAMERA_DISTANCE = 4.0

# colmap2nerf ignores camera pairs whose squared sine of the angle between the optical axes is
# below this (nearly parallel axes have no useful closest point).
_MIN_PAIR_WEIGHT = 1e-5


def _as_c2w_stack(c2w: np.ndarray, name: str) -> tuple[np.ndarray, bool]:
    """``c2w`` as float64 ``[n, 4, 4]`` and whether the input was a single ``[4, 4]`` matrix."""
    arr = np.asarray(c2w, dtype=np.float64)
    assert arr.shape[-2:] == (4, 4) and arr.ndim in (2, 3), (
        f"{name}: expected [4,4] or [n,4,4], got {arr.shape}"
    )
    return (arr[None] if arr.ndim == 2 else arr), arr.ndim == 2


def check_rotation(rotation: np.ndarray, where: str, tolerance: float = 0.1) -> None:
    """Reject a camera rotation that is not (close to) a rotation matrix.

    Args:
        rotation: [3, 3] the camera-to-world rotation part of a pose.
        where: names the file and frame/row in the error.
        tolerance: largest allowed deviation of ``RᵀR`` from the identity (poses written by
            tools are orthonormal to ~1e-6; 0.1 still admits sloppy hand-written ones).

    Raises:
        SceneError: the matrix is singular (e.g. all zeros), far from orthonormal, or a mirror
            (determinant −1, however well scaled).
    """
    rotation = np.asarray(rotation, dtype=np.float64)
    deviation = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    det = float(np.linalg.det(rotation)) if np.all(np.isfinite(rotation)) else float("nan")
    if not np.isfinite(deviation) or deviation > tolerance:
        raise SceneError(
            f"{where}: the pose's 3x3 rotation is not a rotation (|RᵀR − I| = {deviation:.3g}, "
            f"det = {det:.3g})"
        )
    if det < 0:
        raise SceneError(
            f"{where}: the pose's 3x3 rotation is a mirror (det = {det:.3g}, a rotation has det +1): "
            "one camera axis is flipped"
        )


def nerf_to_unit_cube(
    c2w_nerf: np.ndarray,
    scale: float = NERF_SCALE,
    offset: Sequence[float] = NERF_OFFSET,
) -> np.ndarray:
    """Map NeRF-world camera-to-world matrices into instant-ngp's unit-cube world.

    A world point ``p`` becomes ``cycle(p · scale + offset)`` with ``cycle(x, y, z) = (y, z, x)``:
    the translation is scaled and offset, then the rows of rotation and translation are cycled
    (new x = old y, new y = old z, new z = old x). The rotation is not scaled, so directions keep
    unit length and depths along a ray are in unit-cube units. Unlike instant-ngp, the camera's y and
    z columns are not negated: the result keeps OpenGL camera axes.

    Source: instant-ngp ``include/neural-graphics-primitives/nerf_loader.h``,
    ``NerfDataset::nerf_matrix_to_ngp``.

    Args:
        c2w_nerf: [4, 4] or [n, 4, 4] camera-to-world, OpenGL axes, NeRF world units.
        scale: world scale factor (instant-ngp default 0.33).
        offset: 3 numbers added after scaling, before the axis cycle.

    Returns:
        Same shape as ``c2w_nerf``, float64, unit-cube world; bottom row ``[0, 0, 0, 1]``.

    Raises:
        SceneError: when ``scale``/``offset`` send a camera position to infinity or NaN.
    """
    stack, single = _as_c2w_stack(c2w_nerf, "c2w_nerf")
    out = stack.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        out[:, :3, 3] = out[:, :3, 3] * float(scale) + np.asarray(offset, dtype=np.float64)
    if not np.all(np.isfinite(out[:, :3, 3])):
        raise SceneError(
            f"scale {float(scale)!r} / offset {[float(v) for v in offset]!r} map a camera position "
            "to infinity or NaN"
        )
    out[:, :3, :] = out[:, [1, 2, 0], :]
    return out[0] if single else out


def opencv_to_opengl_c2w(c2w_opencv: np.ndarray) -> np.ndarray:
    """Change the camera axes of camera-to-world matrices from OpenCV to OpenGL.

    OpenCV/COLMAP cameras are x right, y down, looking down +z; OpenGL/NeRF cameras are x right,
    y up, looking down −z. The camera's y and z columns are negated; the world is unchanged.

    Args:
        c2w_opencv: [4, 4] or [n, 4, 4] camera-to-world with OpenCV camera axes.

    Returns:
        Same shape, float64, OpenGL camera axes.
    """
    stack, single = _as_c2w_stack(c2w_opencv, "c2w_opencv")
    out = stack.copy()
    out[:, :3, 1:3] *= -1.0
    return out[0] if single else out


def w2c_to_c2w(rotation_w2c: np.ndarray, translation_w2c: np.ndarray) -> np.ndarray:
    """Invert rigid world-to-camera transforms ``x_cam = R x_world + t`` into camera-to-world.

    Args:
        rotation_w2c: [n, 3, 3] rotation matrices R.
        translation_w2c: [n, 3] translations t.

    Returns:
        [n, 4, 4] float64 camera-to-world ``[[Rᵀ, −Rᵀ t], [0, 0, 0, 1]]`` (camera axes unchanged).
    """
    rot = np.asarray(rotation_w2c, dtype=np.float64)
    trans = np.asarray(translation_w2c, dtype=np.float64)
    assert rot.ndim == 3 and rot.shape[1:] == (3, 3) and trans.shape == (rot.shape[0], 3)
    rot_c2w = np.transpose(rot, (0, 2, 1))
    out = np.zeros((rot.shape[0], 4, 4), dtype=np.float64)
    out[:, :3, :3] = rot_c2w
    out[:, :3, 3] = -np.einsum("nij,nj->ni", rot_c2w, trans)
    out[:, 3, 3] = 1.0
    return out


def llff_to_opengl(poses_llff: np.ndarray) -> np.ndarray:
    """Turn LLFF poses into camera-to-world matrices with OpenGL camera axes.

    LLFF (``poses_bounds.npy``, Mildenhall et al. 2019, ``imgs2poses.py``) stores per image a 3×5
    matrix ``[R | t | hwf]`` whose rotation columns are the camera's [down, right, back] axes in
    world coordinates. OpenGL axes are [right, up, back] = [col1, −col0, col2] (the same swap as
    NeRF's ``load_llff.py``). The world is COLMAP's, unchanged.

    Args:
        poses_llff: [n, 3, 4] or [n, 3, 5] (the hwf column, if present, is ignored).

    Returns:
        [n, 4, 4] float64 camera-to-world, OpenGL camera axes.
    """
    poses = np.asarray(poses_llff, dtype=np.float64)
    assert poses.ndim == 3 and poses.shape[1] == 3 and poses.shape[2] in (4, 5), poses.shape
    out = np.zeros((poses.shape[0], 4, 4), dtype=np.float64)
    out[:, :3, 0] = poses[:, :, 1]
    out[:, :3, 1] = -poses[:, :, 0]
    out[:, :3, 2] = poses[:, :, 2]
    out[:, :3, 3] = poses[:, :, 3]
    out[:, 3, 3] = 1.0
    return out


def rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation taking direction ``a`` to direction ``b`` (Rodrigues' formula).

    Source: instant-ngp ``scripts/colmap2nerf.py`` ``rotmat``; for opposite directions, where the
    axis is undefined, this returns the half turn about the x axis, or about the part of it
    orthogonal to ``a`` (colmap2nerf jitters the input randomly instead; this stays deterministic).

    Args:
        a, b: [3] non-zero vectors (any length).

    Returns:
        [3, 3] float64 rotation matrix R with ``R a/|a| = b/|b|``.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a / np.linalg.norm(a)
    b = b / np.linalg.norm(b)
    v = np.cross(a, b)
    c = float(np.dot(a, b))
    if c < -1.0 + 1e-10:
        # Half turn about the part of the x axis orthogonal to a (the y axis if a is along x).
        axis = np.array([1.0, 0.0, 0.0]) - a[0] * a
        if np.linalg.norm(axis) < 1e-6:
            axis = np.array([0.0, 1.0, 0.0]) - a[1] * a
        axis /= np.linalg.norm(axis)
        return 2.0 * np.outer(axis, axis) - np.eye(3)
    k = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
    return np.eye(3) + k + k @ k / (1.0 + c)


def axis_pair_closest(
    o_a: np.ndarray, d_a: np.ndarray, o_b: np.ndarray, d_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closest points of the line pairs ``o_a + t_a d_a`` and ``o_b + t_b d_b`` (broadcasting over
    leading axes; the last axis has the 3 coordinates, directions of unit length).

    ``t_a = det[o_b − o_a, d_b, c] / |c|²``, ``t_b = det[o_b − o_a, d_a, c] / |c|²`` with
    ``c = d_a × d_b`` (instant-ngp ``scripts/colmap2nerf.py``, ``closest_point_2_lines``).

    Returns:
        ``(t_a, t_b, weight)``, each of the broadcast shape without the last axis; ``weight = |c|²``
        (zero for parallel lines, whose ``t`` are meaningless).
    """
    cross = np.cross(d_a, d_b)
    weight = np.sum(cross * cross, axis=-1)
    delta = o_b - o_a
    # det[x, y, z] = x · (y × z)
    t_a = np.sum(delta * np.cross(d_b, cross), axis=-1) / (weight + 1e-10)
    t_b = np.sum(delta * np.cross(d_a, cross), axis=-1) / (weight + 1e-10)
    return t_a, t_b, weight


def centre_of_attention(c2w: np.ndarray, chunk: int = 256) -> np.ndarray:
    """The point the cameras look at: weighted mean of the closest points of their optical axes.

    For every pair of cameras (a, b), with origins o and unit *back* axes d (column 2 of an OpenGL
    c2w), the closest points of the lines ``o_a + t_a d_a`` and ``o_b + t_b d_b`` are found with
    ``t_a = det[o_b − o_a, d_b, c] / |c|²``, ``t_b = det[o_b − o_a, d_a, c] / |c|²``, ``c = d_a × d_b``;
    ``t`` is clamped to ≤ 0 (the point must lie in front of the camera, which looks along −d); the
    pair votes for the midpoint with weight ``|c|²`` (zero for parallel axes) if that exceeds 1e-5.

    Source: instant-ngp ``scripts/colmap2nerf.py`` (``closest_point_2_lines`` and the loop over
    frame pairs); here vectorised over pairs in chunks of ``chunk`` cameras.

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL camera axes.
        chunk: rows of the pair matrix processed at once (memory bound ``chunk · n``).

    Returns:
        [3] float64 centre; the zero vector when no pair has a usable weight (for example one camera
        or all axes parallel), as colmap2nerf does.
    """
    stack, _ = _as_c2w_stack(c2w, "c2w")
    origins = stack[:, :3, 3]
    dirs = stack[:, :3, 2] / np.linalg.norm(stack[:, :3, 2], axis=1, keepdims=True)
    n = origins.shape[0]
    total_point = np.zeros(3)
    total_weight = 0.0
    for start in range(0, n, chunk):
        o_a = origins[start : start + chunk, None, :]  # [c, 1, 3]
        d_a = dirs[start : start + chunk, None, :]
        o_b = origins[None, :, :]  # [1, n, 3]
        d_b = dirs[None, :, :]
        t_a, t_b, weight = axis_pair_closest(o_a, d_a, o_b, d_b)
        t_a = np.minimum(t_a, 0.0)[..., None]
        t_b = np.minimum(t_b, 0.0)[..., None]
        midpoint = 0.5 * (o_a + t_a * d_a + o_b + t_b * d_b)
        used = weight > _MIN_PAIR_WEIGHT
        total_point += np.sum(midpoint[used] * weight[used][:, None], axis=0)
        total_weight += float(np.sum(weight[used]))
    if total_weight > 0.0:
        return total_point / total_weight
    return np.zeros(3)


@dataclasses.dataclass(frozen=True)
class PoseNormalization:
    """The similarity :func:`normalize_poses` applied: ``p' = scale · (R p − centre)``.

    Attributes:
        rotation: [3, 3] float64, takes the mean camera up vector to +z.
        centre: [3] float64, centre of attention in the rotated world (subtracted).
        scale: float, factor applied to the recentred camera positions.
    """

    rotation: np.ndarray
    centre: np.ndarray
    scale: float

    def describe(self) -> str:
        """One line for ``Scene.notes``."""
        angle_deg = float(np.degrees(np.arccos(np.clip((np.trace(self.rotation) - 1.0) / 2.0, -1.0, 1.0))))
        c = ", ".join(f"{v:.4g}" for v in self.centre)
        return (
            f"poses normalised like colmap2nerf: up rotated to +z by {angle_deg:.3g} deg, "
            f"centre ({c}) moved to the origin, scaled by {self.scale:.4g}"
        )


def normalize_poses(c2w: np.ndarray) -> tuple[np.ndarray, PoseNormalization]:
    """Re-orient, recentre and rescale a capture the way instant-ngp's ``colmap2nerf.py`` does.

    1. Rotate the world so that the mean camera up vector (sum of the c2w y columns) becomes +z.
    2. Translate so that :func:`centre_of_attention` is the origin.
    3. Scale camera positions so that their mean distance to the origin is 4.0
       (:data:`MEAN_CAMERA_DISTANCE`; rotations keep unit columns).

    colmap2nerf also permutes COLMAP's world axes (``c2w[[1, 0, 2]]``, then flips z) before step 1;
    that fixed rotation only changes the heading about the new up axis, and is left out so that a
    capture that already has up = +z, centre 0 and mean distance 4 is left unchanged.

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL camera axes, any world.

    Returns:
        ``(c2w_normalised [n, 4, 4] float64, PoseNormalization)``.
    """
    stack, _ = _as_c2w_stack(c2w, "c2w")
    up = np.sum(stack[:, :3, 1], axis=0)
    # All up vectors cancelling out leaves no preferred up: keep the world as it is.
    no_up = np.linalg.norm(up) < 1e-12
    rotation = np.eye(3) if no_up else rotation_between(up, np.array([0.0, 0.0, 1.0]))
    out = stack.copy()
    out[:, :3, :] = np.einsum("ij,njk->nik", rotation, stack[:, :3, :])
    centre = centre_of_attention(out)
    out[:, :3, 3] -= centre
    mean_distance = float(np.mean(np.linalg.norm(out[:, :3, 3], axis=1)))
    scale = MEAN_CAMERA_DISTANCE / mean_distance if mean_distance > 1e-12 else 1.0
    out[:, :3, 3] *= scale
    return out, PoseNormalization(rotation=rotation, centre=centre, scale=scale)


def fit_intrinsics_to_image(
    intrinsics: Intrinsics, width: int, height: int, where: str, exif_orientation: int = 1
) -> Intrinsics:
    """Intrinsics of a calibration of ``intrinsics.width × intrinsics.height`` for an image of
    ``width × height`` pixels that is a uniformly resized copy of the calibrated one.

    The scale factor is ``width / intrinsics.width``; the height must agree with it to within one
    pixel (image resizers round), and the result has exactly ``width × height``. ``width × height``
    is the size as displayed; ``exif_orientation`` (1..8) is the file's tag, named in the error when
    it turns the image by 90° (a common cause of a mismatch: the calibration is of the stored pixels).

    Raises:
        SceneError: naming ``where`` when the aspect ratios disagree (not a uniform resize).
    """
    if (width, height) == (intrinsics.width, intrinsics.height):
        return intrinsics
    factor = width / intrinsics.width
    if abs(intrinsics.height * factor - height) > 1.0:
        raise SceneError(
            f"{where}: image is {width}x{height} but the camera is calibrated for "
            f"{intrinsics.width}x{intrinsics.height} (not a uniform resize){_exif_hint(exif_orientation)}"
        )
    return dataclasses.replace(intrinsics.scaled(factor), width=width, height=height)


def _exif_hint(exif_orientation: int) -> str:
    """The part of a size-mismatch error that names an EXIF orientation turning the image by 90°."""
    if exif_orientation not in (5, 6, 7, 8):
        return ""
    return (
        f"; the file's EXIF orientation {exif_orientation} turns it by 90° (its stored pixels are "
        "the other way round): the calibration is of the unrotated image, so strip or apply the EXIF "
        "orientation consistently with the calibration"
    )


def decoded_intrinsics(intrinsics: Intrinsics, downscale: int, where: str) -> Intrinsics:
    """Intrinsics of the image as the image pipeline decodes it, shrunk by ``downscale``.

    Focal lengths and principal point are multiplied by ``1 / downscale``
    (:meth:`Intrinsics.scaled`); the decoded size is ``width // downscale × height // downscale``,
    the size the image pipeline produces.

    Raises:
        SceneError: naming ``where`` if the decoded image would be empty.
    """
    if downscale == 1:
        return intrinsics
    width, height = intrinsics.width // downscale, intrinsics.height // downscale
    if width < 1 or height < 1:
        raise SceneError(
            f"{where}: downscale {downscale} leaves nothing of a {intrinsics.width}x{intrinsics.height} image"
        )
    return dataclasses.replace(intrinsics.scaled(1.0 / downscale), width=width, height=height)


_T = TypeVar("_T")


def holdout_splits(frames: Sequence[_T], holdout_every: int) -> dict[str, list[_T]]:
    """Split frames of a format without splits into ``train`` and ``test``.

    Frames ``0, k, 2k, …`` (``k = holdout_every``, in the given order) go to ``test``, the rest to
    ``train``; ``k = 0`` puts every frame in ``train`` and leaves ``test`` empty
    (:class:`trainer.data.options.SceneOptions`).

    Returns:
        ``{"train": [...], "test": [...]}``.
    """
    if holdout_every == 0:
        return {"train": list(frames), "test": []}
    train = [f for i, f in enumerate(frames) if i % holdout_every != 0]
    test = [f for i, f in enumerate(frames) if i % holdout_every == 0]
    return {"train": train, "test": test}


def fit_intrinsics_to_file(intrinsics: Intrinsics, image_path: Path, where: str) -> Intrinsics:
    """:func:`fit_intrinsics_to_image` for the image file at ``image_path`` (its displayed size and
    EXIF orientation read from the header).

    Raises:
        SceneError: an unreadable header, or aspect ratios that disagree (naming ``where`` and any
            EXIF rotation).
    """
    width, height = image_size(image_path)
    return fit_intrinsics_to_image(intrinsics, width, height, where, exif_orientation(image_path))
