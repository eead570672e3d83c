"""A finished training keeps its model whatever evaluation does, and eval.json says what it scored:
snapshot before evaluation, "trained; evaluation failed" with a non-zero exit, SSIM of views smaller
than its window, the mean PSNR with a perfect view, and held-out frames of a train-only scene."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.scenes import TINY
from trainer.contract.config import apply_overrides, config_to_dict, load_config


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(config_to_dict(apply_overrides(load_config(None), TINY))))
    return path


def _train(scene: Path, tmp_path: Path, *extra: str) -> tuple[int, Path]:
    from trainer.cli import build_parser, train_command

    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(scene), "--config", str(_config_file(tmp_path)),
                                      "--n-steps", "6", "--out", str(run), "--quiet", *extra])
    return train_command(args), run


def test_a_failed_evaluation_keeps_the_model_written_before_it(demo_scene, tmp_path, monkeypatch, capsys):
    from trainer.train.loop import Trainer
    from trainer.train.snapshot import load_snapshot

    snapshot = tmp_path / "run" / "snapshots" / "step_0000006.pt"
    seen_before_evaluation = []

    def failing(self, *args, **kwargs):
        seen_before_evaluation.append(snapshot.is_file())
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(Trainer, "evaluate", failing)
    code, run = _train(demo_scene, tmp_path)
    assert code == 2 and seen_before_evaluation == [True]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: trained; evaluation failed: RuntimeError: renderer exploded (the trained model "
                   f"(step 6) is in {snapshot}; --resume it with --n-steps 6 to evaluate later)"]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and status["snapshot"] == str(snapshot)
    assert load_snapshot(snapshot)["step"] == 6


def test_without_eval_the_final_snapshot_is_still_written(demo_scene, tmp_path):
    code, run = _train(demo_scene, tmp_path, "--no-eval")
    assert code == 0
    assert json.loads((run / "status.json").read_text())["snapshot"] == str(run / "snapshots" / "step_0000006.pt")


def test_small_views_of_a_train_only_scene_are_scored_on_held_out_frames_without_ssim(tmp_path):
    from trainer.data import load_scene
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=8, n_train=16, n_val=1, n_test=1)
    for split in ("val", "test"):
        (scene / f"transforms_{split}.json").unlink()
    loaded = load_scene(scene)
    assert loaded.held_out_every == 8 and len(loaded.frames("test")) == 2 and len(loaded.frames("train")) == 14
    assert any("every 8th training frame held out" in note for note in loaded.notes)
    assert load_scene(scene, holdout_every=0).split_counts == {"train": 16}

    code, run = _train(scene, tmp_path)  # 8 x 8 views: smaller than SSIM's 11 x 11 window
    assert code == 0
    evaluation = json.loads((run / "eval.json").read_text())
    assert evaluation["split"] == "test" and "every 8th frame held out" in evaluation["split_origin"]
    assert [im["ssim"] for im in evaluation["images"]] == [None, None] and evaluation["ssim_views"] == 0
    assert math.isfinite(evaluation["mean_psnr_db"])


def _strict_json(path: Path) -> dict:
    """``path`` read by a strict JSON parser (bare NaN / Infinity refused)."""
    return json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{path.name} holds a bare {name}"))


def test_means_without_a_value_are_null_with_a_reason_in_strict_json(tmp_path):
    from trainer.data.demo import write_demo_scene
    from trainer.contract.rundir import RunDir, json_ready

    scene = write_demo_scene(tmp_path / "scene", resolution=8, n_train=8, n_val=1, n_test=1)
    code, run = _train(scene, tmp_path)  # 8 x 8 views: no SSIM
    assert code == 0
    evaluation, status = _strict_json(run / "eval.json"), _strict_json(run / "status.json")
    reason = "no view of at least 11x11 pixels, SSIM's window"
    assert evaluation["mean_ssim"] is None and evaluation["null_reasons"]["mean_ssim"] == reason
    assert status["eval_ssim"] is None and status["null_reasons"] == {"eval_ssim": reason}
    # any other non-finite value of a run's JSON file: null and a reason by its dotted path
    RunDir(run).write_json(run / "x.json", {"a": {"psnr_db": math.inf}, "b": [1.0, math.nan]})
    assert _strict_json(run / "x.json") == {
        "a": {"psnr_db": None}, "b": [1.0, None],
        "null_reasons": {"a.psnr_db": "+inf: an exact match (zero error), which has no finite PSNR",
                         "b[1]": "not a number (NaN): the value is undefined for this run"}}
    assert json_ready([math.inf]) == [None]


def test_a_perfect_view_counts_at_the_cap_and_both_means_are_named():
    from trainer.train.evaluate import PSNR_CAP_DB, split_origin, summary_metrics
    from trainer.data.scene import Scene

    mse = 10 ** -2.181
    images = [{"mse": 0.0, "psnr_db": math.inf, "ssim": 1.0}, {"mse": mse, "psnr_db": 21.81, "ssim": 0.5}]
    summary = summary_metrics(images)
    assert summary["mean_psnr_db"] == pytest.approx((PSNR_CAP_DB + 21.81) / 2)
    assert summary["psnr_of_mean_mse_db"] == pytest.approx(-10 * math.log10(mse / 2))
    assert summary["psnr_cap_db"] == PSNR_CAP_DB and summary["mean_ssim"] == pytest.approx(0.75)
    assert "mean_psnr_db" in summary["metrics_note"] and "psnr_of_mean_mse_db" in summary["metrics_note"]
    scene = Scene(format="blender", root=Path("."), splits={"train": []}, aabb_scale=1)
    assert "not a test" in split_origin(scene, "train")
    assert split_origin(scene, "test") == "the scene's own test split"


def test_a_model_rendering_only_the_background_is_warned_about_and_a_trained_one_is_not(
        demo_scene, tmp_path, monkeypatch):
    import warnings

    import trainer.train.evaluate as evaluation

    (tmp_path / "healthy").mkdir()
    (tmp_path / "collapsed").mkdir()
    with warnings.catch_warnings(record=True) as healthy_warnings:
        warnings.simplefilter("always")
        code, run = _train(demo_scene, tmp_path / "healthy", "--n-steps", "20")  # past the 16 warm-up steps
    healthy = json.loads((run / "eval.json").read_text())
    assert code == 0 and healthy["background_collapse"] is None
    assert healthy["mean_psnr_db"] - healthy["background_psnr_db"] > 0.1
    assert not [w for w in healthy_warnings if "renders only the background" in str(w.message)]

    def background_only(trainer, rays_o, rays_d, background, *args, **kwargs):
        return background.expand(rays_o.shape[0], 3).clone()

    monkeypatch.setattr(evaluation, "render_rays", background_only)
    with pytest.warns(UserWarning, match="the model renders only the background") as collapsed_warnings:
        code, run = _train(demo_scene, tmp_path / "collapsed", "--n-steps", "20")
    collapsed = json.loads((run / "eval.json").read_text())
    assert code == 0
    assert collapsed["mean_psnr_db"] == pytest.approx(collapsed["background_psnr_db"], abs=1e-3)
    assert [im["background_psnr_db"] for im in collapsed["images"]] == [
        im["background_psnr_db"] for im in healthy["images"]]
    warning = [str(w.message) for w in collapsed_warnings if "renders only the background" in str(w.message)]
    assert warning == [collapsed["background_collapse"]]
    # images with alpha, trained on a random background already: that cure is not offered again
    assert "training.background" not in warning[0] and "optimizer.learning_rate" in warning[0]
    assert collapsed["collapse_cures"] in warning[0]


def test_an_rgb_capture_on_white_is_offered_cures_that_apply_to_it(tmp_path, monkeypatch):
    """The demo scene without alpha (flattened onto white: an object photographed on a white
    backdrop): a random background changes nothing for such images, so the cure is the backdrop's
    colour (or a matte), never training.background=random or a setting that does not exist."""
    import warnings

    from PIL import Image

    import trainer.train.evaluate as evaluation
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=16, n_train=8, n_val=1, n_test=2)
    for png in scene.rglob("*.png"):
        rgba = Image.open(png).convert("RGBA")
        Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB").save(png)

    def background_only(trainer, rays_o, rays_d, background, *args, **kwargs):
        return background.expand(rays_o.shape[0], 3).clone()

    monkeypatch.setattr(evaluation, "render_rays", background_only)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, run = _train(scene, tmp_path, "--n-steps", "20", "--cpu-threads", "1")
    assert code == 0
    warning = [str(w.message) for w in caught if "renders only the background" in str(w.message)]
    assert len(warning) == 1
    assert "training.background=white" in warning[0] and "no alpha channel" in warning[0]
    assert "training.background=random" not in warning[0] and "crop" not in warning[0]
    assert "optimizer.learning_rate" in warning[0]


def test_collapse_cures_follow_the_capture_and_the_run():
    from trainer.contract.evaluation import collapse_cures

    alpha = collapse_cures(has_alpha=True, background="white", backdrop=None)
    assert alpha.startswith("train with a random background (training.background=random)")
    assert "training.background" not in collapse_cures(has_alpha=True, background="random", backdrop=None)
    on_black = collapse_cures(has_alpha=False, background="random", backdrop="black")
    assert on_black.startswith("train against the images' black backdrop (training.background=black)")
    real_background = collapse_cures(has_alpha=False, background="random", backdrop=None)  # a photo's own surroundings
    assert "training.background" not in real_background and "alpha channel" in real_background
    assert "training.background" not in collapse_cures(has_alpha=False, background="white", backdrop="white")


def test_a_blank_render_within_the_occupancy_warm_up_is_no_collapse():
    from trainer.contract.evaluation import collapse_message

    assert collapse_message(12.0, 12.05, step=16, occupancy_warmup_steps=16) is None
    assert collapse_message(12.0, 12.05, step=17, occupancy_warmup_steps=16) is not None
    assert collapse_message(12.0, 12.2, step=17, occupancy_warmup_steps=16) is None
    assert collapse_message(float("nan"), 12.0, step=17, occupancy_warmup_steps=16) is None


def test_views_of_one_pixel_are_scored_without_an_affine_colour_map(tmp_path):
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=8, n_train=8, n_val=1, n_test=1)
    code, run = _train(scene, tmp_path, "--downscale", "8")  # 1 x 1 views: the affine map's 4 unknowns are not determined
    assert code == 0
    evaluation = _strict_json(run / "eval.json")
    assert [im["psnr_affine_db"] for im in evaluation["images"]] == [None]
    assert evaluation["mean_psnr_affine_db"] is None and math.isfinite(evaluation["mean_psnr_db"])
    assert evaluation["null_reasons"]["mean_psnr_affine_db"] == (
        "no view of at least 4 pixels, the affine colour map's fewest")
