"""LLFF scenes: ``poses_bounds.npy`` + ``images/`` (and pre-shrunk ``images_N/``) (DESIGN.md §1).

``poses_bounds.npy`` (Mildenhall et al., *Local Light Field Fusion*, SIGGRAPH 2019,
``imgs2poses.py``) is ``[N, 17]`` float: per image a row-major 3×5 matrix ``[R | t | hwf]`` — rotation
columns are the camera's [down, right, back] axes in COLMAP's world, ``t`` the camera centre, ``hwf``
= (height, width, focal) in pixels at *full* resolution — then the near and far depth bounds.
Row i belongs to the i-th image file in name order (``imgs2poses.py`` sorts COLMAP's image names).

Loading (``docs/loading.md``): poses → OpenGL c2w (:func:`~trainer.data.convention.llff_to_opengl`),
colmap2nerf-style normalisation (:func:`~trainer.data.convention.normalize_poses`), then the unit cube
around the box of the near/far bounds inside the camera frusta (:mod:`trainer.data.scenebox`,
``aabb_scale`` 1 unless overridden). Intrinsics: ``fx = fy = focal``, principal point at the centre,
scaled to the size of the image files used. The downscale factor is ``--downscale`` or the automatic
rule (:mod:`trainer.data.resolution`); an ``images_N/`` folder of that factor (already shrunk by
LLFF's tools) is used as it is and ``Scene.downscale`` is 1; otherwise ``images/`` is used and shrunk
by the factor when decoded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.data.camera_checks import warn_about_layout
from trainer.data.convention import (
    check_rotation,
    decoded_intrinsics,
    fit_intrinsics_to_file,
    llff_to_opengl,
    normalize_poses,
)
from trainer.data.formats.capture import capture_scene
from trainer.data.options import SceneOptions
from trainer.data.resolution import choose_image_source
from trainer.data.scenebox import frusta_box, place_capture
from trainer.data.scene import Frame, Intrinsics, Scene
from trainer.contract.errors import SceneError

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


def load(path: Path, opts: SceneOptions) -> Scene:
    """Load an LLFF scene.

    Args:
        path: ``poses_bounds.npy`` or the folder holding it (with ``images/`` / ``images_N/``).
        opts: loader options (``downscale``, None for the automatic rule; ``holdout_every``;
            ``aabb_scale``, which multiplies the derived box).

    Returns:
        Scene with ``format="llff"``, splits ``train``/``test`` by holdout, the box derived from the
        near/far bounds (:mod:`trainer.data.scenebox`), notes on the resolution, the pose
        normalisation and the box.

    Raises:
        SceneError: bad ``poses_bounds.npy``, a pose that is not a rotation (mirrors included),
            missing image folder, image count different from the pose count, unreadable images or
            images whose aspect ratio disagrees with ``hwf``.
    """
    path = Path(path)
    npy_path = path if path.is_file() else path / "poses_bounds.npy"
    root = npy_path.parent
    poses_bounds = read_poses_bounds(npy_path)
    poses = poses_bounds[:, :15].reshape(-1, 3, 5)
    for row, pose in enumerate(poses):
        check_rotation(pose[:, :3], f"{npy_path}: row {row}")

    full_height, full_width = (int(round(v)) for v in poses[0, :2, 4])
    source = choose_image_source(root, full_width, full_height, opts.downscale, "llff", opts.min_downscale)
    folder = source.folder
    files = image_files(folder)
    if len(files) != len(poses):
        raise SceneError(
            f"{npy_path}: has {len(poses)} poses but {folder} has {len(files)} images (PNG/JPEG); "
            "they must match one to one"
        )

    c2w_source = llff_to_opengl(poses)
    layout_notes = warn_about_layout(c2w_source, str(npy_path), None)
    c2w, normalization = normalize_poses(c2w_source)

    full_intrinsics = []
    fitted_intrinsics = []
    for i, (image_path, pose) in enumerate(zip(files, poses)):
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
        full_intrinsics.append(full)
        fitted_intrinsics.append(fit_intrinsics_to_file(full, image_path, where))
    bounds = poses_bounds[:, 15:17] * normalization.scale
    box = frusta_box(c2w, full_intrinsics, bounds[:, 0], bounds[:, 1])
    placement = place_capture(c2w, box, opts.aabb_scale, "llff")

    frames = [
        Frame(
            name=image_path.name,
            image_path=image_path.absolute(),
            c2w=cam,
            intrinsics=decoded_intrinsics(fitted, source.decode_downscale, f"{npy_path}: row {i}"),
        )
        for i, (image_path, cam, fitted) in enumerate(zip(files, placement.c2w, fitted_intrinsics))
    ]
    notes = [source.note, "llff: " + normalization.describe(), placement.note, *layout_notes]
    return capture_scene("llff", root, frames, opts, source, placement, normalization, notes)
