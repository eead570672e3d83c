"""Subgrid model-parallel training (trainer/parallel/subgrid_train.py) on 2 gloo ranks (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.parallel.test_dp_training import run_ranks
from tests.train.conftest import demo_scene, tiny_config  # noqa: F401  (demo_scene: fixture)
from trainer.data import load_scene
from trainer.errors import ConfigError
from trainer.parallel.subgrid_train import SubgridTrainer
from trainer.rundir import RunDir
from trainer.schema import read_metrics

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


def test_fewer_boxes_than_ranks_is_a_config_error(demo_scene):
    from trainer.parallel.trainer import validate_parallel_config

    with pytest.raises(ConfigError, match=r"^parallel\.num_subgrids: .*got 2"):
        validate_parallel_config(tiny_config(parallel__mode="subgrid", parallel__num_subgrids=2), 3)
