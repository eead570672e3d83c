"""The distortion regulariser in the training steps: it adds to the first step's loss and nothing
to its prediction, in the dynamic and the fixed-capacity step, and training stays finite."""

from __future__ import annotations

import math

import pytest

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.train.loop import Trainer


def _records(scene, **overrides) -> list[dict]:
    trainer = Trainer(tiny_config(training__n_steps=20, training__log_every=1, **overrides), load_scene(scene), None)
    records: list[dict] = []
    trainer.train(on_log=records.append)
    trainer.close()
    return records


@pytest.mark.parametrize("step", ["auto", "off"])  # the dynamic step on a CPU; fixed capacity, eager
def test_the_distortion_weight_adds_to_the_loss_of_the_same_prediction(demo_scene, step):
    plain = _records(demo_scene, training__cuda_graphs=step)
    regularised = _records(demo_scene, training__cuda_graphs=step, loss__distortion_weight=1.0)
    assert plain[0]["train_psnr_db"] == pytest.approx(regularised[0]["train_psnr_db"], rel=1e-6)  # same render
    assert regularised[0]["loss"] > plain[0]["loss"] * 1.001
    assert all(math.isfinite(r["loss"]) for r in regularised) and len(regularised) == len(plain)
