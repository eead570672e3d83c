"""Hostile inputs found by review: each gives one SceneError/ConfigError line, never a traceback."""

import json
import struct
import zlib

import numpy as np
import pytest

from trainer.contract.config import load_config, parse_override
from trainer.data import load_scene
from trainer.data.imageinfo import image_size
from trainer.contract.errors import ConfigError, SceneError


def _ngp_scene(folder, frames, **top):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "transforms.json").write_text(json.dumps({"camera_angle_x": 0.7, "w": 8, "h": 8, **top, "frames": frames}))
    return folder


def _eye(t=(0.0, 0.0, 4.0)):
    return [[1, 0, 0, t[0]], [0, 1, 0, t[1]], [0, 0, 1, t[2]], [0, 0, 0, 1]]


def test_file_path_too_long_for_the_file_system(tmp_path):
    scene = _ngp_scene(tmp_path / "s", [{"file_path": "a" * 300, "transform_matrix": _eye()}])
    with pytest.raises(SceneError, match="is not a usable path"):
        load_scene(scene)


def test_json_nested_too_deeply(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "transforms.json").write_text('{"frames": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(SceneError, match="nested too deeply"):
        load_scene(folder)
    config = tmp_path / "deep.json"
    config.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(config)
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_override("training.n_steps=" + "[" * 5000)


def test_all_zero_rotation_is_not_a_camera(tmp_path):
    matrix = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 4], [0, 0, 0, 1]]
    scene = _ngp_scene(tmp_path / "s", [{"file_path": "x.png", "transform_matrix": matrix}])
    with pytest.raises(SceneError, match=r"frames\[0\].*rotation is not a rotation"):
        load_scene(scene)


def test_llff_npz_archive_and_zero_rotation(tmp_path):
    folder = tmp_path / "llff"
    (folder / "images").mkdir(parents=True)
    np.savez(folder / "poses_bounds.npy", a=np.zeros(3))
    (folder / "poses_bounds.npy.npz").rename(folder / "poses_bounds.npy")
    with pytest.raises(SceneError, match="found an .npz archive"):
        load_scene(folder)
    row = np.zeros((1, 17))
    row[0, 4], row[0, 9], row[0, 14], row[0, 15], row[0, 16] = 8, 8, 10, 1, 5  # hwf, near, far
    np.save(folder / "poses_bounds.npy", row)
    with pytest.raises(SceneError, match="row 0: the pose's 3x3 rotation is not a rotation"):
        load_scene(folder)


def test_huge_png_header_is_one_clear_error(tmp_path):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path = tmp_path / "big.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)) + chunk(b"IEND", b""))
    with pytest.raises(SceneError, match=r"60000x60000 = 3600000000 pixels is larger than"):
        image_size(path)
