"""The moving demo scene: time step 0 is the still scene, later steps move the box and the
cylinder (not the sphere), each step close to the one before; ``demo-scene --frames N``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.data.demo import CAMERA_ANGLE_X, look_at_origin, render_demo_view, write_demo_scene, write_demo_sequence
from trainer.contract.errors import ConfigError, SceneError

FOCAL = 0.5 * 32 / np.tan(0.5 * CAMERA_ANGLE_X)
TOP_VIEW = look_at_origin((0.3, -0.2, 3.98))  # from above: all three primitives are in view


def _render(time: float) -> np.ndarray:
    rgb, alpha = render_demo_view(TOP_VIEW, 32, 32, FOCAL, time)
    return np.concatenate([rgb, alpha[..., None]], axis=-1)


def test_time_moves_box_and_cylinder_a_little_per_step():
    still, one, three = _render(0.0), _render(1.0), _render(3.0)
    sphere_pixel = (16, 16)  # the centre of the view: the sphere, which stays
    assert np.array_equal(still[sphere_pixel], one[sphere_pixel])
    near, far = np.abs(one - still).mean(), np.abs(three - still).mean()
    assert 0 < near < far


def test_sequence_folders_in_time_order(tmp_path):
    paths = write_demo_sequence(tmp_path / "seq", 3, resolution=16, n_train=2, n_val=0, n_test=1)
    assert paths == [tmp_path / "seq" / f"000{i}" for i in range(3)]
    still = write_demo_scene(tmp_path / "still", resolution=16, n_train=2, n_val=0, n_test=1)
    assert (paths[0] / "train" / "r_0.png").read_bytes() == (still / "train" / "r_0.png").read_bytes()
    assert (paths[1] / "transforms_train.json").read_text() == (still / "transforms_train.json").read_text()
    assert (paths[1] / "train" / "r_0.png").read_bytes() != (still / "train" / "r_0.png").read_bytes()
    with pytest.raises(ConfigError, match="write_demo_scene: frames: expected an integer >= 1, got 0"):
        write_demo_sequence(tmp_path / "none", 0)


def test_demo_scene_frames_flag(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ngptune", "demo-scene", str(tmp_path / "seq"), "--frames", "2",
                             "--resolution", "8"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tmp_path / "seq" / "0000"), str(tmp_path / "seq" / "0001")]
    assert (Path(result.stdout.split()[1]) / "transforms_test.json").is_file()


def test_a_shorter_sequence_into_a_longer_ones_folder_is_refused(tmp_path):
    write_demo_sequence(tmp_path / "seq", 4, resolution=16, n_train=2, n_val=0, n_test=1)
    with pytest.raises(SceneError) as exc:
        write_demo_sequence(tmp_path / "seq", 2, resolution=16, n_train=2, n_val=0, n_test=1)
    assert str(exc.value) == (f"{tmp_path / 'seq'}: already holds time steps 0002..0003 of a longer sequence; "
                              "writing 2 would leave them: remove them or write to an empty folder")
    assert len(write_demo_sequence(tmp_path / "seq", 4, resolution=16, n_train=2, n_val=0, n_test=1)) == 4
