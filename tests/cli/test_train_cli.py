"""`python -m trainer` with instant-ngp style flags, `ngptune train --print-config`, and a scene box
that no camera ray crosses."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.train.conftest import TINY
from trainer.config import apply_overrides, config_to_dict, load_config
from trainer.errors import TrainingError

REPO = Path(__file__).resolve().parents[2]


def _tiny_config_file(tmp_path: Path) -> Path:
    cfg = apply_overrides(load_config(None), dict(TINY, **{"training.log_every": 5}))
    text = "// tiny CPU config written by the test\n" + json.dumps(config_to_dict(cfg), indent=1)
    path = tmp_path / "tiny.json"
    path.write_text(text)
    return path


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_instant_ngp_flags_train_save_and_resume(demo_scene, tmp_path):
    config = _tiny_config_file(tmp_path)
    first = _run("--scene", str(demo_scene), "--network", str(config), "--n_steps", "10",
                 "--save_snapshot", str(tmp_path / "s.pt"), "--out", str(tmp_path / "run1"), "--no-eval", cwd=REPO)
    assert first.returncode == 0, first.stderr
    status = json.loads((tmp_path / "run1" / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 10
    assert "step 10" in first.stdout  # plain progress lines when not on a terminal
    second = _run("--scene", str(demo_scene), "--network", str(config), "--n_steps", "15",
                  "--load_snapshot", str(tmp_path / "s.pt"), "--out", str(tmp_path / "run2"), "--eval-max-images", "1", cwd=REPO)
    assert second.returncode == 0, second.stderr
    status = json.loads((tmp_path / "run2" / "status.json").read_text())
    assert status["step"] == 15 and status["eval_psnr_db"] > 5
    evaluation = json.loads((tmp_path / "run2" / "eval.json").read_text())
    assert len(evaluation["images"]) == 1 and (tmp_path / "run2" / "renders" / "test_000.png").is_file()


def test_print_config_and_bad_override_are_one_line(tmp_path):
    ok = _run("--print-config", "--set", "training.precision=bf16", cwd=REPO)
    assert ok.returncode == 0 and json.loads(ok.stdout)["training"]["precision"] == "bf16"
    bad = _run("--print-config", "--set", "encoding.log2_hashmap_size=32", cwd=REPO)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: overrides: encoding.log2_hashmap_size: expected an integer in [10, 24], got 32"
    ]


def test_a_box_no_camera_ray_crosses_is_a_clear_error(tmp_path):
    from tests.train.conftest import tiny_config
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    folder = tmp_path / "away"
    (folder / "images").mkdir(parents=True)
    import cv2

    frames = []
    for i in range(3):
        cv2.imwrite(str(folder / "images" / f"{i}.png"), np.full((8, 8, 3), 128, np.uint8))
        # cameras 10 units above the scene looking up (+z in NeRF world), away from the box
        c2w = [[1, 0, 0, 0.1 * i], [0, -1, 0, 0], [0, 0, -1, 10.0], [0, 0, 0, 1]]
        frames.append({"file_path": f"images/{i}.png", "transform_matrix": c2w})
    (folder / "transforms.json").write_text(json.dumps({"camera_angle_x": 0.5, "frames": frames}))
    trainer = Trainer(tiny_config(data__holdout_every=0), load_scene(folder, holdout_every=0))
    with pytest.raises(TrainingError, match="no ray sample hit an occupied cell"):
        trainer.train(n_steps=40)
    trainer.close()
