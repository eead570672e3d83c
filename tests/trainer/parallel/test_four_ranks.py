"""The code paths of 4-rank jobs (what 4- and 8-GPU runs take) on 4 gloo processes (CPU), in one
spawn: a data-parallel step equals one process on the union of the ranks' rays, and subgrid
training with K=5 boxes (uneven ownership, box balancing on) equals the same boxes in one process.
The 3-rank paths are covered by test_checkpoint.py's resume of 2-rank data and subgrid runs on 3
ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rank_runs import assert_parity, parity_rank, parity_reference
from tests.support.ranks import run_ranks
from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.parallel.subgrid_train import SubgridTrainer

pytestmark = pytest.mark.timeout(150)

SUBGRID = dict(parallel__mode="subgrid", parallel__num_subgrids=5, parallel__balance_every=1,
               training__occupancy_warmup_steps=2, training__occupancy_update_every=1)
STEPS = 4


def _subgrid_losses(trainer: SubgridTrainer) -> list[float]:
    return [float(trainer.train_step()[1]) for _ in range(STEPS)]


def _four_ranks(rank: int, world_size: int, scene: str, parts: list) -> dict:
    data = parity_rank(rank, world_size, scene, parts)
    trainer = SubgridTrainer(tiny_config(**SUBGRID), load_scene(Path(scene)))
    initial = list(trainer.field.owners)
    losses = _subgrid_losses(trainer)
    out = {"data": data, "initial_owners": initial, "owners": list(trainer.field.owners), "losses": losses,
           "local": trainer.field.local_box_ids, "boxes": trainer.field.boxes}
    trainer.close()
    return out


def test_four_ranks_data_parallel_and_subgrid_equal_one_process(demo_scene, tmp_path):
    ref, ref_loss, initial, parts = parity_reference(demo_scene, 4)
    results = run_ranks(_four_ranks, 4, tmp_path, str(demo_scene), parts)
    assert_parity([r["data"] for r in results], ref, ref_loss, initial)
    ref.close()

    single = SubgridTrainer(tiny_config(**SUBGRID), load_scene(demo_scene))
    expected = _subgrid_losses(single)
    assert [r["initial_owners"] for r in results] == [[0, 0, 1, 2, 3]] * 4
    owners = results[0]["owners"]
    for rank, r in enumerate(results):
        assert r["owners"] == owners and r["boxes"] == single.field.boxes  # occupancy cut at step 2
        assert r["local"] == [k for k, o in enumerate(owners) if o == rank] and r["local"]
        assert r["losses"] == pytest.approx(expected, rel=1e-6, abs=0)
    single.close()
