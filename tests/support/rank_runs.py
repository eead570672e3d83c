"""Training runs on W gloo ranks that several tests share: the data-parallel parity step (one step
on W ranks against one process on all their rays), the subgrid run whose boxes move away from a
slow rank, and its resume on three ranks. Each ``*_rank`` function runs in a spawned process
through :func:`tests.support.ranks.run_ranks`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.contract.rundir import RunDir
from trainer.parallel.subgrid_train import SubgridTrainer
from trainer.parallel.trainer import DataParallelTrainer

# Adam's first update is lr·g/(|g| + ε), a sign function of g for the default ε = 1e-15; gradients
# that differ only by summation order would flip the sign of near-zero entries. A larger ε makes
# the update continuous in g, so parameters can be compared with a float tolerance.
PARITY = dict(training__background="white", training__subpixel_jitter=False, optimizer__epsilon=1e-4)


def no_jitter(trainer) -> None:
    march = trainer.march
    trainer.march = lambda o, d, jitter: march(o, d, jitter=False)


def parity_rank(rank: int, world_size: int, scene: str, batches: list, extra: dict | None = None) -> dict:
    trainer = DataParallelTrainer(tiny_config(**PARITY, **(extra or {})), load_scene(Path(scene)))
    no_jitter(trainer)
    trainer.inputs.draw_batch = lambda n: batches[rank]
    stats, loss, _ = trainer.train_step()
    out = {
        "params": {k: p.detach().clone() for k, p in trainer.field.named_parameters()},
        "grads": {k: p.grad.clone() for k, p in trainer.field.named_parameters() if p.grad is not None},
        "loss": float(loss),
        "n_rays": stats.n_rays,
        "grid": trainer.grid.density.clone(),
    }
    trainer.close()
    return out


def parity_reference(scene: Path, world_size: int, n_rays: int = 64, extra: dict | None = None):
    """One data-parallel step in one process on ``n_rays`` rays (the first step's global rays),
    and those rays cut into ``world_size`` equal consecutive parts for the ranks (``extra``: more
    config overrides, given to :func:`parity_rank` too).

    Returns:
        (reference trainer after its step, its loss, its parameters before the step, the parts).
    """
    ref = DataParallelTrainer(tiny_config(**PARITY, **(extra or {})), load_scene(scene))
    no_jitter(ref)
    batch = ref.sampler.sample(n_rays)
    size = n_rays // world_size
    parts = [type(batch)(*(getattr(batch, f)[r * size : (r + 1) * size]
                           for f in ("rays_o", "rays_d", "rgb", "alpha", "image_index")))
             for r in range(world_size)]
    ref.inputs.draw_batch = lambda n: batch
    initial = {k: p.detach().clone() for k, p in ref.field.named_parameters()}
    _, ref_loss, _ = ref.train_step()
    return ref, float(ref_loss), initial, parts


def assert_parity(results: list[dict], ref, ref_loss: float, initial: dict) -> None:
    """Every rank ends with the same parameters and gradients, equal (to float tolerance) to the
    single process that saw the union of their rays, and the same global loss."""
    size = ref.cfg.training.initial_rays_per_step // len(results)
    assert [r["n_rays"] for r in results] == [size] * len(results)
    for name, p in ref.field.named_parameters():
        for other in results[1:]:
            assert torch.equal(results[0]["params"][name], other["params"][name]), name
            assert torch.equal(results[0]["grads"][name], other["grads"][name]), name
        torch.testing.assert_close(results[0]["grads"][name], p.grad, rtol=1e-4, atol=1e-9)
        torch.testing.assert_close(results[0]["params"][name], p.detach(), rtol=1e-5, atol=1e-6)
        assert not torch.equal(p.detach(), initial[name]), f"{name} did not change"
    for r in results:
        assert torch.equal(r["grid"], ref.grid.density)
        assert r["loss"] == results[0]["loss"]
    assert results[0]["loss"] == pytest.approx(ref_loss, rel=1e-5)


# ---------------------------------------------------------------------------- box moves (K=4 on 2 ranks)

BALANCED = dict(parallel__mode="subgrid", parallel__num_subgrids=4, parallel__balance_every=2,
                training__occupancy_warmup_steps=4, training__occupancy_update_every=2, training__n_steps=12,
                training__log_every=1)
SLOW_RANK_1 = dict(faults__compute_slowdown=4.0, faults__ranks=[1])


def balance_rank(rank: int, world_size: int, scene: str, run_dir: str) -> dict:
    trainer = SubgridTrainer(tiny_config(**BALANCED, **SLOW_RANK_1), load_scene(Path(scene)), RunDir(run_dir))
    initial = list(trainer.field.owners)
    trainer.train()
    trainer.save_checkpoint()
    out = {"initial_owners": initial, "owners": list(trainer.field.owners), "boxes": trainer.field.boxes,
           "local": trainer.field.local_box_ids, "moves": trainer.box_balancer.moves_made, "step": trainer.step,
           "optimised": sorted(trainer.named_parameters_for_optimizer())}
    trainer.close()
    out["data"] = data_balance_rank(rank, world_size, scene)  # same spawn: processes are the slow part
    return out


DATA_BALANCED = dict(parallel__balance_every=5, training__n_steps=50)
SLOW_TWICE = dict(faults__compute_slowdown=2.0, faults__ranks=[1])


def data_balance_rank(rank: int, world_size: int, scene: str) -> dict:
    """Data parallel, rank 1 twice as slow: 50 steps with a balancing round every 5."""
    from trainer.parallel.trainer import DataParallelTrainer

    trainer = DataParallelTrainer(tiny_config(**DATA_BALANCED, **SLOW_TWICE), load_scene(Path(scene)))
    rays = [trainer.train_step()[0].n_rays for _ in range(50)]
    trainer.stepper.settle()
    out = {"shares": trainer.balancer.shares, "rounds": trainer.balancer.rounds, "rays": rays,
           "last_imbalance": trainer.balancer.last_imbalance, "param0": next(trainer.field.parameters()).detach().clone()}
    trainer.close()
    return out


def resume_subgrid_on_three(rank: int, world_size: int, scene: str, run_dir: str) -> dict:
    """On 3 ranks: resume the 2-rank balanced run's last checkpoint and train 2 steps (used by
    test_checkpoint.py's 2 → 3 test, which resumes data and subgrid runs in one spawn)."""
    trainer = SubgridTrainer(tiny_config(**BALANCED), load_scene(Path(scene)))
    trainer.load_checkpoint(Path(run_dir))
    out = {"start": trainer.step, "n_rays": trainer.n_rays, "boxes": trainer.field.boxes,
           "owners": list(trainer.field.owners), "local": trainer.field.local_box_ids, "losses": []}
    for _ in range(2):
        _, loss, _ = trainer.train_step()
        out["losses"].append(float(loss))
    out["step"] = trainer.step
    trainer.close()
    return out
