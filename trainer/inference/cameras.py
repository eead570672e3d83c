"""Cameras to render: a split of the scene, an orbit around it, or a camera-path file.

All cameras are :class:`~trainer.data.scene.Frame` s in the trainer's convention (unit-cube world,
OpenGL camera axes: x right, y up, looking down −z), so :func:`trainer.data.rays.camera_rays_for_image`
turns them into rays.

Camera-path files (``--cameras PATH.json``):

* instant-ngp's (the GUI's camera-path editor, ``base_cam.json``): ``{"path": [keyframe, ...],
  "time": t}``, each keyframe ``{"R": [x, y, z, w] unit quaternion, "T": [x, y, z], "fov": degrees
  (vertical), "scale", "slice", "aperture_size" (or "dof")}``. ``R``/``T`` are the camera-to-world
  rotation and position in instant-ngp's own world, which is the trainer's unit cube; its camera
  axes are x right, y down, z forward, so the y and z columns are negated here. ``scale`` (the
  orbit distance of the GUI), ``slice`` and ``aperture_size`` do not change a pinhole render and
  are checked but not used. Source of the layout: instant-ngp ``src/camera_path.cu``
  (``from_json``/``to_json``).
* nerfstudio's (``ns-render camera-path``): ``{"camera_path": [{"camera_to_world": 16 numbers,
  row-major 4×4, OpenGL axes, "fov": vertical degrees, "aspect"}, ...], "render_width",
  "render_height", "fps", "seconds"}``; the poses are taken in the scene's source world (the frame
  of ``transforms.json``, or COLMAP's) and mapped into the unit cube like the training cameras.

Keyframes are spread evenly over the path's time [0, 1]; a frame at time u takes the rotation by
quaternion slerp between its two keyframes (``scipy.spatial.transform.Slerp``) and the position
and field of view by shape-preserving cubic interpolation (``scipy.interpolate.PchipInterpolator``:
through every keyframe, no overshoot between them). Unlike instant-ngp's B-spline the path passes
through its keyframes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.convention import centre_of_attention
from trainer.data.scene import Frame, Intrinsics, Scene
from trainer.contract.errors import ConfigError, SceneError
from trainer.inference.worldframe import cube_c2w_to_world, world_c2w_to_cube

__all__ = [
    "CameraPath",
    "FULL_ORBIT_MIN_ARC_DEG",
    "MIN_ARC_DEG",
    "Orbit",
    "captured_arc",
    "nerfstudio_camera_path",
    "orbit_cameras",
    "pinhole_intrinsics",
    "path_cameras",
    "read_camera_path",
    "resize_cameras",
    "scene_orbit",
    "split_cameras",
]

DEFAULT_PATH_FPS = 30.0  # frames per second of a written camera path of several keyframes
QUATERNION_NORM_TOLERANCE = 1e-3  # |‖q‖ − 1| above this is refused (writers store ~1e-7)


def split_cameras(scene: Scene, split: str) -> list[Frame]:
    """The frames of ``split`` (``train``/``val``/``test``).

    Raises:
        ConfigError: the scene has no frames in that split (names ``--cameras`` and the splits).
    """
    frames = scene.frames(split)
    if not frames:
        raise ConfigError(f"--cameras {split}: the scene {scene.root} has no {split} frames (splits: {scene.split_counts})")
    return list(frames)


def resize_cameras(frames: list[Frame], width: int | None = None, height: int | None = None,
                   downscale: int | None = None) -> list[Frame]:
    """The same cameras with images of ``width`` × ``height`` pixels (one given: the other keeps
    the aspect ratio; none: the cameras' own size), then shrunk by ``downscale`` (``--width 1920
    --height 1080 --downscale 8``: 240 × 135); focal lengths and principal point scale along.
    Nothing given: unchanged."""
    out = []
    for frame in frames:
        k = frame.intrinsics
        w, h = k.width, k.height
        if width and height:
            w, h = width, height
        elif width:
            w, h = width, max(1, round(k.height * width / k.width))
        elif height:
            w, h = max(1, round(k.width * height / k.height)), height
        if downscale:
            w, h = max(1, round(w / downscale)), max(1, round(h / downscale))
        sx, sy = w / k.width, h / k.height
        scaled = dataclasses.replace(k, width=w, height=h, fx=k.fx * sx, fy=k.fy * sy, cx=k.cx * sx, cy=k.cy * sy)
        out.append(dataclasses.replace(frame, intrinsics=scaled))
    return out


def pinhole_intrinsics(width: int, height: int, fov_y_deg: float) -> Intrinsics:
    """A distortion-free camera of ``width`` × ``height`` pixels, square pixels, centred principal
    point, vertical field of view ``fov_y_deg`` degrees."""
    fy = 0.5 * height / math.tan(math.radians(fov_y_deg) / 2.0)
    return Intrinsics(width=width, height=height, fx=fy, fy=fy, cx=width / 2.0, cy=height / 2.0)


def _look_at(position: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[4, 4] camera-to-world (OpenGL axes) at ``position`` looking at ``target``."""
    back = position - target
    back = back / np.linalg.norm(back)
    right = np.cross(up, back)
    if np.linalg.norm(right) < 1e-9:  # looking straight along up: any horizontal right axis
        right = np.cross(np.array([1.0, 0.0, 0.0]) if abs(back[0]) < 0.9 else np.array([0.0, 1.0, 0.0]), back)
    right = right / np.linalg.norm(right)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, np.cross(back, right), back, position
    return c2w


FULL_ORBIT_MIN_ARC_DEG = 270.0
"""Training cameras spread over at least this much azimuth around the orbit's up axis get a full
circle; fewer (a capture of one side, a forward-facing one) get their own arc, swept once."""
MIN_ARC_DEG = 20.0  # the narrowest arc an orbit sweeps (cameras at nearly one azimuth: around their mean)
OVERHEAD_DEG = 10.0  # cameras this close to straight above or below the centre do not count in its arc


@dataclasses.dataclass(frozen=True)
class Orbit:
    """Cameras on a circle or an arc of it: ``centre`` [3] and ``up`` [3] (unit) in the unit cube,
    ``radius`` and ``elevation_deg`` (above the plane through the centre normal to ``up``),
    ``start`` [3] unit horizontal direction of the first camera, ``arc_deg`` the azimuth swept
    from ``start`` (counter-clockwise about ``up``): 360 a full circle, less an arc from end to
    end."""

    centre: np.ndarray
    up: np.ndarray
    radius: float
    elevation_deg: float
    start: np.ndarray
    arc_deg: float = 360.0

    @property
    def full_circle(self) -> bool:
        return self.arc_deg >= 360.0

    @property
    def description(self) -> str:
        """``a full circle`` or ``a 92° arc`` (whole degrees)."""
        return "a full circle" if self.full_circle else f"a {self.arc_deg:.0f}° arc"


def captured_arc(azimuths: np.ndarray) -> tuple[float, float]:
    """``(first, span)`` in radians: the smallest arc holding every azimuth of ``azimuths`` [n]
    (radians, any range), from ``first`` counter-clockwise over ``span`` (the circle less its
    largest gap between neighbouring azimuths)."""
    ordered = np.sort(np.mod(azimuths, 2.0 * math.pi))
    gaps = np.diff(np.concatenate([ordered, ordered[:1] + 2.0 * math.pi]))
    widest = int(np.argmax(gaps))
    first = float(ordered[(widest + 1) % len(ordered)])
    return first, float(2.0 * math.pi - gaps[widest])


def scene_orbit(scene: Scene, radius: float | None = None, elevation_deg: float | None = None,
                arc_deg: float | None = None) -> Orbit:
    """The orbit around the training cameras' centre of attention
    (:func:`trainer.data.convention.centre_of_attention`): up = their mean up vector, radius and
    elevation their means unless given (radius in unit-cube units); a full circle from the first
    training camera when the cameras spread over :data:`FULL_ORBIT_MIN_ARC_DEG` of azimuth or more,
    else the arc they span (at least :data:`MIN_ARC_DEG`, about its middle). ``arc_deg`` (in
    (0, 360]) sets the azimuth instead: a full circle from the first camera (views all round) or
    from the middle of the cameras' arc, an arc about either. Cameras within :data:`OVERHEAD_DEG`
    of straight above or below the centre have no azimuth to speak of and are left out of the arc."""
    c2w = np.stack([f.c2w for f in scene.frames("train")])
    centre = centre_of_attention(c2w)
    up = c2w[:, :3, 1].sum(axis=0)
    up = up / np.linalg.norm(up) if np.linalg.norm(up) > 1e-9 else np.array([0.0, 1.0, 0.0])
    offsets = c2w[:, :3, 3] - centre
    distances = np.linalg.norm(offsets, axis=1)
    heights = offsets @ up
    if elevation_deg is None:
        elevation_deg = float(np.degrees(np.mean(np.arcsin(np.clip(heights / np.maximum(distances, 1e-12), -1, 1)))))
    horizontal = offsets[0] - heights[0] * up
    if np.linalg.norm(horizontal) < 1e-9:
        horizontal = np.cross(up, [1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.cross(up, [0.0, 1.0, 0.0])
    e0 = horizontal / np.linalg.norm(horizontal)
    e1 = np.cross(up, e0)
    flat = offsets - heights[:, None] * up
    # a camera within OVERHEAD_DEG of straight above or below the centre has no azimuth to speak of
    sideways = np.linalg.norm(flat, axis=1) > math.sin(math.radians(OVERHEAD_DEG)) * np.maximum(distances, 1e-12)
    if sideways.any():
        first, span = captured_arc(np.arctan2(flat[sideways] @ e1, flat[sideways] @ e0))
    else:
        first, span = 0.0, 2.0 * math.pi
    surround = math.degrees(span) >= FULL_ORBIT_MIN_ARC_DEG
    middle = 0.0 if surround else first + span / 2.0  # the first training camera's direction, or the arc's middle
    if arc_deg is None:
        arc = 360.0 if surround else max(math.degrees(span), MIN_ARC_DEG)
    else:
        arc = min(float(arc_deg), 360.0)
    start_angle = middle if arc >= 360.0 else middle - math.radians(arc) / 2.0
    start = math.cos(start_angle) * e0 + math.sin(start_angle) * e1
    return Orbit(centre=centre, up=up, radius=float(np.mean(distances)) if radius is None else float(radius),
                 elevation_deg=float(elevation_deg), start=start / np.linalg.norm(start), arc_deg=arc)


def orbit_cameras(orbit: Orbit, n_frames: int, intrinsics: Intrinsics) -> list[Frame]:
    """``n_frames`` cameras on ``orbit``, each looking at the centre: on a full circle evenly
    spaced in azimuth (the last one short of the first, so a looped video does not repeat a
    frame); on an arc evenly from ``start`` to its far end, both ends included (one frame: the
    arc's middle), every frame a view of its own."""
    side = np.cross(orbit.up, orbit.start)
    elevation = math.radians(orbit.elevation_deg)
    frames = []
    for i in range(n_frames):
        if orbit.full_circle:
            azimuth = 2.0 * math.pi * i / n_frames
        else:
            azimuth = math.radians(orbit.arc_deg) * (i / (n_frames - 1) if n_frames > 1 else 0.5)
        direction = math.cos(elevation) * (math.cos(azimuth) * orbit.start + math.sin(azimuth) * side) \
            + math.sin(elevation) * orbit.up
        c2w = _look_at(orbit.centre + orbit.radius * direction, orbit.centre, orbit.up)
        frames.append(Frame(name=f"orbit_{i:05d}", image_path=Path(""), c2w=c2w, intrinsics=intrinsics))
    return frames


@dataclasses.dataclass
class CameraPath:
    """Keyframes of a camera path, in the unit cube.

    Attributes:
        rotations: [K, 4] float64 unit quaternions (x, y, z, w) of the camera-to-world rotation,
            OpenGL camera axes.
        positions: [K, 3] float64 camera centres.
        fov_y_deg: [K] float64 vertical field of view.
        width, height: image size the file asks for, or None.
        fps, seconds: timing the file asks for, or None.
    """

    rotations: np.ndarray
    positions: np.ndarray
    fov_y_deg: np.ndarray
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    seconds: float | None = None

    @property
    def n_keyframes(self) -> int:
        return int(self.positions.shape[0])

    @property
    def key_times(self) -> np.ndarray:
        """[K] times of the keyframes, evenly spread over [0, 1]."""
        k = self.n_keyframes
        return np.linspace(0.0, 1.0, k) if k > 1 else np.zeros(1)

    def poses_at(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Interpolated ``(c2w [n, 4, 4], fov_y_deg [n])`` at ``times`` [n] in [0, 1] (module
        docstring: slerp for rotations, PCHIP for positions and field of view)."""
        from scipy.interpolate import PchipInterpolator
        from scipy.spatial.transform import Rotation, Slerp

        times = np.clip(np.asarray(times, dtype=np.float64).reshape(-1), 0.0, 1.0)
        n = times.shape[0]
        if self.n_keyframes == 1:
            rot = np.repeat(Rotation.from_quat(self.rotations).as_matrix(), n, axis=0)
            pos = np.repeat(self.positions, n, axis=0)
            fov = np.repeat(self.fov_y_deg, n)
        else:
            rot = Slerp(self.key_times, Rotation.from_quat(self.rotations))(times).as_matrix()
            pos = PchipInterpolator(self.key_times, self.positions, axis=0)(times)
            fov = PchipInterpolator(self.key_times, self.fov_y_deg)(times)
        c2w = np.zeros((n, 4, 4))
        c2w[:, :3, :3], c2w[:, :3, 3], c2w[:, 3, 3] = rot, pos, 1.0
        return c2w, fov


def path_cameras(path: CameraPath, n_frames: int, width: int, height: int) -> list[Frame]:
    """``n_frames`` cameras along ``path`` (the first and last on its end keyframes)."""
    times = np.linspace(0.0, 1.0, n_frames) if n_frames > 1 else np.zeros(1)
    c2w, fov = path.poses_at(times)
    return [Frame(name=f"path_{i:05d}", image_path=Path(""), c2w=c2w[i], intrinsics=pinhole_intrinsics(width, height, float(fov[i])))
            for i in range(n_frames)]


# ---------------------------------------------------------------------------- camera-path files


def _numbers(value: Any, count: int, where: str) -> np.ndarray:
    """``value`` as ``count`` finite floats, or SceneError naming ``where``."""
    ok = isinstance(value, list) and len(value) == count and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok:
        raise SceneError(f"{where}: expected a list of {count} numbers, got {_short(value)}")
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise SceneError(f"{where}: NaN or infinite value in {value}")
    return arr


def _number(entry: dict, key: str, where: str, minimum: float | None = None, maximum: float | None = None) -> float:
    if key not in entry:
        raise SceneError(f"{where}: missing key '{key}'")
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SceneError(f"{where}.{key}: expected a finite number, got {_short(value)}")
    if (minimum is not None and value <= minimum) or (maximum is not None and value >= maximum):
        raise SceneError(f"{where}.{key}: {value} is outside ({minimum}, {maximum})")
    return float(value)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _keyframe_list(data: dict, key: str, path: Path) -> list:
    frames = data.get(key)
    if not isinstance(frames, list):
        raise SceneError(f"{path}: '{key}' must be a list of keyframes, got {_short(frames)}")
    if not frames:
        raise SceneError(f"{path}: '{key}' holds zero keyframes; a camera path needs at least one")
    for i, entry in enumerate(frames):
        if not isinstance(entry, dict):
            raise SceneError(f"{path}: {key}[{i}]: expected an object, got {_short(entry)}")
    return frames


def _read_ngp_path(data: dict, path: Path) -> CameraPath:
    from scipy.spatial.transform import Rotation

    keyframes = _keyframe_list(data, "path", path)
    rotations, positions, fovs = [], [], []
    for i, entry in enumerate(keyframes):
        where = f"{path}: path[{i}]"
        for key in ("R", "T", "fov"):
            if key not in entry:
                raise SceneError(f"{where}: missing key '{key}'")
        quat = _numbers(entry["R"], 4, f"{where}.R")
        norm = float(np.linalg.norm(quat))
        if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
            raise SceneError(f"{where}.R: not a unit quaternion (norm {norm:.6g}); instant-ngp writes unit quaternions")
        positions.append(_numbers(entry["T"], 3, f"{where}.T"))
        fovs.append(_number(entry, "fov", where, 0.0, 180.0))
        for key in ("scale", "slice", "aperture_size", "dof"):
            if key in entry:
                _number(entry, key, where)
        ngp = Rotation.from_quat(quat / norm).as_matrix()  # columns: camera right, down, forward
        rotations.append(Rotation.from_matrix(ngp * np.array([1.0, -1.0, -1.0])).as_quat())
    return CameraPath(np.asarray(rotations), np.asarray(positions), np.asarray(fovs))


def _read_nerfstudio_path(data: dict, path: Path, scene: Scene) -> CameraPath:
    from scipy.spatial.transform import Rotation

    keyframes = _keyframe_list(data, "camera_path", path)
    c2w, fovs = [], []
    for i, entry in enumerate(keyframes):
        where = f"{path}: camera_path[{i}]"
        if "camera_to_world" not in entry:
            raise SceneError(f"{where}: missing key 'camera_to_world'")
        matrix = _numbers(entry["camera_to_world"], 16, f"{where}.camera_to_world").reshape(4, 4)
        rotation = matrix[:3, :3]
        if np.abs(rotation.T @ rotation - np.eye(3)).max() > 1e-3 or np.linalg.det(rotation) < 0:
            raise SceneError(f"{where}.camera_to_world: its 3x3 part is not a rotation")
        c2w.append(matrix)
        fovs.append(_number(entry, "fov", where, 0.0, 180.0))
    cube = world_c2w_to_cube(np.stack(c2w), scene)
    sizes = {}
    for key in ("render_width", "render_height"):
        if key in data:
            sizes[key] = int(_number(data, key, str(path), 0.0))
    timing = {key: _number(data, key, str(path), 0.0) for key in ("fps", "seconds") if key in data}
    return CameraPath(Rotation.from_matrix(cube[:, :3, :3]).as_quat(), cube[:, :3, 3], np.asarray(fovs),
                      width=sizes.get("render_width"), height=sizes.get("render_height"),
                      fps=timing.get("fps"), seconds=timing.get("seconds"))


def nerfstudio_camera_path(frames: list[Frame], scene: Scene, fps: float | None = None) -> dict[str, Any]:
    """A nerfstudio ``camera_path.json`` object of ``frames`` as keyframes, in the capture's world
    (what :func:`read_camera_path` reads back): ``camera_to_world`` (16 numbers, row-major,
    OpenGL camera axes), ``fov`` (vertical, degrees) and ``aspect`` per keyframe; ``render_width``
    and ``render_height`` of the first frame; ``fps`` (default 1 for one keyframe, else 30) and
    ``seconds`` giving one frame per keyframe.

    Raises:
        ValueError: no frames.
    """
    if not frames:
        raise ValueError("nerfstudio_camera_path: no frames")
    world = cube_c2w_to_world(np.stack([np.asarray(f.c2w, dtype=np.float64) for f in frames]), scene)
    fps = fps or (1.0 if len(frames) == 1 else DEFAULT_PATH_FPS)
    keyframes = [{"camera_to_world": [float(v) for v in c2w.reshape(-1)],
                  "fov": math.degrees(2.0 * math.atan(0.5 * f.intrinsics.height / f.intrinsics.fy)),
                  "aspect": f.intrinsics.width / f.intrinsics.height} for f, c2w in zip(frames, world)]
    first = frames[0].intrinsics
    return {"camera_path": keyframes, "render_width": first.width, "render_height": first.height,
            "fps": fps, "seconds": len(frames) / fps}


def read_camera_path(path: Path, scene: Scene) -> CameraPath:
    """Read an instant-ngp or nerfstudio camera-path file (module docstring).

    Raises:
        SceneError: one line naming the file, the keyframe and the key: unreadable JSON, neither
            layout, zero keyframes, a missing key, NaN, a non-unit quaternion, a field of view
            outside (0, 180) degrees.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SceneError(f"{path}: camera-path file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SceneError(f"{path}: not a readable JSON camera path ({exc})") from None
    if isinstance(data, dict) and "path" in data:
        return _read_ngp_path(data, path)
    if isinstance(data, dict) and "camera_path" in data:
        return _read_nerfstudio_path(data, path, scene)
    raise SceneError(f"{path}: neither an instant-ngp camera path (key 'path') nor a nerfstudio one (key 'camera_path')")
