"""COLMAP scenes: ``sparse/<k>/{cameras,images,points3D}.{bin,txt}`` + ``images/`` (DESIGN.md §1).

The sparse model is read with pycolmap (binary or text; COLMAP ≥ 3.12 ``rigs``/``frames`` files
optional). Each registered image has a world-to-camera pose (quaternion + translation, OpenCV camera
axes: x right, y down, looking down +z) and a camera; several cameras (one per image) are allowed.
Camera models map to the trainer's pinhole + OpenCV distortion (COLMAP ``src/colmap/sensor/models.h``):

============== ============================== ==================================
model          COLMAP params                  Intrinsics
============== ============================== ==================================
SIMPLE_PINHOLE f, cx, cy                      fx = fy = f
PINHOLE        fx, fy, cx, cy
SIMPLE_RADIAL  f, cx, cy, k                   fx = fy = f, k1 = k
RADIAL         f, cx, cy, k1, k2              fx = fy = f
OPENCV         fx, fy, cx, cy, k1, k2, p1, p2
============== ============================== ==================================

COLMAP and the trainer both put the centre of the top-left pixel at (0.5, 0.5), so principal points
carry over unchanged. Other models (fisheye, FULL_OPENCV, …) are rejected, naming the model.

When ``sparse/`` holds several models (``sparse/0``, ``sparse/1``, …, as COLMAP's mapper writes for
disconnected components), the one with the most registered images is used and ``Scene.notes`` says
so; registered vs total images are reported, with a warning below half. Poses: camera-to-world,
OpenGL axes (:func:`~trainer.data.convention.opencv_to_opengl_c2w`), colmap2nerf-style normalisation
(:func:`~trainer.data.convention.normalize_poses`), then the unit cube around the box of the sparse
points (:mod:`trainer.data.scenebox`). Resolution: ``--downscale`` or the automatic rule
(:mod:`trainer.data.resolution`), from an ``images_N/`` folder when one matches (``docs/loading.md``).
"""

from __future__ import annotations

import signal
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.camera_checks import warn_about_layout
from trainer.data.convention import (
    decoded_intrinsics,
    fit_intrinsics_to_file,
    normalize_poses,
    opencv_to_opengl_c2w,
    w2c_to_c2w,
)
from trainer.data.formats.llff import image_files
from trainer.data.formats.ngp import natural_sort_key
from trainer.data.formats.capture import capture_scene
from trainer.data.options import SceneOptions
from trainer.data.resolution import choose_image_source
from trainer.data.scenebox import place_capture, points_box
from trainer.data.scene import Frame, Intrinsics, Scene
from trainer.contract.errors import SceneError

_MODEL_FILES = ("cameras", "images", "points3D")

#: COLMAP camera model → names of its parameters, in COLMAP's order.
CAMERA_MODEL_PARAMS: dict[str, tuple[str, ...]] = {
    "SIMPLE_PINHOLE": ("f", "cx", "cy"),
    "PINHOLE": ("fx", "fy", "cx", "cy"),
    "SIMPLE_RADIAL": ("f", "cx", "cy", "k1"),
    "RADIAL": ("f", "cx", "cy", "k1", "k2"),
    "OPENCV": ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2"),
}


def _pycolmap() -> Any:
    """The pycolmap module, imported with this process's SIGTERM handler kept: pycolmap's import
    installs glog's failure handler for SIGTERM, which prints a C stack trace and ends the process
    before a run, render or export can stop with its one line (and tidy its partial files)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        import pycolmap
    except ImportError:
        raise SceneError("COLMAP scenes need pycolmap (pip install 'ngptune[colmap]')") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return pycolmap


def camera_intrinsics(model: str, width: int, height: int, params: np.ndarray, where: str) -> Intrinsics:
    """Intrinsics of one COLMAP camera (see the table in the module docstring).

    Args:
        model: COLMAP model name, e.g. ``"OPENCV"``.
        width, height: image size in pixels the camera was calibrated for.
        params: the model's parameters in COLMAP's order.
        where: prefix for error messages (file and camera id).

    Raises:
        SceneError: unsupported model (named), wrong parameter count, non-finite values or
            non-positive focal length.
    """
    if model not in CAMERA_MODEL_PARAMS:
        raise SceneError(
            f"{where}: camera model {model} is not supported (supported: {', '.join(CAMERA_MODEL_PARAMS)})"
        )
    names = CAMERA_MODEL_PARAMS[model]
    values = np.asarray(params, dtype=np.float64)
    if values.shape != (len(names),):
        raise SceneError(f"{where}: camera model {model} needs {len(names)} parameters, got {values.size}")
    if not np.all(np.isfinite(values)):
        raise SceneError(f"{where}: camera parameters contain NaN/Infinity: {values.tolist()}")
    p = dict(zip(names, values.tolist()))
    fx = p.get("fx", p.get("f"))
    fy = p.get("fy", p.get("f"))
    assert fx is not None and fy is not None
    if fx <= 0 or fy <= 0 or width <= 0 or height <= 0:
        raise SceneError(
            f"{where}: focal lengths and image size must be positive, "
            f"got {model} {width}x{height} {values.tolist()}"
        )
    return Intrinsics(
        width=int(width),
        height=int(height),
        fx=fx,
        fy=fy,
        cx=p["cx"],
        cy=p["cy"],
        k1=p.get("k1", 0.0),
        k2=p.get("k2", 0.0),
        p1=p.get("p1", 0.0),
        p2=p.get("p2", 0.0),
    )


def _is_model_folder(folder: Path) -> bool:
    return any((folder / f"cameras{ext}").is_file() for ext in (".bin", ".txt"))


def model_folders(path: Path) -> tuple[Path, list[Path]]:
    """``(scene_root, model folders)`` for a scene folder or a model folder.

    ``path`` with a ``sparse/`` folder: the models are ``sparse/<k>`` (and ``sparse`` itself if it
    holds the model files), in natural order. ``path`` holding ``cameras.{bin,txt}``: that model;
    the scene root is the nearest of ``path``, its parent and grandparent with an ``images/`` folder.

    Raises:
        SceneError: no model found.
    """
    if (path / "sparse").is_dir():
        sparse = path / "sparse"
        folders = [sparse] if _is_model_folder(sparse) else []
        folders += sorted(
            (p for p in sparse.iterdir() if p.is_dir() and _is_model_folder(p)),
            key=lambda p: natural_sort_key(p.name),
        )
        if not folders:
            raise SceneError(
                f"{sparse}: no COLMAP model (cameras.bin or cameras.txt) in it or its subfolders"
            )
        return path, folders
    if _is_model_folder(path):
        for root in (path, path.parent, path.parent.parent):
            if (root / "images").is_dir():
                return root, [path]
        return path, [path]
    raise SceneError(f"{path}: no COLMAP model (expected sparse/<k>/cameras.bin or cameras.txt)")


def _unknown_text_model(folder: Path) -> str | None:
    """The first camera model name in ``cameras.txt`` that COLMAP does not know, if any."""
    text_path = folder / "cameras.txt"
    if (folder / "cameras.bin").is_file() or not text_path.is_file():
        return None
    known = set(_pycolmap().CameraModelId.__members__)
    for line in text_path.read_text(errors="replace").splitlines():
        fields = line.split()
        if len(fields) >= 2 and not line.lstrip().startswith("#") and fields[1] not in known:
            return f"camera {fields[0]}: unknown camera model {fields[1]}"
    return None


def read_model(folder: Path) -> Any:
    """Read one sparse model with pycolmap.

    Returns:
        ``pycolmap.Reconstruction``.

    Raises:
        SceneError: model files missing or unreadable (pycolmap's message, or the unknown camera
            model named in ``cameras.txt``).
    """
    pycolmap = _pycolmap()
    for name in _MODEL_FILES:
        if not any((folder / f"{name}{ext}").is_file() for ext in (".bin", ".txt")):
            raise SceneError(f"{folder}: COLMAP model file {name}.bin/.txt not found")
    try:
        return pycolmap.Reconstruction(folder)
    except Exception as exc:  # pycolmap raises ValueError/RuntimeError with C++ check messages
        detail = _unknown_text_model(folder) or " ".join(str(exc).split())
        raise SceneError(f"{folder}: cannot read COLMAP model: {detail}") from None


def _choose_model(root: Path, folders: list[Path]) -> tuple[Path, Any, str]:
    """The model with the most registered images (first in natural order on ties), and a note."""
    models = [(folder, read_model(folder)) for folder in folders]
    counts = [int(model.num_reg_images()) for _, model in models]
    best = int(np.argmax(counts))
    folder, model = models[best]

    def relative(p: Path) -> str:
        return p.relative_to(root).as_posix() if p.is_relative_to(root) else str(p)

    others = [f"{relative(f)} has {c}" for i, ((f, _), c) in enumerate(zip(models, counts)) if i != best]
    detail = f"{counts[best]} registered images" + (f"; {', '.join(others)}" if others else "")
    note = f"colmap: using {relative(folder)} ({detail})"
    return folder, model, note


#: A model that registered less than this fraction of the image files gets a warning.
MIN_REGISTERED_FRACTION = 0.5


def registration_report(model: Any, folder: Path, images_dir: Path) -> tuple[str, bool]:
    """``(note, poor)``: registered vs total images of the chosen model; ``poor`` when fewer than
    :data:`MIN_REGISTERED_FRACTION` of the image files (or of the model's images) were registered."""
    registered = int(model.num_reg_images())
    files = len(image_files(images_dir)) if images_dir.is_dir() else 0
    total = max(files, int(model.num_images()), registered)
    poor = registered < MIN_REGISTERED_FRACTION * total
    note = f"colmap: {registered} of {total} images registered in {folder.name}"
    if poor:
        note += (
            f" (below {MIN_REGISTERED_FRACTION:.0%}: the reconstruction failed for most views; "
            "re-run COLMAP's mapper, e.g. with exhaustive matching)"
        )
    return note, poor


def _sparse_points_box(model: Any, normalization: Any) -> Any:
    """:func:`trainer.data.scenebox.points_box` of the model's points in the normalised world."""
    points = list(model.points3D.values())
    if not points:
        return None
    xyz = np.stack([pt.xyz for pt in points])
    xyz = normalization.scale * (xyz @ normalization.rotation.T - normalization.centre)
    errors = np.array([pt.error for pt in points])
    tracks = np.array([pt.track.length() for pt in points])
    return points_box(xyz, errors, tracks)


def load(path: Path, opts: SceneOptions) -> Scene:
    """Load a COLMAP scene.

    Args:
        path: the scene folder (with ``sparse/`` and ``images/``) or a model folder.
        opts: loader options (``downscale``, None for the automatic rule, which uses an
            ``images_N/`` folder of that factor; ``holdout_every``; ``aabb_scale``).

    Returns:
        Scene with ``format="colmap"``, splits ``train``/``test`` by holdout over the registered
        images in natural order of their names, the box derived from the sparse points
        (:mod:`trainer.data.scenebox`), notes on the model chosen, the registration, the
        resolution, the pose normalisation and the box.

    Raises:
        SceneError: no or unreadable model, no registered image, unsupported camera model, image
            files missing (all listed), unreadable images or images whose aspect ratio disagrees with
            their camera.
    """
    root, folders = model_folders(Path(path))
    folder, model, note = _choose_model(root, folders)

    images = sorted(
        (im for im in model.images.values() if im.has_pose), key=lambda im: natural_sort_key(im.name)
    )
    if not images:
        raise SceneError(f"{folder}: the COLMAP model has no registered image")
    cameras = [model.cameras[im.camera_id] for im in images]
    full_width = max(int(c.width) for c in cameras)
    full_height = max(int(c.height) for c in cameras)
    source = choose_image_source(root, full_width, full_height, opts.downscale, "colmap", opts.min_downscale,
                                 names=[im.name for im in images])
    images_dir = source.folder
    report, poor = registration_report(model, folder, root / "images" if (root / "images").is_dir() else images_dir)
    if poor:
        warnings.warn(f"{folder}: {report.removeprefix('colmap: ')}", stacklevel=3)
    missing = [im.name for im in images if not (images_dir / im.name).is_file()]
    if missing:
        raise SceneError(
            f"{images_dir}: {len(missing)} image file(s) of the COLMAP model not found: {', '.join(missing)}"
        )

    poses = [im.cam_from_world() for im in images]
    c2w = w2c_to_c2w(np.stack([p.rotation.matrix() for p in poses]), np.stack([p.translation for p in poses]))
    if not np.all(np.isfinite(c2w)):
        bad = next(im.name for im, m in zip(images, c2w) if not np.all(np.isfinite(m)))
        raise SceneError(f"{folder}: image {bad}: pose contains NaN/Infinity")
    c2w_source = opencv_to_opengl_c2w(c2w)
    layout_notes = warn_about_layout(c2w_source, str(folder), None)
    c2w, normalization = normalize_poses(c2w_source)
    full_intrinsics = [
        camera_intrinsics(
            camera.model.name, camera.width, camera.height, camera.params,
            f"{folder}: image {image.name} (camera {image.camera_id})",
        )
        for image, camera in zip(images, cameras)
    ]
    placement = place_capture(
        c2w, _sparse_points_box(model, normalization), opts.aabb_scale, "colmap", full_intrinsics
    )

    frames = []
    n_resized = 0
    for image, full, cam in zip(images, full_intrinsics, placement.c2w):
        where = f"{folder}: image {image.name} (camera {image.camera_id})"
        image_path = (images_dir / image.name).absolute()
        fitted = fit_intrinsics_to_file(full, image_path, where)
        n_resized += fitted is not full and source.decode_downscale == source.factor
        frames.append(
            Frame(
                name=image.name,
                image_path=image_path,
                c2w=cam,
                intrinsics=decoded_intrinsics(fitted, source.decode_downscale, where),
            )
        )

    notes = [note, report, source.note, "colmap: " + normalization.describe(), placement.note, *layout_notes]
    if n_resized:
        notes.append(
            f"colmap: {n_resized} image(s) differ in size from their camera; intrinsics scaled to the files"
        )
    return capture_scene("colmap", root, frames, opts, source, placement, normalization, notes)
