"""A trained run's scene reloaded by render, export or view: the warning about frames skipped for
missing image files was given when the run trained, and is given again only when another number
of frames is missing now."""

from __future__ import annotations

import json
import warnings

from tests.support.scene_formats import write_ngp
from tests.support.scenes import tiny_config_file
from trainer.data import SkippedFramesWarning


def _skipped_warnings(path, **kwargs) -> list[str]:
    from trainer.inference.loading import load_model

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(path, **kwargs).trainer.close()
    return [str(w.message) for w in caught if issubclass(w.category, SkippedFramesWarning)]


def test_a_reloaded_scene_warns_of_skipped_frames_only_when_more_are_missing(ring, tmp_path, capsys):
    from trainer.cli import build_parser, train_command

    scene = tmp_path / "scene"
    transforms = write_ngp(scene, ring)
    data = json.loads(transforms.read_text())
    for frame in data["frames"]:
        frame["sharpness"] = 100.0  # instant-ngp skips (not refuses) missing images of such files
    transforms.write_text(json.dumps(data))
    (scene / "images" / "003.png").unlink()
    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "4", "--no-eval", "--quiet", "--out", str(run)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_command(args) == 0
    assert [w for w in caught if issubclass(w.category, SkippedFramesWarning)]  # training says it
    assert json.loads((run / "status.json").read_text())["skipped_frames"] == 1
    snapshot = next((run / "snapshots").glob("step_*.pt"))

    assert _skipped_warnings(run) == []  # the run folder
    assert _skipped_warnings(snapshot) == []  # a snapshot inside it
    (scene / "images" / "005.png").unlink()
    said = _skipped_warnings(run)
    assert len(said) == 1 and "skipping 2 frames whose image file is missing" in " ".join(said[0].split()), said
    loose = tmp_path / "loose.pt"  # a snapshot outside any run folder: no record, so the warning stays
    loose.write_bytes(snapshot.read_bytes())
    (scene / "images" / "007.png").unlink()
    assert len(_skipped_warnings(loose, scene_path=scene)) == 1
    capsys.readouterr()
