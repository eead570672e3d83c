"""The built-in analytic demo scene: a small NeRF-synthetic (Blender) scene rendered exactly.

``ngptune train`` / ``sweep`` use it when no scene is given, and tests use it because its ground
truth is known at any camera (:func:`render_demo_view`).

The scene, in the source ("NeRF") world of the JSON files — z up, like NeRF-synthetic — holds three
textured primitives, all within radius 1.3 of the origin (instant-ngp maps the NeRF world into the
unit cube with scale 0.33 and offset 0.5, so everything lands inside it):

* a checkered sphere at the origin (radius 0.55; 12 × 6 checks in longitude × latitude),
* a box rotated 30° about z, one colour per face (centre (0.72, 0.05, −0.3), half size 0.28),
* a capped cylinder along z with coloured rings (centre (−0.68, 0.42, −0.2), radius 0.25,
  half height 0.5), its caps in a third colour.

Shading is Lambertian from a fixed directional light plus ambient, without shadows or
inter-reflection. Each pixel averages a 2 × 2 grid of rays (supersampling), so alpha at silhouettes
is fractional (0, ¼, ½, ¾ or 1) and the straight colour is the mean over the rays that hit.
Composited as ``rgb · alpha + bg · (1 − alpha)`` a pixel therefore equals the supersampled render
against any background ``bg``.

A time parameter ``time`` (in time steps, default 0) moves the scene: the box orbits the z axis
and turns with it by :data:`BOX_TURN_RAD_PER_STEP` per step, the cylinder bobs along z
(amplitude :data:`CYLINDER_BOB`, angular rate :data:`CYLINDER_BOB_RAD_PER_STEP`); the sphere
stays. :func:`write_demo_sequence` writes time steps ``0..N-1`` as ``0000/``, ``0001/``, …, one
scene each (the same cameras), a moving sequence on which each step is close to the one before.

Cameras look at the origin from radius 4: train views on a Fibonacci spiral over the upper
hemisphere (its azimuth turned by the seed), val and test views on rings at 30° and 20° elevation.
``camera_angle_x`` is NeRF-synthetic's (0.6911 rad), principal point at the image centre.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from trainer.contract.errors import ConfigError, SceneError

__all__ = [
    "CAMERA_ANGLE_X",
    "CAMERA_RADIUS",
    "DEMO_SCENE_VERSION",
    "BOX_TURN_RAD_PER_STEP",
    "CYLINDER_BOB",
    "CYLINDER_BOB_RAD_PER_STEP",
    "demo_scene_path",
    "look_at_origin",
    "render_demo_view",
    "surface_distance",
    "write_demo_scene",
    "write_demo_sequence",
]

#: Bump when anything that changes the written files changes; cached copies then become stale.
DEMO_SCENE_VERSION = 1

#: Horizontal field of view in radians, NeRF-synthetic's value.
CAMERA_ANGLE_X = 0.6911112070083618

#: Distance of every camera from the origin, NeRF world units.
CAMERA_RADIUS = 4.0

_MAX_RESOLUTION = 128
_MIN_RESOLUTION = 8
_SUPERSAMPLING = 2  # rays per pixel along each image axis

# Fixed lighting: unit direction towards the light, ambient share of the albedo.
_LIGHT_DIR = np.array([0.45, -0.35, 0.82]) / np.linalg.norm([0.45, -0.35, 0.82])
_AMBIENT = 0.3

# Sphere (checkered).
_SPHERE_CENTRE = np.array([0.0, 0.0, 0.0])
_SPHERE_RADIUS = 0.55
_SPHERE_CHECKS = (12, 6)  # along longitude, along latitude
_SPHERE_COLOURS = np.array([[0.92, 0.90, 0.85], [0.80, 0.15, 0.12]])

# Box (rotated about z, one colour per face: -x, +x, -y, +y, -z, +z in its own frame).
_BOX_CENTRE = np.array([0.72, 0.05, -0.3])
_BOX_HALF_SIZE = np.array([0.28, 0.28, 0.28])
_BOX_YAW_RAD = math.radians(30.0)
_BOX_FACE_COLOURS = np.array(
    [
        [0.15, 0.35, 0.85],
        [0.95, 0.75, 0.10],
        [0.20, 0.70, 0.30],
        [0.85, 0.30, 0.70],
        [0.40, 0.40, 0.40],
        [0.10, 0.75, 0.80],
    ]
)

# Cylinder (axis along z; rings on the side, caps in a third colour).
_CYLINDER_CENTRE = np.array([-0.68, 0.42, -0.2])
_CYLINDER_RADIUS = 0.25
_CYLINDER_HALF_HEIGHT = 0.5
_CYLINDER_RINGS = 6
_CYLINDER_COLOURS = np.array([[0.95, 0.55, 0.10], [0.25, 0.20, 0.55]])
_CYLINDER_CAP_COLOUR = np.array([0.90, 0.90, 0.30])

# Motion per time step (see the module docstring).
BOX_TURN_RAD_PER_STEP = math.radians(8.0)
CYLINDER_BOB = 0.2
CYLINDER_BOB_RAD_PER_STEP = 0.5

_T_EPS = 1e-9  # hits closer than this along the ray are ignored


def _rotation_z(angle_rad: float) -> np.ndarray:
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


_BOX_ROTATION = _rotation_z(_BOX_YAW_RAD)  # box frame → world


# --------------------------------------------------------------------------- intersections
# Each returns (t [n], albedo [n, 3], normal [n, 3]) for rays (origins [n, 3], unit directions
# [n, 3]); t is +inf where the ray misses. All float64.


def _hit_sphere(rays_o: np.ndarray, rays_d: np.ndarray, time: float = 0.0) -> tuple[np.ndarray, ...]:
    """Ray-sphere: nearest positive root of |o + t d − c|² = r² (d unit length)."""
    oc = rays_o - _SPHERE_CENTRE
    b = np.einsum("ij,ij->i", oc, rays_d)
    c = np.einsum("ij,ij->i", oc, oc) - _SPHERE_RADIUS**2
    disc = b * b - c
    sqrt_disc = np.sqrt(np.maximum(disc, 0.0))
    t_near, t_far = -b - sqrt_disc, -b + sqrt_disc
    t = np.where(t_near > _T_EPS, t_near, t_far)
    t = np.where((disc >= 0.0) & (t > _T_EPS), t, np.inf)

    finite_t = np.where(np.isfinite(t), t, 0.0)
    normal = (rays_o + finite_t[:, None] * rays_d - _SPHERE_CENTRE) / _SPHERE_RADIUS
    longitude = np.arctan2(normal[:, 1], normal[:, 0])  # (−π, π]
    colatitude = np.arccos(np.clip(normal[:, 2], -1.0, 1.0))  # [0, π]
    n_lon, n_lat = _SPHERE_CHECKS
    check = np.floor((longitude + math.pi) / (2 * math.pi) * n_lon) + np.floor(
        colatitude / math.pi * n_lat
    )
    albedo = _SPHERE_COLOURS[check.astype(np.int64) % 2]
    return t, albedo, normal


def _hit_box(rays_o: np.ndarray, rays_d: np.ndarray, time: float = 0.0) -> tuple[np.ndarray, ...]:
    """Ray-box by the slab method (Kay & Kajiya 1986) in the box's own frame."""
    turn = _rotation_z(BOX_TURN_RAD_PER_STEP * time)
    centre, rotation = turn @ _BOX_CENTRE, turn @ _BOX_ROTATION
    o_box = (rays_o - centre) @ rotation  # row-vector form of Rᵀ (o − c)
    d_box = rays_d @ rotation
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_d = 1.0 / d_box
        t_lo = (-_BOX_HALF_SIZE - o_box) * inv_d
        t_hi = (_BOX_HALF_SIZE - o_box) * inv_d
    t_enter_axes = np.fmin(t_lo, t_hi)  # fmin/fmax ignore the NaN of 0·inf on a slab border
    t_exit_axes = np.fmax(t_lo, t_hi)
    entry_axis = np.argmax(np.nan_to_num(t_enter_axes, nan=-np.inf), axis=1)
    t_enter = np.nanmax(t_enter_axes, axis=1)
    t_exit = np.nanmin(t_exit_axes, axis=1)
    t = np.where((t_exit >= t_enter) & (t_enter > _T_EPS), t_enter, np.inf)

    rows = np.arange(len(rays_o))
    outward_sign = -np.sign(d_box[rows, entry_axis])  # the entered face looks against the ray
    normal_box = np.zeros_like(o_box)
    normal_box[rows, entry_axis] = outward_sign
    normal = normal_box @ rotation.T
    face = 2 * entry_axis + (outward_sign > 0)
    albedo = _BOX_FACE_COLOURS[face]
    return t, albedo, normal


def _hit_cylinder(rays_o: np.ndarray, rays_d: np.ndarray, time: float = 0.0) -> tuple[np.ndarray, ...]:
    """Ray-capped-cylinder: side quadric x² + y² = r² with |z| ≤ h, caps at z = ±h (local frame)."""
    bob = CYLINDER_BOB * math.sin(CYLINDER_BOB_RAD_PER_STEP * time)
    o = rays_o - (_CYLINDER_CENTRE + np.array([0.0, 0.0, bob]))
    d = rays_d
    r, h = _CYLINDER_RADIUS, _CYLINDER_HALF_HEIGHT

    a = d[:, 0] ** 2 + d[:, 1] ** 2
    b = o[:, 0] * d[:, 0] + o[:, 1] * d[:, 1]
    c = o[:, 0] ** 2 + o[:, 1] ** 2 - r * r
    disc = b * b - a * c
    with np.errstate(divide="ignore", invalid="ignore"):
        t_side = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
        z_side = o[:, 2] + t_side * d[:, 2]
        side_ok = (a > 0.0) & (disc >= 0.0) & (t_side > _T_EPS) & (np.abs(z_side) <= h)
        t_side = np.where(side_ok, t_side, np.inf)

        # The cap the ray can enter is the one on the side its origin is on.
        cap_z = np.where(o[:, 2] >= 0.0, h, -h)
        t_cap = (cap_z - o[:, 2]) / d[:, 2]
        x_cap = o[:, 0] + t_cap * d[:, 0]
        y_cap = o[:, 1] + t_cap * d[:, 1]
        cap_ok = np.isfinite(t_cap) & (t_cap > _T_EPS) & (x_cap**2 + y_cap**2 <= r * r)
        t_cap = np.where(cap_ok, t_cap, np.inf)

    on_cap = t_cap < t_side
    t = np.minimum(t_side, t_cap)
    finite_t = np.where(np.isfinite(t), t, 0.0)
    p = o + finite_t[:, None] * d
    side_normal = np.stack([p[:, 0] / r, p[:, 1] / r, np.zeros_like(t)], axis=1)
    cap_normal = np.zeros_like(p)
    cap_normal[:, 2] = np.sign(cap_z)
    normal = np.where(on_cap[:, None], cap_normal, side_normal)

    ring = np.floor((np.clip(p[:, 2], -h, h) + h) / (2 * h) * _CYLINDER_RINGS).astype(np.int64)
    side_albedo = _CYLINDER_COLOURS[ring % 2]
    albedo = np.where(on_cap[:, None], _CYLINDER_CAP_COLOUR, side_albedo)
    return t, albedo, normal


_PRIMITIVES = (_hit_sphere, _hit_box, _hit_cylinder)


def surface_distance(points: np.ndarray) -> np.ndarray:
    """Distance from ``points`` [n, 3] (NeRF world) to the surface of the scene's primitives.

    The absolute value of the union's signed distance ``min(sphere, box, cylinder)`` (each the
    exact signed distance of its primitive; Quilez, "distance functions"): exact outside the
    primitives and where they do not overlap.

    Returns:
        [n] float64 distances, NeRF world units.
    """
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    sphere = np.linalg.norm(p - _SPHERE_CENTRE, axis=1) - _SPHERE_RADIUS
    q = np.abs((p - _BOX_CENTRE) @ _BOX_ROTATION) - _BOX_HALF_SIZE
    box = np.linalg.norm(np.maximum(q, 0.0), axis=1) + np.minimum(q.max(axis=1), 0.0)
    c = p - _CYLINDER_CENTRE
    w = np.stack([np.hypot(c[:, 0], c[:, 1]) - _CYLINDER_RADIUS, np.abs(c[:, 2]) - _CYLINDER_HALF_HEIGHT], axis=1)
    cylinder = np.linalg.norm(np.maximum(w, 0.0), axis=1) + np.minimum(w.max(axis=1), 0.0)
    return np.abs(np.minimum(np.minimum(sphere, box), cylinder))


def _trace(rays_o: np.ndarray, rays_d: np.ndarray, time: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Shade the nearest hit of each ray at ``time``. Returns (rgb [n, 3] in [0, 1], hit [n] bool)."""
    ts, colours = [], []
    for hit_primitive in _PRIMITIVES:
        t, albedo, normal = hit_primitive(rays_o, rays_d, time)
        lambert = np.clip(normal @ _LIGHT_DIR, 0.0, None)
        ts.append(t)
        colours.append(albedo * (_AMBIENT + (1.0 - _AMBIENT) * lambert)[:, None])
    t_all = np.stack(ts)  # [n_primitives, n]
    nearest = np.argmin(t_all, axis=0)
    rows = np.arange(len(rays_o))
    hit = np.isfinite(t_all[nearest, rows])
    rgb = np.stack(colours)[nearest, rows]
    rgb[~hit] = 0.0
    return np.clip(rgb, 0.0, 1.0), hit


# --------------------------------------------------------------------------- cameras and views


def look_at_origin(position: np.ndarray | tuple[float, float, float]) -> np.ndarray:
    """Camera-to-world matrix of a camera at ``position`` looking at the origin, z up.

    Args:
        position: [3] camera centre in NeRF world units; must not lie on the z axis.

    Returns:
        [4, 4] float64 camera-to-world, OpenGL/NeRF camera axes (columns: right, up, back, centre;
        the camera looks down −z).
    """
    eye = np.asarray(position, dtype=np.float64)
    forward = -eye / np.linalg.norm(eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    assert np.linalg.norm(right) > 1e-6, "look_at_origin: camera on the z axis"
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, -forward, eye
    return c2w


def render_demo_view(
    c2w: np.ndarray, width: int, height: int, focal: float, time: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Render the demo scene exactly from a pinhole camera (the ground truth at any camera).

    Pixel ``(u, v)`` covers ``[u, u+1] × [v, v+1]`` (v down) and averages the 2 × 2 rays through
    ``(u + ¼ or ¾, v + ¼ or ¾)``; the principal point is the image centre ``(width/2, height/2)``.

    Args:
        c2w: [4, 4] camera-to-world in the demo's NeRF world (the JSON ``transform_matrix``, not
            the trainer's unit-cube world), OpenGL camera axes (x right, y up, looking down −z).
        width, height: image size in pixels.
        focal: focal length in pixels (same for x and y).
        time: the scene's time in time steps (see the module docstring); 0 is the still scene.

    Returns:
        ``rgb`` [height, width, 3] float32 straight (not premultiplied) colour in [0, 1], 0 where
        no ray hits; ``alpha`` [height, width] float32 coverage in {0, ¼, ½, ¾, 1}.
    """
    c2w = np.asarray(c2w, dtype=np.float64)
    assert c2w.shape == (4, 4), f"c2w: expected shape (4, 4), got {c2w.shape}"
    s = _SUPERSAMPLING
    sub = (np.arange(s) + 0.5) / s  # sub-pixel offsets, ¼ and ¾ for 2 × 2
    u = (np.arange(width)[:, None] + sub[None, :]).reshape(-1)  # [width · s]
    v = (np.arange(height)[:, None] + sub[None, :]).reshape(-1)  # [height · s]
    vv, uu = np.meshgrid(v, u, indexing="ij")  # [height · s, width · s]
    dirs_cam = np.stack(
        [(uu - 0.5 * width) / focal, -(vv - 0.5 * height) / focal, -np.ones_like(uu)], axis=-1
    ).reshape(-1, 3)
    rays_d = dirs_cam @ c2w[:3, :3].T
    rays_d /= np.linalg.norm(rays_d, axis=1, keepdims=True)
    rays_o = np.broadcast_to(c2w[:3, 3], rays_d.shape)

    rgb_rays, hit_rays = _trace(rays_o, rays_d, time)
    rgb_sum = (rgb_rays * hit_rays[:, None]).reshape(height, s, width, s, 3).sum(axis=(1, 3))
    hits = hit_rays.reshape(height, s, width, s).sum(axis=(1, 3)).astype(np.float64)
    rgb = np.where(hits[..., None] > 0, rgb_sum / np.maximum(hits, 1.0)[..., None], 0.0)
    alpha = hits / (s * s)
    return rgb.astype(np.float32), alpha.astype(np.float32)


def _spiral_positions(n: int, seed: int) -> np.ndarray:
    """[n, 3] camera centres on a Fibonacci spiral over elevations 8°..72°, azimuth set by seed."""
    rng = np.random.default_rng(seed)
    azimuth0 = rng.uniform(0.0, 2.0 * math.pi)
    golden_angle = math.pi * (3.0 - math.sqrt(5.0))
    i = np.arange(n) + 0.5
    # Equal-area spacing in z between sin(8°) and sin(72°).
    z_lo, z_hi = math.sin(math.radians(8.0)), math.sin(math.radians(72.0))
    z = z_lo + (z_hi - z_lo) * i / n
    azimuth = azimuth0 + golden_angle * np.arange(n)
    rho = np.sqrt(1.0 - z * z)
    return CAMERA_RADIUS * np.stack([rho * np.cos(azimuth), rho * np.sin(azimuth), z], axis=1)


def _ring_positions(n: int, elevation_deg: float, azimuth0_rad: float) -> np.ndarray:
    """[n, 3] camera centres evenly spaced in azimuth at one elevation."""
    elevation = math.radians(elevation_deg)
    azimuth = azimuth0_rad + 2.0 * math.pi * np.arange(n) / max(n, 1)
    return CAMERA_RADIUS * np.stack(
        [
            math.cos(elevation) * np.cos(azimuth),
            math.cos(elevation) * np.sin(azimuth),
            np.full(n, math.sin(elevation)),
        ],
        axis=1,
    )


def _check_count(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum
    if not ok:
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"write_demo_scene: {name}: expected an integer {bound}, got {value!r}")
    return value  # type: ignore[return-value]


def _write_png_rgba(path: Path, rgb: np.ndarray, alpha: np.ndarray) -> None:
    from PIL import Image

    rgba = np.concatenate([rgb, alpha[..., None]], axis=-1)
    rgba_u8 = np.round(np.clip(rgba, 0.0, 1.0) * 255.0).astype(np.uint8)
    Image.fromarray(rgba_u8, mode="RGBA").save(path, format="PNG")


def write_demo_scene(
    out_dir: Path,
    *,
    resolution: int = 64,
    n_train: int = 32,
    n_val: int = 4,
    n_test: int = 8,
    seed: int = 0,
    time: float = 0.0,
) -> Path:
    """Write the analytic demo scene in NeRF-synthetic (Blender) format.

    Writes ``transforms_{train,val,test}.json`` (top level: only ``camera_angle_x``; frames with
    ``file_path`` ``./<split>/r_<i>`` without extension and a 4 × 4 camera-to-world
    ``transform_matrix``, OpenGL camera axes) and ``<split>/r_<i>.png``: RGBA uint8, straight
    alpha, transparent background, ``resolution × resolution`` pixels, focal
    ``0.5 · resolution / tan(0.5 · camera_angle_x)``. The output is byte-identical for the same
    arguments.

    Args:
        out_dir: folder to write into (created if missing; existing files of the same names are
            overwritten).
        resolution: image width and height in pixels, 8..128.
        n_train, n_val, n_test: number of views per split (train ≥ 1, the others ≥ 0).
        seed: turns the train spiral in azimuth.
        time: the scene's time in time steps (the primitives move; 0 is the still scene).

    Returns:
        ``out_dir``.

    Raises:
        ConfigError: if an argument is out of range (names the argument and the value).
        SceneError: if the folder cannot be written.
    """
    resolution = _check_count("resolution", resolution, _MIN_RESOLUTION, _MAX_RESOLUTION)
    n_views = {
        "train": _check_count("n_train", n_train, 1),
        "val": _check_count("n_val", n_val, 0),
        "test": _check_count("n_test", n_test, 0),
    }
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"write_demo_scene: seed: expected an integer, got {seed!r}")

    positions = {
        "train": _spiral_positions(n_views["train"], seed),
        "val": _ring_positions(n_views["val"], 30.0, math.radians(15.0)),
        "test": _ring_positions(n_views["test"], 20.0, math.radians(40.0)),
    }
    focal = 0.5 * resolution / math.tan(0.5 * CAMERA_ANGLE_X)
    out_dir = Path(out_dir)
    try:
        for split, split_positions in positions.items():
            (out_dir / split).mkdir(parents=True, exist_ok=True)
            frames = []
            for i, position in enumerate(split_positions):
                c2w = look_at_origin(position)
                rgb, alpha = render_demo_view(c2w, resolution, resolution, focal, time)
                _write_png_rgba(out_dir / split / f"r_{i}.png", rgb, alpha)
                frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
            transforms = {"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}
            json_text = json.dumps(transforms, indent=4) + "\n"
            (out_dir / f"transforms_{split}.json").write_text(json_text)
    except OSError as exc:
        reason = exc.strerror or exc
        raise SceneError(f"{out_dir}: cannot write the demo scene ({reason})") from None
    return out_dir


def write_demo_sequence(out_dir: Path, frames: int, *, resolution: int = 64, **views: int) -> list[Path]:
    """Write time steps ``0..frames-1`` of the moving demo scene as ``out_dir/0000``, ``0001``, …
    (each a :func:`write_demo_scene` folder with the same cameras; ``views`` passes ``n_train``,
    ``n_val``, ``n_test``).

    Returns:
        The scene folders in time order.

    Raises:
        ConfigError: ``frames`` < 1 or another argument out of range (names it).
        SceneError: ``out_dir`` already holds time steps from ``frames`` on (a longer sequence's,
            which a reader of the folder would take for this one's; names the folder), or a folder
            cannot be written.
    """
    frames = _check_count("frames", frames, 1)
    out_dir = Path(out_dir)
    later = sorted(p.name for p in out_dir.glob("[0-9][0-9][0-9][0-9]") if p.is_dir() and int(p.name) >= frames)
    if later:
        raise SceneError(f"{out_dir}: already holds time steps {later[0]}..{later[-1]} of a longer sequence; "
                         f"writing {frames} would leave them: remove them or write to an empty folder")
    return [write_demo_scene(Path(out_dir) / f"{i:04d}", resolution=resolution, time=float(i), **views)
            for i in range(frames)]


def demo_scene_path(cache_root: Path | None = None) -> Path:
    """The cached demo scene folder, written with :func:`write_demo_scene`'s defaults if missing.

    The folder is ``<cache_root>/demo-scene-v<DEMO_SCENE_VERSION>``; ``cache_root`` defaults to
    ``$NGPTUNE_CACHE_DIR``, else ``~/.cache/ngptune``. The scene is written into a temporary folder
    beside it and renamed into place, so a folder that exists is complete; when two processes race,
    the first rename wins and the other's copy is discarded.

    Returns:
        The scene folder (holds ``transforms_train.json``).

    Raises:
        SceneError: if the cache folder cannot be created or written.
    """
    if cache_root is None:
        cache_root = Path(os.environ.get("NGPTUNE_CACHE_DIR") or "~/.cache/ngptune").expanduser()
    scene_dir = Path(cache_root) / f"demo-scene-v{DEMO_SCENE_VERSION}"
    if (scene_dir / "transforms_train.json").is_file():
        return scene_dir
    try:
        scene_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{scene_dir.name}-", dir=scene_dir.parent))
    except OSError as exc:
        raise SceneError(
            f"{scene_dir.parent}: cannot create the demo scene cache ({exc.strerror or exc})"
        ) from None
    try:
        write_demo_scene(tmp_dir)
        os.rename(tmp_dir, scene_dir)
    except OSError as exc:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if (scene_dir / "transforms_train.json").is_file():  # another process renamed first
            return scene_dir
        reason = exc.strerror or exc
        raise SceneError(f"{scene_dir}: cannot write the demo scene ({reason})") from None
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return scene_dir
