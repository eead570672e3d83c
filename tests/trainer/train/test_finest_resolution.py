"""The finest hash-grid level follows the training views' pixels unless encoding.max_resolution
says otherwise, and a snapshot is never loaded into a grid of another finest resolution."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.data.footprint import footprint_resolution
from trainer.data.scene import Frame, Intrinsics
from trainer.encoding.hashgrid import level_resolutions
from trainer.contract.errors import SnapshotError
from trainer.train.loop import Trainer
from trainer.train.snapshot_state import ConfigDifferenceWarning

UNIT_BOX = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


def _frame(position: list[float], focal_px: float) -> Frame:
    c2w = np.eye(4)
    c2w[:3, 3] = position
    intrinsics = Intrinsics(width=64, height=64, fx=focal_px, fy=focal_px, cx=32.0, cy=32.0)
    return Frame(name="f", image_path=__file__, c2w=c2w, intrinsics=intrinsics)


def test_footprint_is_side_times_focal_over_distance_median_over_views():
    frames = [_frame([0.5, 0.5, 2.5], 100.0), _frame([2.5, 0.5, 0.5], 100.0), _frame([0.5, 4.5, 0.5], 400.0)]
    # s·f/d per view: 1·100/2 = 50, 50, 1·400/4 = 100; the median is 50
    assert footprint_resolution(frames, UNIT_BOX) == pytest.approx(50.0)
    box4 = np.array([[-1.5] * 3, [2.5] * 3])  # aabb_scale 4 around the same centre
    assert footprint_resolution(frames, box4) == pytest.approx(200.0)
    assert footprint_resolution([_frame([0.5, 0.5, 0.5], 100.0)], UNIT_BOX) is None  # a camera at the centre
    assert footprint_resolution([], UNIT_BOX) is None


def _derived(**overrides):
    # the tiny config fixes b = 2; leaving b and N_max unset lets the scene decide
    return tiny_config(encoding__per_level_scale=None, encoding__n_levels=4, training__n_steps=3, **overrides)


def test_the_trainer_builds_its_finest_level_from_the_scene(demo_scene):
    scene = load_scene(demo_scene)
    trainer = Trainer(_derived(), scene)
    footprint = footprint_resolution(scene.frames("train"), scene.aabb)
    expected = 2 ** int(np.ceil(np.log2(footprint)))
    assert trainer.footprint_resolution == pytest.approx(footprint)
    assert trainer.finest_resolution == expected < 2048  # 32-pixel views: far below instant-ngp's 2048
    assert level_resolutions(trainer.field.encoding.cfg)[-1] == expected
    explicit = Trainer(_derived(encoding__max_resolution=256), scene)
    assert explicit.finest_resolution == 256 and level_resolutions(explicit.field.encoding.cfg)[-1] == 256
    trainer.close()
    explicit.close()


def _trained_snapshot(demo_scene, tmp_path):
    """The scene, a 3-step snapshot of it with the derived N_max, and that N_max."""
    scene = load_scene(demo_scene)
    first = Trainer(_derived(), scene)
    first.train()
    path = first.save(tmp_path / "snap.pt")
    finest = first.finest_resolution
    first.close()
    return scene, path, finest


def test_a_snapshot_of_another_finest_resolution_is_refused_with_the_override(demo_scene, tmp_path):
    scene, path, finest = _trained_snapshot(demo_scene, tmp_path)
    other = Trainer(_derived(encoding__max_resolution=finest * 2), scene)
    with pytest.raises(SnapshotError, match=rf"snap\.pt: its hash grid was trained with a finest resolution of {finest}, "
                                            rf"this config and scene give {finest * 2} .*--set encoding\.max_resolution={finest}"):
        other.load(path)
    other.close()
    same = Trainer(_derived(encoding__max_resolution=finest), scene)  # the override the message names
    same.load(path)
    assert same.step == 3
    same.close()


def test_a_snapshot_of_other_settings_too_asks_for_its_config(demo_scene, tmp_path):
    """The override alone would only meet the next difference (another feature count per level):
    the message asks for the run's config instead, naming what differs."""
    scene, path, finest = _trained_snapshot(demo_scene, tmp_path)
    other = Trainer(_derived(encoding__max_resolution=finest * 2, encoding__n_features_per_level=4), scene)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SnapshotError, match=r"it was trained with other settings too \(encoding\.n_features_per_level: "
                                                r"2 → 4\): "
                                                r"pass its run's config\.json as --config, without a flag or --set that "
                                                r"changes these$"):
            other.load(path)
    assert not [w for w in caught if issubclass(w.category, ConfigDifferenceWarning)]  # the refusal says it once
    other.close()


def test_a_model_of_a_derived_finest_resolution_renders_with_another_scene(demo_scene, tmp_path):
    """Render and export load a model whose N_max the training views derived with the N_max it
    trained with, whatever the scene given derives (here the same views at twice the pixels)."""
    from trainer.contract.config import config_to_dict
    from trainer.contract.rundir import RunDir
    from trainer.data.demo import write_demo_scene
    from trainer.inference.loading import load_model

    scene, path, finest = _trained_snapshot(demo_scene, tmp_path)
    run = RunDir(tmp_path / "run").create()
    run.write_json(run.config_path, config_to_dict(_derived(data__scene=str(demo_scene))))
    run.snapshot_path(3).parent.mkdir(parents=True, exist_ok=True)
    path.rename(run.snapshot_path(3))
    finer = write_demo_scene(tmp_path / "finer", resolution=64, n_train=16, n_val=2, n_test=4)
    assert Trainer(_derived(), load_scene(finer)).finest_resolution != finest  # it would derive another
    model = load_model(run.root, scene_path=finer)
    assert model.trainer.finest_resolution == finest and model.trainer.step == 3


def test_a_snapshot_of_another_hash_grid_is_refused_with_the_override_or_its_config(demo_scene, tmp_path):
    """Another F and T alone: the message names the --set flags, and they load it. Another F and T
    with another network too: the flags would only meet the next difference, so it asks for the
    run's config.json, naming that difference."""
    scene, path, finest = _trained_snapshot(demo_scene, tmp_path)
    grid = {"encoding__n_features_per_level": 4, "encoding__log2_hashmap_size": 10}
    other = Trainer(_derived(**grid), scene)
    probe = Trainer(_derived(), scene)
    stored = probe.hash_grid
    probe.close()
    flags = rf"--set encoding\.n_features_per_level={stored[0]} --set encoding\.log2_hashmap_size={stored[1]}"
    with pytest.raises(SnapshotError, match=rf"its hash grid was trained with F={stored[0]}, .*; load it with {flags}$"):
        other.load(path)
    other.close()
    wider = Trainer(_derived(**grid, network__n_neurons=32), scene)
    with pytest.raises(SnapshotError, match=r"other settings too \(network\.n_neurons: \d+ → 32\): "
                                            r"pass its run's config\.json as --config, without a flag or --set that "
                                            r"changes these$"):
        wider.load(path)
    wider.close()


def test_the_advice_names_the_config_json_of_the_run_folder_the_snapshot_lies_in(demo_scene, tmp_path):
    """A snapshot in RUN/snapshots/ beside RUN/config.json: the advice gives that file's path."""
    scene, path, finest = _trained_snapshot(demo_scene, tmp_path)
    run = tmp_path / "run"
    (run / "snapshots").mkdir(parents=True)
    inside = run / "snapshots" / "step_0000003.pt"
    path.rename(inside)
    (run / "config.json").write_text("{}")
    other = Trainer(_derived(encoding__n_features_per_level=4, network__n_neurons=32), scene)
    with pytest.raises(SnapshotError, match=rf"pass {re.escape(str(run / 'config.json'))} as --config, without"):
        other.load(inside)
    other.close()
