"""The step input prepared one step ahead (trainer.train.prefetch) changes nothing but timing."""

from __future__ import annotations

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.parallel.trainer import DataParallelTrainer
from trainer.train.loop import Trainer

STEPS = 28  # crosses occupancy updates at steps 0, 8, 16, 24 (tiny config) and the warm-up end


def _losses_and_state(cls, scene, prefetch: bool) -> tuple[list[float], list[int], dict[str, torch.Tensor]]:
    cfg = tiny_config(training__prefetch_march=prefetch, training__target_samples_per_step=2**15)
    trainer = cls(cfg, load_scene(scene))
    losses, rays = [], []
    for _ in range(STEPS):
        stats, loss, _ = trainer.train_step()
        losses.append(float(loss))
        rays.append(stats.n_rays)
    state = {k: v.clone() for k, v in trainer.field.state_dict().items()}
    trainer.close()
    return losses, rays, state


@pytest.mark.parametrize("cls", [Trainer, DataParallelTrainer], ids=["single", "data_parallel"])
def test_prefetched_training_is_bit_identical_to_marching_inside_the_step(demo_scene, cls):
    on_losses, on_rays, on_state = _losses_and_state(cls, demo_scene, prefetch=True)
    off_losses, off_rays, off_state = _losses_and_state(cls, demo_scene, prefetch=False)
    assert on_rays == off_rays
    assert on_losses == off_losses  # exact: the same draws in the same order
    assert on_state.keys() == off_state.keys()
    for name in on_state:
        assert torch.equal(on_state[name], off_state[name]), name
    assert len(set(on_rays)) > 1, "the batch size should have adapted during the run"


def test_no_prefetch_for_a_step_that_starts_with_an_occupancy_update(demo_scene):
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    every = trainer.cfg.training.occupancy_update_every
    for _ in range(every - 1):
        trainer.train_step()
    assert trainer.prefetcher.pending is not None  # step every-1 is prefetched
    trainer.train_step()
    assert trainer.step % every == 0
    assert trainer.prefetcher.pending is None  # the next step updates the grid first
    trainer.train_step()
    assert trainer.prefetcher.pending is not None
    trainer.close()


def test_a_prefetch_of_another_batch_size_is_rewound_and_redrawn(demo_scene):
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    trainer.train_step()
    pending = trainer.prefetcher.pending
    assert pending is not None and pending.n_rays == trainer.n_rays
    before = pending.rng_before
    # the wanted batch differs from the prefetched one: take refuses, the draws are rewound
    assert trainer.prefetcher.take(pending.n_rays + 64) is None
    assert trainer.prefetcher.pending is pending
    trainer.inputs.rewind()
    assert trainer.prefetcher.pending is None
    assert torch.equal(trainer.generator.get_state(), before["generator"])
    for name, value in trainer.sampler.rng_state().items():
        assert torch.equal(value, before["sampler"][name]), name
    # redrawn in line: the same rays as the prefetch had
    again = trainer.inputs.take(pending.n_rays)
    assert torch.equal(again.batch.rays_o, pending.batch.rays_o)
    assert torch.equal(again.samples.t, pending.samples.t)
    trainer.close()


def test_snapshot_state_is_that_of_the_step_boundary(demo_scene):
    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    for _ in range(3):
        trainer.train_step()
    pending = trainer.prefetcher.pending
    assert pending is not None
    state = trainer.state_dict()
    assert trainer.prefetcher.pending is None
    assert torch.equal(state["rng"]["generator"], pending.rng_before["generator"])
    trainer.close()
