"""The opacity term (``loss.alpha_weight``): its opacity is the compositing's, it adds to the loss of
the same prediction in the dynamic and the fixed-capacity step, pulls the accumulated opacity
towards the pixels' alpha, is off for a capture without alpha and refused in subgrid mode."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from tests.support.scenes import tiny_config
from trainer.contract.errors import ConfigError
from trainer.data import load_scene
from trainer.render.march import PackedSamples
from trainer.render.volrend import composite
from trainer.train.loop import Trainer
from trainer.train.phases import alpha_term


def _packed(counts: list[int], seed: int = 0) -> tuple[torch.Tensor, PackedSamples]:
    g = torch.Generator().manual_seed(seed)
    n_rays, total = len(counts), sum(counts)
    ray_indices = torch.repeat_interleave(torch.arange(n_rays), torch.tensor(counts))
    starts = torch.cumsum(torch.tensor([0] + counts[:-1]), 0)
    packed_info = torch.stack([starts, torch.tensor(counts)], 1)
    dt = torch.rand(total, generator=g) * 0.05
    t = torch.cumsum(dt, 0)
    samples = PackedSamples(torch.zeros(total, 3), torch.zeros(total, 3), t, dt, ray_indices, packed_info, n_rays)
    sigmas = torch.rand(total, generator=g) * 40
    return sigmas, samples


def test_the_opacity_is_the_compositings_and_the_term_its_squared_error_to_alpha():
    sigmas, samples = _packed([5, 0, 3, 7])
    alpha = torch.tensor([[1.0], [0.0], [0.25], [0.5]])
    rendered = composite(sigmas, torch.rand(sigmas.shape[0], 3), samples.dt, samples.ray_indices, 4)
    expected = ((rendered.opacity - alpha[:, 0]) ** 2).sum() * 0.5 / 4
    torch.testing.assert_close(alpha_term(sigmas, samples, alpha, None, 4, 0.5), expected)
    only = torch.tensor([True, False, False, True])  # rays left out of the batch add nothing
    expected_only = ((rendered.opacity - alpha[:, 0]) ** 2)[only].sum() * 0.5 / 4
    torch.testing.assert_close(alpha_term(sigmas, samples, alpha, only, 4, 0.5), expected_only)
    assert alpha_term(sigmas, samples, alpha, None, 4, 0.0) is None


def test_the_term_sends_its_gradient_to_the_densities_of_the_rays_it_counts():
    sigmas, samples = _packed([4, 4])
    sigmas.requires_grad_(True)
    alpha_term(sigmas, samples, torch.tensor([[0.0], [0.0]]), torch.tensor([True, False]), 2, 1.0).backward()
    assert (sigmas.grad[:4] > 0).all() and (sigmas.grad[4:] == 0).all()  # opacity above 0 pushed down


def _records(scene: Path, **overrides) -> tuple[list[dict], Trainer]:
    trainer = Trainer(tiny_config(training__n_steps=20, training__log_every=1, **overrides), load_scene(scene), None)
    records: list[dict] = []
    trainer.train(on_log=records.append)
    trainer.close()
    return records, trainer


@pytest.mark.parametrize("step", ["auto", "off"])  # the dynamic step on a CPU; fixed capacity, eager
def test_the_alpha_weight_adds_to_the_loss_of_the_same_prediction(demo_scene, step):
    plain, _ = _records(demo_scene, training__cuda_graphs=step)
    weighted, trainer = _records(demo_scene, training__cuda_graphs=step, loss__alpha_weight=2.0)
    assert trainer.alpha_weight == 2.0 and trainer.scene_choice.capture.kind == "object"
    from trainer.run.lifecycle import scene_model_text

    assert scene_model_text(trainer).endswith("; opacity term 2 (loss.alpha_weight)")
    assert plain[0]["train_psnr_db"] == pytest.approx(weighted[0]["train_psnr_db"], rel=1e-6)  # same render
    assert weighted[0]["loss"] > plain[0]["loss"] * 1.001
    assert all(math.isfinite(r["loss"]) for r in weighted) and len(weighted) == len(plain)


def _opacity_error(trainer: Trainer) -> float:
    """Mean squared error between the accumulated opacity and the alpha of 2048 training pixels."""
    batch = trainer.sampler.sample(2048)
    samples = trainer.march(batch.rays_o, batch.rays_d, jitter=False)
    with torch.no_grad():
        sigmas = trainer.field.density(samples.positions)
    return float(alpha_term(sigmas.float(), samples, batch.alpha, None, 2048, 1.0))


def test_a_heavy_alpha_weight_fits_the_opacity_closer(demo_scene):
    cfg = dict(training__n_steps=150, training__seed=5, training__background="white")
    plain = Trainer(tiny_config(**cfg), load_scene(demo_scene), None)
    plain.train()
    weighted = Trainer(tiny_config(loss__alpha_weight=10.0, **cfg), load_scene(demo_scene), None)
    weighted.train()
    assert _opacity_error(weighted) < 0.8 * _opacity_error(plain)


def test_a_capture_without_alpha_trains_without_the_term(demo_scene, tmp_path):
    copy = tmp_path / "scene"
    shutil.copytree(demo_scene, copy)
    for png in copy.rglob("*.png"):
        rgba = Image.open(png).convert("RGBA")
        Image.alpha_composite(Image.new("RGBA", rgba.size, (120, 130, 140, 255)), rgba).convert("RGB").save(png)
    trainer = Trainer(tiny_config(training__n_steps=4, loss__alpha_weight=2.0), load_scene(copy), None)
    assert trainer.alpha_weight == 0.0
    from trainer.run.lifecycle import scene_model_text

    assert scene_model_text(trainer).endswith("; loss.alpha_weight off: the images carry no alpha")


def test_subgrid_mode_refuses_the_term():
    with pytest.raises(ConfigError, match=r"loss\.alpha_weight: expected 0 in subgrid mode"):
        tiny_config(parallel__mode="subgrid", loss__alpha_weight=0.1)
