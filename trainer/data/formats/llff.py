"""LLFF scenes: ``poses_bounds.npy`` + ``images/`` (and pre-shrunk ``images_N/``) (DESIGN.md §1).

``poses_bounds.npy`` (Mildenhall et al., *Local Light Field Fusion*, SIGGRAPH 2019,
``imgs2poses.py``) is ``[N, 17]`` float: per image a row-major 3×5 matrix ``[R | t | hwf]`` — rotation
columns are the camera's [down, right, back] axes in COLMAP's world, ``t`` the camera centre, ``hwf``
= (height, width, focal) in pixels at *full* resolution — then the near and far depth bounds.
Row i belongs to the i-th image file in name order (``imgs2poses.py`` sorts COLMAP's image names).

Loading: poses → OpenGL c2w (:func:`~trainer.data.convention.llff_to_opengl`), colmap2nerf-style
normalisation (:func:`~trainer.data.convention.normalize_poses`), then the unit cube with instant-ngp's
defaults (scale 0.33, offset 0.5). Intrinsics: ``fx = fy = focal``, principal point at the centre,
scaled to the size of the image files used. With ``downscale = N > 1`` and an ``images_N/`` folder,
its images (already shrunk by LLFF's tools) are used as they are and ``Scene.downscale`` is 1;
otherwise ``images/`` is used and shrunk by ``downscale`` when decoded. The near/far bounds are not
used. Default ``aabb_scale`` 16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.data.convention import (
    decoded_intrinsics,
    fit_intrinsics_to_image,
    holdout_splits,
    check_rotation,
    llff_to_opengl,
    nerf_to_unit_cube,
    normalize_poses,
)
from trainer.data.imageinfo import image_size
from trainer.data.options import SceneOptions
from trainer.data.scene import Frame, Intrinsics, Scene
from trainer.errors import SceneError

DEFAULT_AABB_SCALE = 16
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def image_files(folder: Path) -> list[Path]:
    """Image files (PNG/JPEG, any case, not hidden) directly in ``folder``, sorted by name."""
    return sorted(
        (
            p
            for p in folder.iterdir()
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
        ),
        key=lambda p: p.name,
    )


def read_poses_bounds(npy_path: Path) -> np.ndarray:
    """``poses_bounds.npy`` as ``[N, 17]`` float64.

    Raises:
        SceneError: unreadable file, wrong shape, non-finite values, or non-positive ``hwf``.
    """
    try:
        array = np.load(npy_path, allow_pickle=False)
    except FileNotFoundError:
        raise SceneError(f"{npy_path}: file not found") from None
    except (OSError, ValueError, EOFError) as exc:
        raise SceneError(f"{npy_path}: not a readable .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive renamed .npy
        array.close()
        raise SceneError(f"{npy_path}: expected one .npy array, found an .npz archive")
    if array.ndim != 2 or array.shape[1] != 17 or array.shape[0] == 0:
        raise SceneError(
            f"{npy_path}: expected an [N, 17] array (3x5 pose + near/far per image), "
            f"got shape {list(array.shape)}"
        )
    if not np.issubdtype(array.dtype, np.number):
        raise SceneError(f"{npy_path}: expected numbers, got dtype {array.dtype}")
    array = array.astype(np.float64)
    bad_rows = np.flatnonzero(~np.all(np.isfinite(array), axis=1))
    if bad_rows.size:
        raise SceneError(f"{npy_path}: row {int(bad_rows[0])} contains NaN/Infinity")
    hwf = array[:, :15].reshape(-1, 3, 5)[:, :, 4]
    bad_rows = np.flatnonzero(np.any(hwf <= 0, axis=1))
    if bad_rows.size:
        raise SceneError(
            f"{npy_path}: row {int(bad_rows[0])}: hwf (height, width, focal) must be positive, "
            f"got {hwf[bad_rows[0]].tolist()}"
        )
    return array


def image_folder(root: Path, downscale: int) -> tuple[Path, bool]:
    """``(folder, pre_shrunk)``: ``images_<downscale>/`` if it exists (and downscale > 1), else ``images/``.

    Raises:
        SceneError: when the chosen folder does not exist.
    """
    if downscale > 1 and (root / f"images_{downscale}").is_dir():
        return root / f"images_{downscale}", True
    folder = root / "images"
    if not folder.is_dir():
        raise SceneError(f"{folder}: image folder not found")
    return folder, False


def load(path: Path, opts: SceneOptions) -> Scene:
    """Load an LLFF scene.

    Args:
        path: ``poses_bounds.npy`` or the folder holding it (with ``images/`` / ``images_N/``).
        opts: loader options (``downscale`` picks ``images_N/``, ``holdout_every``, ``aabb_scale``).

    Returns:
        Scene with ``format="llff"``, splits ``train``/``test`` by holdout, ``aabb_scale`` 16 unless
        overridden, a note on the image folder and the pose normalisation.

    Raises:
        SceneError: bad ``poses_bounds.npy``, missing image folder, image count different from the
            pose count, unreadable images or images whose aspect ratio disagrees with ``hwf``.
    """
    path = Path(path)
    npy_path = path if path.is_file() else path / "poses_bounds.npy"
    root = npy_path.parent
    poses_bounds = read_poses_bounds(npy_path)
    poses = poses_bounds[:, :15].reshape(-1, 3, 5)
    for row, pose in enumerate(poses):
        check_rotation(pose[:, :3], f"{npy_path}: row {row}")

    folder, pre_shrunk = image_folder(root, opts.downscale)
    files = image_files(folder)
    if len(files) != len(poses):
        raise SceneError(
            f"{npy_path}: has {len(poses)} poses but {folder} has {len(files)} images (PNG/JPEG); "
            "they must match one to one"
        )
    decode_downscale = 1 if pre_shrunk else opts.downscale

    c2w, normalization = normalize_poses(llff_to_opengl(poses))
    c2w = nerf_to_unit_cube(c2w)

    frames = []
    for i, (image_path, pose, cam) in enumerate(zip(files, poses, c2w)):
        height, width, focal = pose[:, 4]
        where = f"{npy_path}: row {i} ({folder.name}/{image_path.name})"
        full = Intrinsics(
            width=int(round(width)),
            height=int(round(height)),
            fx=float(focal),
            fy=float(focal),
            cx=0.5 * float(width),
            cy=0.5 * float(height),
        )
        file_w, file_h = image_size(image_path)
        fitted = fit_intrinsics_to_image(full, file_w, file_h, where)
        frames.append(
            Frame(
                name=image_path.name,
                image_path=image_path.absolute(),
                c2w=cam,
                intrinsics=decoded_intrinsics(fitted, decode_downscale, where),
            )
        )

    notes = [
        f"llff: images from {folder.name}/"
        + (f" (already shrunk by {opts.downscale}, decoded as they are)" if pre_shrunk else ""),
        "llff: " + normalization.describe(),
    ]
    return Scene(
        format="llff",
        root=root,
        splits=holdout_splits(frames, opts.holdout_every),
        aabb_scale=opts.aabb_scale if opts.aabb_scale is not None else DEFAULT_AABB_SCALE,
        notes=notes,
        downscale=decode_downscale,
        pose_normalization=normalization,
        held_out_every=opts.holdout_every,
    )
