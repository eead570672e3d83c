"""instant-ngp ``transforms.json`` scenes (DESIGN.md §1).

The file follows instant-ngp's ``src/nerf_loader.cu`` (``load_nerf``, ``read_focal_length``,
``read_lens``):

* intrinsics at the root and/or per frame: ``fl_x fl_y`` (pixels), ``x_fov y_fov`` (degrees),
  ``camera_angle_x camera_angle_y`` (radians), ``cx cy`` (pixels, default the image centre), ``w h``
  (may be floats), OpenCV distortion ``k1 k2 p1 p2 k3 k4``. A frame's ``cx cy w h k* p*`` override
  the root's one by one; if a frame gives any focal key, its focal lengths replace the root's as a
  whole (instant-ngp reads the focal length from the root, then again from the frame). Per axis the
  focal length comes from ``*_fov``, else ``fl_*``, else ``camera_angle_*``; with only one axis
  given, the other axis uses the same focal length.
* ``aabb_scale`` (power of two 1..128, default 1), ``scale`` (default 0.33), ``offset`` (3 numbers or
  one, default 0.5), or ``aabb`` ([[min], [max]], which sets both scale and offset).
* frames in natural sort order of ``file_path``; ``file_path`` relative to the JSON's folder, with
  or without extension; ``sharpness`` kept. When the frames carry ``sharpness`` (instant-ngp checks
  the first frame), frames whose image file is missing are skipped with one warning, as instant-ngp
  does; otherwise every missing file is reported in one error.
* ``transform_matrix`` is camera-to-world with OpenGL axes in the NeRF world; its first three rows
  are used (as instant-ngp does) and mapped into the unit cube with
  :func:`trainer.data.convention.nerf_to_unit_cube`.

The helpers below are shared with the NeRF-synthetic (Blender) loader, whose JSON files are a subset
of this format.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.convention import (
    check_rotation,
    NERF_OFFSET,
    NERF_SCALE,
    decoded_intrinsics,
    fit_intrinsics_to_image,
    holdout_splits,
    nerf_to_unit_cube,
    opencv_to_opengl_c2w,
)
from trainer.data.camera_checks import warn_about_layout
from trainer.data.imageinfo import exif_orientation, image_size
from trainer.data.options import SceneOptions, check_aabb_scale
from trainer.data.scene import Frame, Intrinsics, Scene, SkippedFrame, SkippedFramesWarning
from trainer.contract.errors import SceneError
from trainer.contract.runstatus import fitted_warning
from trainer.contract.textlines import counted

#: Extensions tried, in order, for a ``file_path`` that does not name an existing file.
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG")
_UNSUPPORTED_EXTENSIONS = (".exr", ".EXR", ".hdr", ".HDR")

_FOCAL_KEYS = ("x_fov", "y_fov", "fl_x", "fl_y", "camera_angle_x", "camera_angle_y")
_LENS_KEYS = ("cx", "cy", "w", "h", "k1", "k2", "k3", "k4", "p1", "p2")
# Lens models of instant-ngp that the trainer's pinhole + OpenCV camera cannot represent.
_UNSUPPORTED_LENS_KEYS = ("ftheta_p0", "latlong", "equirectangular")


def natural_sort_key(text: str) -> list[object]:
    """Sort key putting ``img2`` before ``img10`` (digit runs compare as numbers).

    Matches instant-ngp's use of ``SI::natural::compare`` on ``file_path``.
    """
    parts = re.split(r"(\d+)", text)
    return [int(p) if i % 2 else p for i, p in enumerate(parts)]


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON object from ``path``.

    Python's ``json`` accepts the ``NaN``/``Infinity`` tokens; callers check values for finiteness.

    Raises:
        SceneError: file missing or unreadable, a syntax error (with line and column), or a top
            level that is not an object.
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise SceneError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise SceneError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SceneError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SceneError(f"{path}:{exc.lineno}:{exc.colno}: JSON syntax error: {exc.msg}") from None
    except RecursionError:
        raise SceneError(f"{path}: JSON nested too deeply to be a scene file") from None
    if not isinstance(data, dict):
        raise SceneError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    return data


def number(value: object, where: str, *, positive: bool = False) -> float:
    """``value`` as a finite float (ints accepted, bools and strings not).

    Raises:
        SceneError: ``"{where}: expected a ... number, got ..."``.
    """
    kind = "a positive finite number" if positive else "a finite number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SceneError(f"{where}: expected {kind}, got {value!r}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result) or (positive and result <= 0.0):
        raise SceneError(f"{where}: expected {kind}, got {value!r}")
    return result


def pixel_count(value: object, where: str) -> int:
    """An image dimension: a positive whole number (``1080`` or ``1080.0``)."""
    result = number(value, where, positive=True)
    if not result.is_integer():
        raise SceneError(f"{where}: expected a whole number of pixels, got {value!r}")
    return int(result)


def world_transform(data: dict[str, Any], where: str) -> tuple[float, np.ndarray]:
    """``(scale, offset [3])`` of the NeRF → unit-cube mapping from ``scale``/``offset``/``aabb``.

    ``aabb`` ``[[x0, y0, z0], [x1, y1, z1]]`` maps that box isotropically into the unit cube with
    its centre at 0.5 (``scale = 1 / longest side``, ``offset = 0.5 − centre · scale``), overriding
    ``scale`` and ``offset`` (instant-ngp ``load_nerf``).

    Raises:
        SceneError: naming ``where`` and the key for a value of the wrong type or out of range.
    """
    scale = NERF_SCALE
    offset = np.array(NERF_OFFSET, dtype=np.float64)
    if "scale" in data:
        scale = number(data["scale"], f"{where}: scale", positive=True)
    if "offset" in data:
        value = data["offset"]
        if isinstance(value, list):
            if len(value) != 3:
                raise SceneError(f"{where}: offset: expected 3 numbers, got {len(value)}")
            offset = np.array([number(v, f"{where}: offset[{i}]") for i, v in enumerate(value)])
        else:
            offset = np.full(3, number(value, f"{where}: offset"))
    if "aabb" in data:
        box = data["aabb"]
        if not (
            isinstance(box, list) and len(box) == 2 and all(isinstance(c, list) and len(c) == 3 for c in box)
        ):
            raise SceneError(f"{where}: aabb: expected [[x0, y0, z0], [x1, y1, z1]], got {box!r}")
        corners = np.array(
            [[number(v, f"{where}: aabb[{i}][{j}]") for j, v in enumerate(c)] for i, c in enumerate(box)]
        )
        longest = max(float(np.max(np.abs(corners[1] - corners[0]))), 1e-6)
        scale = 1.0 / longest
        offset = 0.5 - 0.5 * (corners[0] + corners[1]) * scale
    return scale, offset


def aabb_scale_of(data: dict[str, Any], opts: SceneOptions, default: int, where: str) -> int:
    """The scene's ``aabb_scale``: ``opts.aabb_scale`` if set, else the file's, else ``default``.

    Raises:
        SceneError: ``"{where}: aabb_scale must be a power of two in 1..128, got ..."``.
    """
    if opts.aabb_scale is not None:
        return opts.aabb_scale
    if "aabb_scale" not in data:
        return default
    return check_aabb_scale(data["aabb_scale"], where=where)


def _shape_of(value: object) -> str:
    """``"3x4"`` for a rectangular list of lists, else a short description."""
    if not isinstance(value, list):
        return type(value).__name__
    lengths = [len(r) if isinstance(r, list) else None for r in value]
    if value and None not in lengths and len(set(lengths)) == 1:
        return f"{len(value)}x{lengths[0]}"
    return f"{len(value)} rows of lengths {lengths}"


def transform_matrix(value: object, where: str) -> np.ndarray:
    """A frame's ``transform_matrix`` as [4, 4] float64 with bottom row ``[0, 0, 0, 1]``.

    Only the first three rows enter the camera (as in instant-ngp). A bottom row of zeros (a 3×4
    pose padded by its writer) is replaced by ``[0, 0, 0, 1]`` with a warning: the first three rows
    define the pose exactly. Any other bottom row is refused.

    Raises:
        SceneError: not a 4×4 list of numbers, NaN/Infinity entries, a bottom row other than
            ``[0, 0, 0, 1]`` or zeros, or a 3×3 part that is not a rotation (a mirror included).
    """
    if not (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(row, list) and len(row) == 4 for row in value)
    ):
        raise SceneError(f"{where}: transform_matrix must be a 4x4 matrix, got {_shape_of(value)}")
    entries = [v for row in value for v in row]
    for v in entries:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SceneError(f"{where}: transform_matrix: expected numbers, got {v!r}")
    for v in entries:
        if isinstance(v, float) and not math.isfinite(v):
            raise SceneError(f"{where}: transform_matrix contains {v!r} (NaN/Infinity)")
    matrix = np.array([[number(v, f"{where}: transform_matrix") for v in row] for row in value])
    bottom = matrix[3]
    if np.all(bottom == 0.0):
        warnings.warn(
            f"{where}: transform_matrix bottom row is [0, 0, 0, 0]; read as [0, 0, 0, 1] "
            "(the first three rows define the pose)",
            stacklevel=2,
        )
    elif np.max(np.abs(bottom - (0.0, 0.0, 0.0, 1.0))) > 1e-6:
        raise SceneError(
            f"{where}: transform_matrix bottom row is {bottom.tolist()}, expected [0, 0, 0, 1] "
            "(a camera-to-world pose is rigid; a projective or scaled matrix is not a camera pose)"
        )
    matrix[3] = (0.0, 0.0, 0.0, 1.0)
    check_rotation(matrix[:3, :3], f"{where}: transform_matrix")
    return matrix


def resolve_image_path(base: Path, file_path: str, where: str) -> Path | None:
    """The image file a ``file_path`` names, or None if no such file exists.

    ``file_path`` is relative to ``base`` (a leading ``./`` and Windows ``\\`` separators are fine)
    or absolute. When it does not name an existing file, the extensions of
    :data:`IMAGE_EXTENSIONS` are appended in turn (instant-ngp ``resolve_path``).

    Raises:
        SceneError: the image is an EXR/HDR file (high dynamic range is not supported).
    """
    candidate = Path(file_path.replace("\\", "/"))
    path = candidate if candidate.is_absolute() else base / candidate
    found: Path | None = None
    try:
        if path.is_file():
            found = path
        else:
            for ext in IMAGE_EXTENSIONS + _UNSUPPORTED_EXTENSIONS:
                with_ext = path.with_name(path.name + ext)
                if with_ext.is_file():
                    found = with_ext
                    break
    except (OSError, ValueError) as exc:  # name too long, embedded NUL, ...
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SceneError(f"{where}: file_path {file_path!r} is not a usable path ({reason})") from None
    if found is not None and found.suffix in _UNSUPPORTED_EXTENSIONS:
        raise SceneError(f"{where}: {found}: EXR/HDR images are not supported (use PNG or JPEG)")
    return found.absolute() if found is not None else None


@dataclasses.dataclass(frozen=True)
class FrameEntry:
    """One validated entry of a ``frames`` list, before intrinsics are resolved.

    Attributes:
        name: ``file_path`` as written.
        where: ``"<json>: frames[i] ('<file_path>')"`` for error messages.
        image_path: the resolved image file, or None when it does not exist.
        c2w_nerf: [4, 4] float64 camera-to-world, OpenGL axes, NeRF world.
        camera: the frame's own camera keys (focal, lens), not merged with the root's.
        sharpness: the frame's ``sharpness``, or None.
    """

    name: str
    where: str
    image_path: Path | None
    c2w_nerf: np.ndarray
    camera: dict[str, Any]
    sharpness: float | None


def frame_entries(data: dict[str, Any], json_path: Path, camera_convention: str = "opengl") -> list[FrameEntry]:
    """Validate and resolve the ``frames`` list of a transforms JSON, in file order.

    ``camera_convention`` ``"opencv"`` reads ``transform_matrix`` with OpenCV camera axes and turns
    them into OpenGL ones (:func:`trainer.data.convention.opencv_to_opengl_c2w`). A ``sharpness``
    that is not a number (``"n/a"``) is ignored with one warning: no feature depends on it.

    Raises:
        SceneError: a bad root camera key (message names the file and key); ``frames`` missing,
            not a list or empty; a frame without a string ``file_path``; a bad
            ``transform_matrix``, ``sharpness`` or camera key (message names the frame).
    """
    if "frames" not in data:
        raise SceneError(f"{json_path}: frames: key missing")
    frames = data["frames"]
    if not isinstance(frames, list):
        raise SceneError(f"{json_path}: frames: expected a list, got {type(frames).__name__}")
    if not frames:
        raise SceneError(f"{json_path}: frames: the list is empty")
    check_camera_keys(data, str(json_path))
    base = json_path.parent
    entries = []
    bad_sharpness: list[str] = []
    for i, frame in enumerate(frames):
        if not isinstance(frame, dict):
            raise SceneError(f"{json_path}: frames[{i}]: expected an object, got {type(frame).__name__}")
        file_path = frame.get("file_path")
        if not isinstance(file_path, str) or not file_path:
            raise SceneError(
                f"{json_path}: frames[{i}].file_path: expected a non-empty string, got {file_path!r}"
            )
        where = f"{json_path}: frames[{i}] ('{file_path}')"
        if "transform_matrix" not in frame:
            raise SceneError(f"{where}: transform_matrix: key missing")
        c2w = transform_matrix(frame["transform_matrix"], where)
        if camera_convention == "opencv":
            c2w = opencv_to_opengl_c2w(c2w)
        sharpness = _sharpness(frame, file_path, bad_sharpness)
        camera = {
            k: frame[k]
            for k in _FOCAL_KEYS + _LENS_KEYS + _UNSUPPORTED_LENS_KEYS + ("is_fisheye",)
            if k in frame
        }
        check_camera_keys(camera, where)
        entries.append(
            FrameEntry(
                name=file_path,
                where=where,
                image_path=resolve_image_path(base, file_path, where),
                c2w_nerf=c2w,
                camera=camera,
                sharpness=sharpness,
            )
        )
    if bad_sharpness:
        warnings.warn(
            f"{json_path}: sharpness is not a number in {len(bad_sharpness)} frame(s) "
            f"({', '.join(bad_sharpness[:3])}{', ...' if len(bad_sharpness) > 3 else ''}); ignored "
            "(no feature uses it)",
            stacklevel=2,
        )
    return entries


def _sharpness(frame: dict[str, Any], file_path: str, bad: list[str]) -> float | None:
    """A frame's ``sharpness`` as a float, or None (absent, or not a finite number: then
    ``"file_path: value"`` is appended to ``bad``)."""
    if "sharpness" not in frame:
        return None
    value = frame["sharpness"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        bad.append(f"{file_path}: {value!r}")
        return None
    return float(value)


def check_camera_keys(camera: dict[str, Any], where: str) -> None:
    """Validate the camera keys present in ``camera`` (a JSON root or one frame).

    Raises:
        SceneError: ``"{where}: <key>: expected ..."`` for the first bad value.
    """
    for axis, resolution_key in (("x", "w"), ("y", "h")):
        if f"fl_{axis}" in camera:
            number(camera[f"fl_{axis}"], f"{where}: fl_{axis}", positive=True)
        if f"{axis}_fov" in camera:
            _focal_from_angle(camera[f"{axis}_fov"], 1, f"{where}: {axis}_fov", degrees=True)
        if f"camera_angle_{axis}" in camera:
            _focal_from_angle(
                camera[f"camera_angle_{axis}"], 1, f"{where}: camera_angle_{axis}", degrees=False
            )
        if resolution_key in camera:
            pixel_count(camera[resolution_key], f"{where}: {resolution_key}")
    for key in ("cx", "cy", "k1", "k2", "k3", "k4", "p1", "p2"):
        if key in camera:
            number(camera[key], f"{where}: {key}")


def _focal_from_angle(angle: object, resolution: int, where: str, *, degrees: bool) -> float:
    value = number(angle, where, positive=True)
    radians = math.radians(value) if degrees else value
    if radians >= math.pi:
        raise SceneError(f"{where}: field of view must be below 180 degrees, got {value!r}")
    return 0.5 * resolution / math.tan(0.5 * radians)


def frame_intrinsics(
    root: dict[str, Any], entry: FrameEntry, image_wh: tuple[int, int]
) -> tuple[Intrinsics, bool]:
    """Full-resolution intrinsics of one frame, fitted to its image file.

    Args:
        root: the JSON's top-level object (root camera keys).
        entry: the frame (its ``camera`` keys override the root's, see the module docstring).
        image_wh: ``(width, height)`` of the image file in pixels (EXIF orientation applied).

    Returns:
        ``(intrinsics, resized)``: intrinsics for the image file's size; ``resized`` is True when
        the JSON's ``w``/``h`` differ from the file and the calibration was scaled to it
        (:func:`trainer.data.convention.fit_intrinsics_to_image`).

    Raises:
        SceneError: no focal length, an unsupported lens model, a bad value, or a file whose aspect
            ratio disagrees with ``w``/``h``; the message names the frame and the key.
    """
    where = entry.where
    lens = {k: root[k] for k in _LENS_KEYS + _UNSUPPORTED_LENS_KEYS + ("is_fisheye",) if k in root}
    lens.update({k: v for k, v in entry.camera.items() if k not in _FOCAL_KEYS})
    has_frame_focal = any(k in entry.camera for k in _FOCAL_KEYS)
    focal_source = entry.camera if has_frame_focal else root

    if lens.get("is_fisheye", False) is True:
        raise SceneError(f"{where}: is_fisheye: fisheye lenses are not supported")
    for key in _UNSUPPORTED_LENS_KEYS:
        if key in lens:
            raise SceneError(
                f"{where}: {key}: this lens model is not supported (pinhole + OpenCV distortion only)"
            )

    file_w, file_h = image_wh
    width = pixel_count(lens["w"], f"{where}: w") if "w" in lens else file_w
    height = pixel_count(lens["h"], f"{where}: h") if "h" in lens else file_h

    def axis_focal(axis: str, resolution: int) -> float | None:
        if f"{axis}_fov" in focal_source:
            return _focal_from_angle(
                focal_source[f"{axis}_fov"], resolution, f"{where}: {axis}_fov", degrees=True
            )
        if f"fl_{axis}" in focal_source:
            return number(focal_source[f"fl_{axis}"], f"{where}: fl_{axis}", positive=True)
        if f"camera_angle_{axis}" in focal_source:
            return _focal_from_angle(
                focal_source[f"camera_angle_{axis}"],
                resolution,
                f"{where}: camera_angle_{axis}",
                degrees=False,
            )
        return None

    fx = axis_focal("x", width)
    fy = axis_focal("y", height)
    if fx is None and fy is None:
        raise SceneError(f"{where}: no focal length (give fl_x/fl_y or camera_angle_x/camera_angle_y)")
    fx = fx if fx is not None else fy
    fy = fy if fy is not None else fx
    assert fx is not None and fy is not None

    def lens_value(key: str, default: float) -> float:
        return number(lens[key], f"{where}: {key}") if key in lens else default

    calibrated = Intrinsics(
        width=width,
        height=height,
        fx=fx,
        fy=fy,
        cx=lens_value("cx", 0.5 * width),
        cy=lens_value("cy", 0.5 * height),
        k1=lens_value("k1", 0.0),
        k2=lens_value("k2", 0.0),
        p1=lens_value("p1", 0.0),
        p2=lens_value("p2", 0.0),
        k3=lens_value("k3", 0.0),
        k4=lens_value("k4", 0.0),
    )
    orientation = exif_orientation(entry.image_path) if entry.image_path is not None else 1
    fitted = fit_intrinsics_to_image(calibrated, file_w, file_h, where, orientation)
    return fitted, fitted is not calibrated


def build_frames(
    root: dict[str, Any],
    entries: list[FrameEntry],
    opts: SceneOptions,
    scale: float,
    offset: np.ndarray,
) -> tuple[list[Frame], int]:
    """Turn entries whose image exists into :class:`Frame` s (unit-cube c2w, decoded intrinsics).

    Returns:
        ``(frames, n_resized)`` where ``n_resized`` counts images whose size differs from the
        JSON's ``w``/``h`` (their intrinsics were scaled).

    Raises:
        SceneError: from :func:`frame_intrinsics` or an unreadable image header.
    """
    frames = []
    n_resized = 0
    try:
        c2w_cube = nerf_to_unit_cube(np.stack([e.c2w_nerf for e in entries]), scale, offset) if entries else []
    except SceneError as exc:
        raise SceneError(f"{entries[0].where.split(':')[0]}: {exc}") from None
    for entry, c2w in zip(entries, c2w_cube):
        assert entry.image_path is not None
        full, resized = frame_intrinsics(root, entry, image_size(entry.image_path))
        n_resized += resized
        frames.append(
            Frame(
                name=entry.name,
                image_path=entry.image_path,
                c2w=c2w,
                intrinsics=decoded_intrinsics(full, opts.fixed_downscale, entry.where),
                sharpness=entry.sharpness,
            )
        )
    return frames, n_resized


def missing_images_error(json_path: Path, missing: list[FrameEntry]) -> SceneError:
    """One error listing every frame whose image file does not exist."""
    listed = ", ".join(e.name for e in missing)
    return SceneError(
        f"{json_path}: {len(missing)} image file(s) not found (relative to {json_path.parent}): {listed}"
    )


SKIPPED_NAMES_SHOWN = 3
"""How many of the skipped frames' file names the warning lists before ``and N more``."""


def skipped_frames_warning(json_path: Path, names: list[str]) -> str:
    """The warning about frames skipped for their missing image files ``names`` (non-empty):
    the first :data:`SKIPPED_NAMES_SHOWN` names, then ``and N more``, broken into lines under 80
    columns (:func:`~trainer.contract.runstatus.fitted_warning`)."""
    shown = ", ".join(names[:SKIPPED_NAMES_SHOWN])
    more = len(names) - SKIPPED_NAMES_SHOWN
    listed_names = shown + (f" and {more} more" if more > 0 else "")
    return fitted_warning(f"{json_path}: skipping {counted(len(names), 'frame')} whose image file is missing: "
                          f"{listed_names}")


def transforms_path(path: Path) -> Path:
    """The ``transforms.json`` that ``path`` (the file or its folder) names.

    Raises:
        SceneError: when the folder holds no ``transforms.json``.
    """
    if path.is_dir():
        candidate = path / "transforms.json"
        if not candidate.is_file():
            raise SceneError(f"{path}: no transforms.json in this folder")
        return candidate
    return path


def load(path: Path, opts: SceneOptions) -> Scene:
    """Load an instant-ngp scene.

    Args:
        path: ``transforms.json`` or the folder holding it.
        opts: loader options; ``holdout_every`` splits the frames (in natural order of the kept
            frames) into ``train``/``test``, ``aabb_scale`` overrides the file's.

    Returns:
        Scene with ``format="instant-ngp"``, splits ``train`` and ``test``, the file's
        ``aabb_scale`` (default 1), skipped frames recorded in ``Scene.skipped``.

    Raises:
        SceneError: any problem with the file, naming the file, frame and key (see the module
            docstring for the format).
    """
    json_path = transforms_path(Path(path))
    data = read_json(json_path)
    aabb_scale = aabb_scale_of(data, opts, default=1, where=str(json_path))
    scale, offset = world_transform(data, str(json_path))
    entries = sorted(frame_entries(data, json_path, opts.camera_convention), key=lambda e: natural_sort_key(e.name))
    notes = warn_about_layout(np.stack([e.c2w_nerf for e in entries]), str(json_path), opts.camera_convention)

    missing = [e for e in entries if e.image_path is None]
    skipped: list[SkippedFrame] = []
    if missing:
        if entries[0].sharpness is None:
            raise missing_images_error(json_path, missing)
        base = json_path.parent
        skipped = [SkippedFrame(e.name, f"image file not found: {base / e.name}") for e in missing]
        warnings.warn(skipped_frames_warning(json_path, [e.name for e in missing]), SkippedFramesWarning, stacklevel=2)
        entries = [e for e in entries if e.image_path is not None]
        if not entries:
            raise SceneError(f"{json_path}: none of the {len(missing)} frames has an image file")

    frames, n_resized = build_frames(data, entries, opts, scale, offset)
    if n_resized:
        notes.append(
            f"instant-ngp: {n_resized} image(s) differ in size from the w/h in {json_path.name}; "
            "their intrinsics were scaled to the image files"
        )
    if "sharpness_discard_threshold" in data:
        notes.append("instant-ngp: sharpness_discard_threshold is ignored (all frames with images are used)")
    return Scene(
        format="instant-ngp",
        root=json_path,
        splits=holdout_splits(frames, opts.holdout_every),
        aabb_scale=aabb_scale,
        box_source="override" if opts.aabb_scale is not None else "file",
        white_background=False,
        notes=notes,
        skipped=skipped,
        downscale=opts.fixed_downscale,
        world_scale=float(scale),
        world_offset=tuple(float(v) for v in offset),
        held_out_every=opts.holdout_every,
    )
