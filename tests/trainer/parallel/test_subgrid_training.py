"""Subgrid model-parallel training (trainer/parallel/subgrid_train.py) on 2 gloo ranks (CPU): boxes
re-cut by occupancy, box moves away from a slow rank, resume on one process. Resuming on 3 ranks
is in test_checkpoint.py (one spawn with the data-parallel case)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.ranks import run_ranks
from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.parallel.subgrid_train import SubgridTrainer
from trainer.contract.rundir import RunDir
from trainer.contract.metrics import read_metrics

pytestmark = pytest.mark.timeout(120)

SUBGRID = dict(parallel__mode="subgrid", parallel__num_subgrids=2, training__n_steps=6)


def _train_rank(rank: int, world_size: int, scene: str, run_dir: str) -> dict:
    trainer = SubgridTrainer(tiny_config(**SUBGRID), load_scene(Path(scene)), RunDir(run_dir))
    before = {k: v.clone() for k, v in trainer.named_model_tensors().items()}
    trainer.train()
    result = trainer.evaluate(max_images=1)
    trainer.save_checkpoint()
    out = {
        "boxes": trainer.field.local_box_ids,
        "before": before,
        "after": {k: v.clone() for k, v in trainer.named_model_tensors().items()},
        "eval": result,
        "grid": trainer.grid.density.clone(),
        "step": trainer.step,
    }
    trainer.close()
    return out


def test_two_boxes_on_two_ranks_train_evaluate_and_resume_on_one(demo_scene, tmp_path):
    run = tmp_path / "run"
    results = run_ranks(_train_rank, 2, tmp_path, str(demo_scene), str(run))
    assert [r["boxes"] for r in results] == [[0], [1]]
    for r in results:
        assert r["step"] == 6
        assert all(k.startswith(f"boxes.{r['boxes'][0]}.") for k in r["after"])
        assert any(not torch.equal(r["before"][k], v) for k, v in r["after"].items())  # trained
    assert torch.equal(results[0]["grid"], results[1]["grid"])  # the shared occupancy grid
    evaluation = json.loads((run / "eval.json").read_text())
    assert evaluation == results[1]["eval"] and len(evaluation["images"]) == 1
    assert evaluation["mean_psnr_db"] > 5.0
    rank0 = read_metrics(run / "metrics.jsonl")
    rank1 = read_metrics(run / "metrics.rank1.jsonl")
    assert [r["step"] for r in rank0] == [5, 6] and rank0[0]["loss"] == rank1[0]["loss"]
    assert rank0[0]["samples_per_step"] == rank1[0]["samples_per_step"]  # the same rays on both

    # 2 -> 1: both boxes now on rank 0, each loaded from its own keys
    single = SubgridTrainer(tiny_config(**SUBGRID), load_scene(demo_scene), RunDir(tmp_path / "one"))
    assert single.field.local_box_ids == [0, 1]
    single.load_checkpoint(run)
    assert single.step == 6
    loaded = single.named_model_tensors()
    for r in results:
        for key, value in r["after"].items():
            assert torch.equal(loaded[key], value), key
    stats, loss, _ = single.train_step()
    assert single.step == 7 and torch.isfinite(loss) and stats.n_samples > 0
    single.close()


# ---------------------------------------------------------------------------- re-cut by occupancy


def test_recut_puts_the_cut_where_the_occupied_cells_are(demo_scene):
    from trainer.render.occupancy import pack_bits

    trainer = SubgridTrainer(tiny_config(parallel__mode="subgrid", parallel__num_subgrids=2), load_scene(demo_scene))
    grid = trainer.grid
    assert trainer.aabb.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]] and grid.cascades == 1
    assert [b.hi[0] for b in trainer.field.boxes] == [0.5, 1.0]  # equal volumes before any occupancy
    old_params = {id(p) for p in trainer.optimizer.param_groups[0]["params"]}
    res = grid.resolution
    x = torch.arange(res**3) % res  # cell order x + y·R + z·R²
    occupied = (x < res // 4).unsqueeze(0)  # all occupied mass in x < 1/4
    grid.bitfield.copy_(pack_bits(occupied))
    boxes = trainer.recut_boxes()
    # x is the longest axis on ties (the lowest): the median of the occupied slab x ∈ [0, 1/4)
    assert boxes[0].lo == (0.0, 0.0, 0.0) and boxes[0].hi == pytest.approx((0.125, 1.0, 1.0), abs=1e-12)
    assert boxes[1].lo == pytest.approx((0.125, 0.0, 0.0), abs=1e-12) and boxes[1].hi == (1.0, 1.0, 1.0)
    assert trainer.field.boxes == boxes and trainer.field.local_box_ids == [0, 1]
    new_params = [p for g in trainer.optimizer.param_groups for p in g["params"]]
    assert not old_params & {id(p) for p in new_params}  # fresh fields, fresh optimiser
    assert {id(p) for p in new_params} == {id(p) for p in trainer.field.parameters()}
    stats, loss, _ = trainer.train_step()
    assert stats.n_samples > 0 and torch.isfinite(loss)
    trainer.close()


# ---------------------------------------------------------------------------- box moves (K=4 on 2 ranks)

def test_a_slow_rank_hands_boxes_over_and_training_stays_exact(balanced_run):
    run, results, single = balanced_run["run"], balanced_run["ranks"], balanced_run["single"]
    assert [r["initial_owners"] for r in results] == [[0, 0, 1, 1]] * 2
    assert [r["step"] for r in results] == [12, 12]
    owners = results[0]["owners"]
    assert results[1]["owners"] == owners and results[0]["moves"] == results[1]["moves"] >= 1
    assert owners.count(1) == 1 and owners.count(0) == 3  # the slow rank keeps one box
    for rank, r in enumerate(results):
        assert r["local"] == [k for k, o in enumerate(owners) if o == rank]
        assert {name.split(".")[1] for name in r["optimised"]} == {str(k) for k in r["local"]}
    # re-cut by occupied cells at the end of the warm-up: the same boxes as the single process
    assert results[0]["boxes"] == results[1]["boxes"] == single["boxes"]
    assert results[0]["boxes"] != single["volume_boxes"]
    rank0 = read_metrics(run / "metrics.jsonl", require_contiguous_steps=True)
    rank1 = read_metrics(run / "metrics.rank1.jsonl", require_contiguous_steps=True)
    reference = read_metrics(single["metrics_dir"] / "metrics.jsonl")
    assert [r["step"] for r in rank0] == [r["step"] for r in reference] == list(range(1, 13))
    # moving boxes (parameters + Adam state) changes nothing in the arithmetic
    for mine, theirs, ref in zip(rank0, rank1, reference):
        assert mine["loss"] == theirs["loss"] and math.isfinite(mine["loss"])
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-6, abs=0)
        assert mine["imbalance"] >= 1.0 and mine["world_size"] == 2
    meta = json.loads((run / "checkpoints" / "step_0000012" / "meta.json").read_text())
    assert meta["owners"] == owners and meta["box_balancer"]["moves_made"] == results[0]["moves"]
