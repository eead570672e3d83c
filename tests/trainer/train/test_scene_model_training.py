"""The trainer picks its scene model from the capture (training.scene_model auto), says which in its
first lines, takes an override, and keeps the model a snapshot was trained with."""

from __future__ import annotations

import shutil
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.support.paths import REPO
from tests.support.scenes import tiny_config, tiny_config_file
from trainer.contract.errors import SnapshotError
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined
from trainer.data import load_scene
from trainer.train.loop import Trainer


@pytest.fixture(scope="module")
def rgb_demo(demo_scene, tmp_path_factory) -> Path:
    """The demo scene photographed on a grey backdrop: its images composited and saved as RGB (a
    capture from around an object, with background and no alpha)."""
    copy = tmp_path_factory.mktemp("rgb") / "scene"
    shutil.copytree(demo_scene, copy)
    for png in copy.rglob("*.png"):
        rgba = Image.open(png).convert("RGBA")
        Image.alpha_composite(Image.new("RGBA", rgba.size, (120, 130, 140, 255)), rgba).convert("RGB").save(png)
    return copy


def test_a_capture_without_alpha_trains_the_unbounded_model(rgb_demo):
    trainer = Trainer(tiny_config(training__n_steps=12), load_scene(rgb_demo), None)
    assert trainer.scene_model == "unbounded" and trainer.scene_choice.capture.kind == "360"
    assert trainer.grid.levels == trainer.grid.cascades + 1 and trainer.field.contraction is not None
    assert trainer.background_steps == 64
    assert trainer.distortion_weight == 0.05  # loss.distortion_weight null: on with the unbounded model
    from trainer.run.lifecycle import scene_model_text

    assert scene_model_text(trainer).endswith(
        "; distortion regulariser 0.05 (loss.distortion_weight null: on with the unbounded model)")
    torch.testing.assert_close(trainer.field.aabb, torch.tensor([[-0.5] * 3, [1.5] * 3]))  # twice the unit box
    trainer.train()
    batch = trainer.sampler.sample(256)
    samples = trainer.march(batch.rays_o, batch.rays_d, jitter=False)
    beyond = (samples.positions - 0.5).abs().amax(dim=-1) > 0.5
    assert samples.n_samples > 0 and bool(beyond.any())  # the rays go on past the unit box
    trainer.close()


def test_an_object_with_alpha_keeps_the_box_model(demo_scene):
    from trainer.data.footprint import footprint_resolution

    cfg = tiny_config(encoding__per_level_scale=None)
    scene = load_scene(demo_scene)
    trainer = Trainer(cfg, scene, None)
    assert trainer.scene_model == "box" and trainer.scene_choice.capture.kind == "object"
    assert trainer.grid.levels == trainer.grid.cascades and not trainer.grid.shell
    assert trainer.field.contraction is None and trainer.background_steps == 0
    assert trainer.distortion_weight == 0.0  # the box model: no regulariser unless asked for
    torch.testing.assert_close(trainer.field.aabb, torch.tensor(scene.aabb, dtype=torch.float32))
    # the finest hash-grid level as before the unbounded model: the views' footprint over the scene box
    footprint = footprint_resolution(scene.frames("train"), scene.aabb)
    assert trainer.finest_resolution == cfg.encoding.finest_resolution(scene.aabb_scale, footprint)
    trainer.close()


def test_the_setting_overrides_the_capture(rgb_demo, demo_scene):
    boxed = Trainer(tiny_config(training__scene_model="box"), load_scene(rgb_demo), None)
    assert boxed.scene_model == "box" and not boxed.grid.shell
    assert boxed.scene_choice.line().startswith("scene model: box (training.scene_model box); capture: a 360°")
    boxed.close()
    unbounded = Trainer(tiny_config(training__scene_model="unbounded"), load_scene(demo_scene), None)
    assert unbounded.scene_model == "unbounded" and unbounded.grid.shell
    unbounded.close()


def test_a_snapshot_keeps_the_scene_model_it_was_trained_with(rgb_demo, tmp_path):
    from trainer.inference.loading import load_model
    from trainer.train.snapshot import save_snapshot

    boxed = Trainer(tiny_config(training__scene_model="box", training__n_steps=2), load_scene(rgb_demo), None)
    boxed.train()
    state = boxed.state_dict()
    boxed.close()
    # a snapshot written before the unbounded model existed: no scene model recorded, config "auto"
    state["trainer_state"].pop("scene_model")
    state["config"]["training"].pop("scene_model")
    old = save_snapshot(tmp_path / "old.pt", state)
    unbounded = Trainer(tiny_config(), load_scene(rgb_demo), None)
    with pytest.raises(SnapshotError, match=r"trained with the scene model 'box', this config and scene give "
                                            r"'unbounded' .*--set training\.scene_model=box"):
        unbounded.load(old)
    unbounded.close()
    loaded = load_model(old, scene_path=rgb_demo, device="cpu")  # renders as it was trained
    assert loaded.trainer.scene_model == "box"
    loaded.trainer.close()


def test_the_first_lines_name_the_scene_model(rgb_demo, tmp_path):
    config = tiny_config_file(tmp_path)
    lines = {}
    for name, extra in (("auto", []), ("box", ["--set", "training.scene_model=box"])):
        out = subprocess.run([sys.executable, "-m", "trainer", "--device", "cpu", "--scene", str(rgb_demo), "--config",
                              str(config), "--n-steps", "2", "--no-eval", "--out", str(tmp_path / name), *extra],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        printed = out.stdout.splitlines()
        first = next(i for i, line in enumerate(printed) if line.startswith("scene model: "))
        assert first < 8  # among the first lines
        statement = printed[first:first + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION),
                                                             printed[first + 1:]))
        assert all(len(line) <= LINE_WIDTH for line in statement), statement
        lines[name] = [joined(statement)]
    assert lines["auto"] == ["scene model: unbounded (training.scene_model auto); capture: a 360° capture with "
                             f"background (no alpha; views spread to {_spread(rgb_demo):.0f}° from the mean view "
                             "direction, over 30°); distortion regulariser 0.05 (loss.distortion_weight null: on "
                             "with the unbounded model)"]
    assert lines["box"][0].startswith("scene model: box (training.scene_model box); capture: a 360° capture")
    assert "distortion" not in lines["box"][0]


def _spread(scene: Path) -> float:
    from trainer.data.capture_kind import view_spread_deg

    frames = load_scene(scene).frames("train")
    return view_spread_deg(np.stack([f.c2w for f in frames]))


def test_the_scene_model_chooses_the_hash_grid_features_and_table_size(rgb_demo, demo_scene):
    """encoding.n_features_per_level and log2_hashmap_size null: F=4, T=2^18 with the box model,
    F=2, T=2^19 with the unbounded one (2^20 features per level either way); a set value wins."""
    from trainer.run.lifecycle import scene_model_text

    derived = {"encoding__n_features_per_level": None, "encoding__log2_hashmap_size": None}
    for scene, model, features, log2_size in ((demo_scene, "box", 4, 18), (rgb_demo, "unbounded", 2, 19)):
        trainer = Trainer(tiny_config(**derived), load_scene(scene), None)
        grid = trainer.field.encoding.cfg
        assert trainer.scene_model == model
        assert (grid.n_features_per_level, grid.log2_hashmap_size) == (features, log2_size)
        assert trainer.field.encoding.output_dim == 4 * features  # the tiny config's 4 levels
        assert (f"; hash grid F={features}, T=2^{log2_size} (not set in the config: F from the {model} model, T = 2^20 / F)"
                in scene_model_text(trainer))
        trainer.close()
    # F set, T null: the table keeps 2^20 features; both set: no hash-grid words on the line
    trainer = Trainer(tiny_config(encoding__n_features_per_level=8, encoding__log2_hashmap_size=None),
                      load_scene(demo_scene), None)
    assert trainer.field.encoding.cfg.log2_hashmap_size == 17 and trainer.hash_grid == (8, 17)
    assert "; hash grid F=8, T=2^17 (not set in the config: T = 2^20 / F)" in scene_model_text(trainer)
    trainer.close()
    trainer = Trainer(tiny_config(), load_scene(demo_scene), None)
    assert trainer.field.encoding.cfg.n_features_per_level == 2 and "hash grid" not in scene_model_text(trainer)
    trainer.close()


def test_the_trainer_records_what_the_configs_null_settings_became(rgb_demo, demo_scene):
    """derived_settings (status.json's record): the value of each setting of DERIVED_SETTINGS that
    the config leaves null, the ones the run trains with; a set value is not listed."""
    from trainer.contract.config import DERIVED_SETTINGS

    nulls = {"encoding__n_features_per_level": None, "encoding__log2_hashmap_size": None,
             "encoding__per_level_scale": None}
    for scene, features, distortion, l2_reg in ((demo_scene, 4, 0.0, 0.0), (rgb_demo, 2, 0.05, 1e-6)):
        trainer = Trainer(tiny_config(**nulls), load_scene(scene), None)
        grid = trainer.field.encoding.cfg
        derived = trainer.derived_settings()
        assert list(derived) == list(DERIVED_SETTINGS)  # the tiny config sets none of them
        assert derived == {"data.aabb_scale": 1, "data.downscale": trainer.scene.downscale,
                           "encoding.n_features_per_level": features, "encoding.log2_hashmap_size": 20 - features // 2,
                           "encoding.per_level_scale": pytest.approx(grid.growth_factor),
                           "encoding.max_resolution": grid.max_resolution,
                           "loss.distortion_weight": distortion, "optimizer.l2_reg": l2_reg,
                           "training.cone_angle": 0.0}
        # the optimiser decays the MLP weights (its second group) by the resolved value, never the grid
        assert [g["weight_decay"] for g in trainer.optimizer.param_groups[:2]] == [0.0, l2_reg]
        trainer.close()
    trainer = Trainer(tiny_config(training__cone_angle=0.01, data__aabb_scale=2), load_scene(demo_scene), None)
    derived = trainer.derived_settings()
    assert "training.cone_angle" not in derived and "data.aabb_scale" not in derived
    assert "encoding.max_resolution" not in derived  # the tiny config's per_level_scale gives the levels
    assert derived["loss.distortion_weight"] == 0.0 and "encoding.n_features_per_level" not in derived
    trainer.close()
    trainer = Trainer(tiny_config(optimizer__l2_reg=1e-5), load_scene(demo_scene), None)
    assert "optimizer.l2_reg" not in trainer.derived_settings()  # set: the run's value is the config's
    assert trainer.optimizer.param_groups[1]["weight_decay"] == 1e-5
    trainer.close()


def test_a_snapshot_keeps_the_hash_grid_it_was_trained_with(demo_scene, tmp_path, monkeypatch):
    """A snapshot records the F and T it was built with: a resume with other values is refused
    before the shapes are, naming the flags that load it (a snapshot written before the record
    too, from its explicit config); equal values resolved from null are no config difference;
    render and export load it as trained even if the scene model's choice changes."""
    import warnings

    import trainer.contract.config.blocks as blocks
    from trainer.inference.loading import load_model
    from trainer.train.snapshot import save_snapshot

    derived = {"encoding__n_features_per_level": None, "encoding__log2_hashmap_size": None}
    boxed = Trainer(tiny_config(training__n_steps=2, **derived), load_scene(demo_scene), None)
    boxed.train()
    state = boxed.state_dict()
    boxed.close()
    assert state["trainer_state"]["hash_grid"] == {"n_features_per_level": 4, "log2_hashmap_size": 18}
    path = save_snapshot(tmp_path / "f4.pt", state)

    other = Trainer(tiny_config(encoding__log2_hashmap_size=None), load_scene(demo_scene), None)  # F=2, T=2^19
    with pytest.raises(SnapshotError, match=r"trained with F=4, T=2\^18, this config and scene give F=2, T=2\^19 .*"
                                            r"load it with --set encoding\.n_features_per_level=4 "
                                            r"--set encoding\.log2_hashmap_size=18$"):
        other.load(path)
    other.close()
    same = Trainer(tiny_config(encoding__n_features_per_level=4, encoding__log2_hashmap_size=18), load_scene(demo_scene), None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        same.load(path)
    assert not [w for w in caught if "encoding." in str(w.message)], [str(w.message) for w in caught]
    same.close()

    # written before the record: its config's explicit F=2, T=2^19 says what it was trained with
    old_state = Trainer(tiny_config(training__n_steps=1, encoding__log2_hashmap_size=19), load_scene(demo_scene), None)
    old_state.train()
    old = old_state.state_dict()
    old_state.close()
    old["trainer_state"].pop("hash_grid")
    old_path = save_snapshot(tmp_path / "old.pt", old)
    nulls = Trainer(tiny_config(training__n_steps=3, **derived), load_scene(demo_scene), None)
    with pytest.raises(SnapshotError, match=r"trained with F=2, T=2\^19, this config and scene give F=4, T=2\^18 .*"
                                            r"encoding\.n_features_per_level=2 --set encoding\.log2_hashmap_size=19$"):
        nulls.load(old_path)
    nulls.close()

    monkeypatch.setattr(blocks, "BOX_FEATURES_PER_LEVEL", 2)  # the box model's choice changed since
    loaded = load_model(path, scene_path=demo_scene, device="cpu")
    assert loaded.trainer.hash_grid == (4, 18) and loaded.trainer.field.encoding.cfg.n_features_per_level == 4
    loaded.trainer.close()
