"""Test-view evaluation with several renders per view (training.eval_spp) on the demo scene (CPU)."""

from __future__ import annotations

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.data.rays import camera_rays_for_image
from trainer.train.evaluate import render_rays
from trainer.train.loop import Trainer


@pytest.fixture(scope="module")
def trained(demo_scene):
    trainer = Trainer(tiny_config(training__eval_spp=4), load_scene(demo_scene), None)
    trainer.train(n_steps=30)
    yield trainer
    trainer.close()


def test_spp_renders_are_the_mean_of_jittered_renders_and_repeatable(trained):
    frame = trained.scene.frames("test")[0]
    rays_o, rays_d = camera_rays_for_image(frame, trained.device)
    background = torch.ones(3)
    single = render_rays(trained, rays_o, rays_d, background)
    generator = torch.Generator().manual_seed(5)
    averaged = render_rays(trained, rays_o, rays_d, background, spp=4, generator=generator)
    generator.manual_seed(5)
    by_hand = sum(_jittered(trained, rays_o, rays_d, background, generator) for _ in range(4)) / 4
    assert torch.allclose(averaged, by_hand, atol=1e-6)
    assert not torch.equal(averaged, single)  # the offsets do change the render ...
    assert float((averaged - single).abs().mean()) < 0.05  # ... by a little, on average


def _jittered(trainer, rays_o, rays_d, background, generator):
    """One render whose march offsets come from ``generator`` (the pieces of render_rays)."""
    from trainer.render.volrend import composite

    samples = trainer.march(rays_o, rays_d, jitter=True, generator=generator)
    with torch.no_grad():
        sigmas, rgbs = trainer.field(samples.positions, samples.directions)
        return composite(sigmas.float(), rgbs.float(), samples.dt, samples.ray_indices, rays_o.shape[0], background).rgb


def test_evaluation_with_spp_is_repeatable_and_leaves_training_draws_alone(trained):
    state = trained.generator.get_state()
    first = trained.evaluate(save_renders=False)
    second = trained.evaluate(save_renders=False)
    assert torch.equal(trained.generator.get_state(), state)
    assert first["mean_psnr_db"] == second["mean_psnr_db"]
    assert [im["psnr_db"] for im in first["images"]] == [im["psnr_db"] for im in second["images"]]


def test_bad_spp_is_refused(trained):
    from trainer.contract.errors import ConfigError

    with pytest.raises(ConfigError, match="training.eval_spp"):
        tiny_config(training__eval_spp=0)
    rays_o, rays_d = torch.zeros(2, 3), torch.tensor([[0.0, 0.0, 1.0]] * 2)
    with pytest.raises(ValueError, match="spp"):
        render_rays(trained, rays_o, rays_d, torch.ones(3), spp=0)
    with pytest.raises(ValueError, match="generator"):
        render_rays(trained, rays_o, rays_d, torch.ones(3), spp=2)


def test_eval_progress_is_called_after_each_scored_view(trained):
    calls = []
    trained.eval_progress = lambda done, total, image: calls.append((done, total, image["name"], image["psnr_db"]))
    try:
        result = trained.evaluate(split="test", max_images=3, save_renders=False, spp=1)
    finally:
        trained.eval_progress = None
    assert [(done, total) for done, total, _, _ in calls] == [(1, 3), (2, 3), (3, 3)]
    assert [(name, psnr) for _, _, name, psnr in calls] == [(im["name"], im["psnr_db"]) for im in result["images"]]


def test_batches_of_whole_rays_render_what_one_field_call_renders(trained):
    """The batched renderer and its slow twin (every sample of a chunk in one field call) agree."""
    from trainer.render.march import ray_batches
    from trainer.train.evaluate import render_ray_buffers

    frame = trained.scene.frames("test")[0]
    rays_o, rays_d = camera_rays_for_image(frame, trained.device)
    background = torch.ones(3)
    samples = trained.march(rays_o, rays_d, jitter=False)
    batches = ray_batches(samples, 1000)
    assert len(batches) > 2 and batches[0][0] == 0 and batches[-1][1] == samples.n_rays
    assert all(a[1] == b[0] for a, b in zip(batches, batches[1:]))
    counts = samples.packed_info[:, 1]
    assert all(int(counts[f:e].sum()) <= 1000 or e - f == 1 for f, e in batches)
    part = samples.rays(*batches[1])
    assert part.n_rays == batches[1][1] - batches[1][0] and int(part.ray_indices.min()) >= 0
    assert torch.equal(part.t, samples.t[samples.ray_indices >= batches[1][0]][: part.n_samples])
    whole = render_ray_buffers(trained, rays_o, rays_d, background, batch_samples=2**40)
    rays_done = []
    batched = render_ray_buffers(trained, rays_o, rays_d, background, batch_samples=1000, on_rays=rays_done.append)
    for a, b in zip(whole, batched):
        assert torch.allclose(a, b, atol=1e-5)
    assert sum(rays_done) == rays_o.shape[0]
    with pytest.raises(ValueError, match="max_samples must be >= 1"):
        ray_batches(samples, 0)
