"""training.compact_samples in the single-process trainer (CPU): a step on the compacted batch
trains exactly as a step on every marched sample with early-stopped compositing, and the rays per
step are then sized on the kept count, so a step holds more rays."""

from __future__ import annotations

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.train.loop import Trainer


def _opaque_trainer(scene_path, compact: bool) -> Trainer:
    """A trainer whose field is dense enough everywhere that rays stop early (T < 1e-4)."""
    trainer = Trainer(tiny_config(training__compact_samples=compact, training__occupancy_warmup_steps=4,
                                  training__prefetch_march=False), load_scene(scene_path), None)
    with torch.no_grad():
        trainer.field.encoding.table.fill_(0.5)
        trainer.field.density_mlp.linears[0].weight.abs_()
        trainer.field.density_mlp.linears[1].weight[0].fill_(0.35)
    return trainer


def test_a_compacted_step_equals_an_early_stopped_step_on_every_sample(demo_scene):
    plain, compact = _opaque_trainer(demo_scene, False), _opaque_trainer(demo_scene, True)
    stats_plain, loss_plain, _ = plain.train_step()
    stats_compact, loss_compact, _ = compact.train_step()
    (rays, kept_copy), = compact.batch_sizing.kept_pending
    n_kept = int(kept_copy.value())
    assert rays == stats_plain.n_rays == stats_compact.n_rays
    # the first compacted batch holds as many samples as were marched (no kept count read yet) ...
    assert stats_compact.n_samples == stats_plain.n_samples
    # ... and this field stops most rays early, so far fewer were kept
    assert 0 < n_kept < 0.7 * stats_plain.n_samples, (n_kept, stats_plain.n_samples)
    assert torch.allclose(loss_compact, loss_plain, rtol=1e-5, atol=1e-8)
    for (name, p), q in zip(plain.field.named_parameters(), compact.field.parameters()):
        assert p.grad is not None and q.grad is not None, name
        scale = float(p.grad.abs().max())
        assert float((p.grad - q.grad).abs().max()) <= 1e-4 * scale + 1e-12, name
    plain.close()
    compact.close()


def test_rays_per_step_are_sized_on_the_kept_count(demo_scene):
    plain, compact = _opaque_trainer(demo_scene, False), _opaque_trainer(demo_scene, True)
    for trainer in (plain, compact):
        for _ in range(6):
            trainer.train_step()
    target = compact.cfg.training.target_samples_per_step
    # the compacted trainer reads each kept count one step late and sizes on it
    assert len(compact.batch_sizing.kept_pending) == 1
    assert compact.samples_per_ray_ema < 0.7 * plain.samples_per_ray_ema
    assert compact.n_rays > 1.3 * plain.n_rays
    stats, _, _ = compact.train_step()
    # once sized, a batch holds about the target (a multiple of 256, at most the marched count)
    assert stats.n_samples % 256 == 0 or stats.n_samples < target
    assert stats.n_samples <= 1.5 * target
    n_rays = compact.n_rays
    state = compact.state_dict()  # a snapshot saves the pending count and leaves it pending
    (rays, kept_copy), = compact.batch_sizing.kept_pending
    assert state["trainer_state"]["kept_pending"] == [[rays, int(kept_copy.value())]]
    assert state["trainer_state"]["n_rays"] == compact.n_rays == n_rays
    plain.close()
    compact.close()


@pytest.mark.parametrize("compact", [True, False])
def test_training_with_and_without_compaction_lowers_the_loss(demo_scene, compact):
    trainer = Trainer(tiny_config(training__compact_samples=compact), load_scene(demo_scene), None)
    first = [float(trainer.train_step()[1]) for _ in range(3)]
    for _ in range(40):
        trainer.train_step()
    last = [float(trainer.train_step()[1]) for _ in range(3)]
    trainer.close()
    assert sum(last) < 0.7 * sum(first), (first, last)


def test_a_snapshot_neither_changes_the_run_nor_loses_the_pending_count(demo_scene, tmp_path):
    """Resume reproduces the run that never stopped: taking the snapshot does not settle the kept
    count still in flight (that would resize the rays early), and the resumed run settles it when
    the uninterrupted one does. Snapshot after the first step, whose count sizes the third."""
    overrides = dict(training__target_samples_per_step=2**15, training__prefetch_march=False)

    def run(steps: int, save: bool) -> tuple[Trainer, list[float], list[int]]:
        trainer = Trainer(tiny_config(**overrides), load_scene(demo_scene), None)
        trainer.train(n_steps=1)
        if save:
            trainer.save(tmp_path / "snap.pt")
        losses, rays = [], []
        for _ in range(steps):
            stats, loss, _ = trainer.train_step()
            losses.append(float(loss))
            rays.append(stats.n_rays)
        return trainer, losses, rays

    straight, losses, rays = run(3, save=False)
    assert rays[0] < rays[1], rays  # the ray count does move here
    snapped, losses_snapped, rays_snapped = run(3, save=True)
    assert rays_snapped == rays and losses_snapped == pytest.approx(losses, rel=1e-6, abs=1e-9)
    resumed = Trainer(tiny_config(**overrides), load_scene(demo_scene), None)
    resumed.load(tmp_path / "snap.pt")
    pending = [(rays_, int(kept.value())) for rays_, kept in resumed.batch_sizing.kept_pending]
    assert len(pending) == 1
    steps = [resumed.train_step() for _ in range(3)]
    assert [s.n_rays for s, _, _ in steps] == rays
    assert [float(loss) for _, loss, _ in steps] == pytest.approx(losses, rel=1e-6, abs=1e-9)
    # loading into a trainer that has trained forgets its own pending count
    snapped.load(tmp_path / "snap.pt")
    assert [(rays_, int(kept.value())) for rays_, kept in snapped.batch_sizing.kept_pending] == pending
    assert [snapped.train_step()[0].n_rays for _ in range(3)] == rays
    for trainer in (straight, snapped, resumed):
        trainer.close()
