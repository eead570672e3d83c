"""training.appearance "affine": on a demo scene whose training images were exposed differently, the
learnt per-image colour maps recover the exposures, and evaluation reports the affine-fitted PSNR."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import pytest
from PIL import Image

from tests.support.scenes import tiny_config

#: Exposure of training image i: EXPOSURES[i % 3] (test views keep exposure 1).
EXPOSURES = (0.5, 0.75, 1.0)


def _exposed_demo_scene(root: Path) -> tuple[Path, dict[str, float]]:
    """The demo scene with the colour (not alpha) of each training image scaled by its exposure."""
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(root, resolution=32, n_train=12, n_val=1, n_test=2)
    frames = json.loads((scene / "transforms_train.json").read_text())["frames"]
    exposure = {}
    for i, frame in enumerate(frames):
        path = scene / (frame["file_path"] + ".png")
        rgba = np.asarray(Image.open(path).convert("RGBA")).astype(np.float64)
        rgba[..., :3] *= EXPOSURES[i % 3]
        Image.fromarray(np.round(rgba).astype(np.uint8), "RGBA").save(path)
        exposure[path.resolve().name] = EXPOSURES[i % 3]
    return scene, exposure


@pytest.mark.slow
def test_affine_appearance_learns_the_exposure_of_each_training_image(tmp_path: Path) -> None:
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    scene_dir, exposure = _exposed_demo_scene(tmp_path / "scene")
    # a black background: the exposure of a straight colour over black is exactly a colour map
    cfg = tiny_config(data__scene=str(scene_dir), training__appearance="affine", training__background="black",
                      training__n_steps=200)
    trainer = Trainer(cfg, load_scene(scene_dir), None)
    try:
        assert trainer.field.appearance.n_images == 12
        trainer.train(n_steps=200)
        # each map's response to grey light (row sums): the gain may sit partly off the diagonal
        gains = trainer.field.appearance.matrix.detach().cpu().numpy().sum(axis=2).mean(axis=1)
        by_exposure = {e: [] for e in EXPOSURES}
        for frame, gain in zip(trainer.train_frames, gains):
            by_exposure[exposure[frame.image_path.name]].append(gain)
        mean = {e: float(np.mean(g)) for e, g in by_exposure.items()}
        # the field's own brightness is free, so compare the images with one another (measured
        # 0.52 and 0.75 after 200 steps)
        assert mean[0.5] < mean[0.75] < mean[1.0], mean
        assert mean[0.5] / mean[1.0] == pytest.approx(0.5, abs=0.12), mean
        assert mean[0.75] / mean[1.0] == pytest.approx(0.75, abs=0.12), mean
        result = trainer.evaluate(save_renders=False)
    finally:
        trainer.close()
    assert result["mean_psnr_affine_db"] >= result["mean_psnr_db"] - 0.05
    assert all("psnr_affine_db" in image for image in result["images"])


def test_appearance_off_adds_nothing_to_the_field(demo_scene) -> None:
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    off = Trainer(tiny_config(data__scene=str(demo_scene)), load_scene(demo_scene), None)
    on = Trainer(tiny_config(data__scene=str(demo_scene), training__appearance="affine"), load_scene(demo_scene), None)
    try:
        assert off.field.appearance is None and off.field.appearance_parameters() == []
        assert on.field.n_params - off.field.n_params == 12 * len(on.train_frames)
        assert len(on.optimizer.param_groups) == 3 and on.optimizer.param_groups[2]["weight_decay"] == 0.0
        assert not any(k.startswith("appearance.") for k in off.field.state_dict())
    finally:
        off.close()
        on.close()


@pytest.mark.parametrize("cuda_graphs", ["dynamic", "off"])
def test_both_steps_train_the_colour_maps(demo_scene, cuda_graphs: str) -> None:
    """The dynamic step and the fixed-capacity step (run eagerly on the CPU) apply the maps in the loss."""
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    cfg = tiny_config(data__scene=str(demo_scene), training__appearance="affine", training__cuda_graphs=cuda_graphs,
                      training__n_steps=30)
    trainer = Trainer(cfg, load_scene(demo_scene), None)
    try:
        trainer.train(n_steps=30)
        moved = (trainer.field.appearance.matrix.detach() - torch.eye(3)).abs().amax(dim=(1, 2))
    finally:
        trainer.close()
    assert bool((moved > 1e-3).all()), moved  # every training image's map was trained
