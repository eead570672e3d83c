"""Small synthetic scenes written in each on-disk format (the ``ring`` fixture of tests/conftest.py
gives their cameras).

All four writers take the same cameras: camera-to-world matrices with OpenGL axes in a NeRF world,
and one pinhole camera (principal point at the centre, as LLFF and Blender require), so that a test
can load them back and compare.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

RING_WIDTH, RING_HEIGHT, RING_FOCAL = 40, 30, 50.0


def look_at_c2w(centre: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[4, 4] OpenGL camera-to-world of a camera at ``centre`` looking at ``target``."""
    forward = (target - centre) / np.linalg.norm(target - centre)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, cam_up, -forward, centre
    return c2w


def ring_c2w(n: int = 8, radius: float = 4.0, elevation_deg: float = 20.0) -> np.ndarray:
    """[n, 4, 4] cameras evenly spaced on a ring around +z, ``radius`` from the origin, looking at it."""
    el = math.radians(elevation_deg)
    cams = []
    for i in range(n):
        az = 2 * math.pi * i / n
        centre = radius * np.array([math.cos(az) * math.cos(el), math.sin(az) * math.cos(el), math.sin(el)])
        cams.append(look_at_c2w(centre, np.zeros(3), np.array([0.0, 0.0, 1.0])))
    return np.stack(cams)


def write_image(path: Path, width: int = RING_WIDTH, height: int = RING_HEIGHT, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (width, height), color=(200, 100, 50, 255)[: len(mode)]).save(path)


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def write_ngp(folder: Path, c2w: np.ndarray, **root: object) -> Path:
    """instant-ngp scene: ``transforms.json`` with ``fl_x/fl_y/cx/cy/w/h`` and ``images/NNN.png``."""
    frames = []
    for i, m in enumerate(c2w):
        write_image(folder / "images" / f"{i:03d}.png")
        frames.append({"file_path": f"images/{i:03d}.png", "transform_matrix": m.tolist()})
    data = {
        "fl_x": RING_FOCAL,
        "fl_y": RING_FOCAL,
        "cx": RING_WIDTH / 2,
        "cy": RING_HEIGHT / 2,
        "w": float(RING_WIDTH),
        "h": float(RING_HEIGHT),
        "frames": frames,
        **root,
    }
    write_json(folder / "transforms.json", data)
    return folder / "transforms.json"


def write_blender(folder: Path, c2w: np.ndarray, splits: tuple[str, ...] = ("train",)) -> Path:
    """Blender scene: ``camera_angle_x`` only, ``./<split>/r_i`` without extension, RGBA PNGs."""
    angle_x = 2 * math.atan(RING_WIDTH / (2 * RING_FOCAL))
    for split in splits:
        frames = []
        for i, m in enumerate(c2w):
            write_image(folder / split / f"r_{i}.png", mode="RGBA")
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.1, "transform_matrix": m.tolist()})
        write_json(folder / f"transforms_{split}.json", {"camera_angle_x": angle_x, "frames": frames})
    return folder


def write_llff(folder: Path, c2w: np.ndarray, near_far: tuple[float, float] = (1.0, 8.0)) -> Path:
    """LLFF scene: ``poses_bounds.npy`` ([down, right, back] columns, hwf) and ``images/``."""
    rows = []
    for i, m in enumerate(c2w):
        write_image(folder / "images" / f"IMG_{i:04d}.JPG")
        right, up, back, t = m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3]
        pose = np.stack([-up, right, back, t, [RING_HEIGHT, RING_WIDTH, RING_FOCAL]], axis=1)  # [3, 5]
        rows.append(np.concatenate([pose.reshape(-1), near_far]))
    np.save(folder / "poses_bounds.npy", np.array(rows))
    return folder


def rotation_to_quaternion(r: np.ndarray) -> np.ndarray:
    """(w, x, y, z) unit quaternion of a rotation matrix (Shepperd's method)."""
    trace = np.trace(r)
    if trace > 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = [(r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s]
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = [(r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = [(r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s]
    return np.array(q)


def write_colmap_text(
    model: Path,
    c2w: np.ndarray,
    names: list[str],
    cameras: list[str] | None = None,
    camera_ids: list[int] | None = None,
) -> Path:
    """COLMAP text model (legacy layout: cameras/images/points3D.txt, no rigs/frames).

    Args:
        model: the model folder (``<scene>/sparse/<k>``).
        c2w: [n, 4, 4] OpenGL camera-to-world.
        names: image names.
        cameras: lines of cameras.txt after the id (``"PINHOLE 40 30 50 50 20 15"``); default one
            PINHOLE ring camera.
        camera_ids: camera id (1-based) of each image; default all 1.
    """
    model.mkdir(parents=True, exist_ok=True)
    cameras = cameras or [
        f"PINHOLE {RING_WIDTH} {RING_HEIGHT} {RING_FOCAL} {RING_FOCAL} {RING_WIDTH / 2} {RING_HEIGHT / 2}"
    ]
    camera_ids = camera_ids or [1] * len(names)
    lines = ["# Camera list with one line of data per camera:"]
    lines += [f"{i + 1} {cam}" for i, cam in enumerate(cameras)]
    (model / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = ["# Image list with two lines of data per image:"]
    for i, (m, name, cam_id) in enumerate(zip(c2w, names, camera_ids)):
        c2w_cv = m.copy()
        c2w_cv[:3, 1:3] *= -1
        w2c = np.linalg.inv(c2w_cv)
        q = rotation_to_quaternion(w2c[:3, :3])
        t = w2c[:3, 3]
        lines.append(
            f"{i + 1} {' '.join(repr(float(v)) for v in q)} "
            f"{' '.join(repr(float(v)) for v in t)} {cam_id} {name}"
        )
        lines.append("")
    (model / "images.txt").write_text("\n".join(lines) + "\n")
    (model / "points3D.txt").write_text("# 3D point list\n")
    return model


def write_colmap_scene(folder: Path, c2w: np.ndarray, model_name: str = "0", binary: bool = False) -> Path:
    """COLMAP scene: ``folder/sparse/<model_name>`` (text, or binary via pycolmap) + ``images/``."""
    names = [f"frame_{i}.png" for i in range(len(c2w))]
    for name in names:
        write_image(folder / "images" / name)
    model = write_colmap_text(folder / "sparse" / model_name, c2w, names)
    if binary:
        import pycolmap

        reconstruction = pycolmap.Reconstruction(model)
        for ext_file in model.iterdir():
            ext_file.unlink()
        reconstruction.write_binary(model)
        assert (model / "images.bin").is_file() and not (model / "images.txt").exists()
    return folder
