"""Fixtures shared by several test modules of tests/trainer/parallel (session-scoped: multi-process runs
are the slow part of the suite, so each is made once)."""

from __future__ import annotations

import pytest

from tests.support.scenes import tiny_config


@pytest.fixture(scope="session")
def balanced_run(demo_scene, tmp_path_factory) -> dict:
    """Subgrid K=4 on 2 ranks with rank 1 four times slower (tests.support.rank_runs.BALANCED): boxes
    re-cut by occupancy at step 4, moved from step 5 on, 12 steps, a checkpoint at the end; and the
    same config in one process (owning every box, moving none), continued for 2 more steps.

    Returns:
        ``run`` (the 2-rank run directory), ``ranks`` (per-rank results of ``balance_rank``),
        ``single`` (the one-process run: ``boxes``, ``volume_boxes`` (equal-volume cut), ``n_rays``
        at step 12, ``next_losses`` of steps 13-14).
    """
    from tests.support.ranks import run_ranks
    from tests.support.rank_runs import BALANCED, balance_rank
    from trainer.data import load_scene
    from trainer.parallel.partition import split_boxes
    from trainer.parallel.subgrid_train import SubgridTrainer
    from trainer.contract.rundir import RunDir

    tmp = tmp_path_factory.mktemp("balanced")
    ranks = run_ranks(balance_rank, 2, tmp, str(demo_scene), str(tmp / "run"))
    single = SubgridTrainer(tiny_config(**BALANCED), load_scene(demo_scene), RunDir(tmp / "one"))
    single.train()
    facts = {"boxes": single.field.boxes, "volume_boxes": split_boxes(single.aabb.cpu(), None, 4),
             "n_rays": single.n_rays, "metrics_dir": tmp / "one"}  # metrics.jsonl of steps 1-12
    facts["next_losses"] = [float(single.train_step()[1]) for _ in range(2)]  # the uninterrupted run
    single.close()
    return {"run": tmp / "run", "ranks": ranks, "single": facts}
