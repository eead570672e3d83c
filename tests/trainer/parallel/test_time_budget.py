"""A time budget on several ranks: the ranks agree at the same steps (rarely far from the budget,
at every step near it) on the slowest rank's projected training time, and all stop at the same
step, within one step of the budget. The step durations come from a clock the test sets (each
rank's steps take a fixed time), so nothing here depends on the machine's speed."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tests.support.ranks import run_ranks
from tests.support.scenes import tiny_config
from trainer.train.budget import BudgetAgreement

pytestmark = pytest.mark.timeout(120)

STEP_S = (0.2, 0.3)  # each rank's step time on the test's clock: rank 1 is the slowest
BUDGET_S = 5.05


def test_the_next_check_comes_before_the_budget_can_be_reached():
    agreement = BudgetAgreement(every=10)
    assert agreement.due(0) and not agreement.decide(0, None, 5.0) and agreement.next_check == 1
    assert not agreement.decide(1, (1, 0.9, 0.3), 5.0) and agreement.next_check == 11  # 13 steps fit: at most 10
    assert not agreement.due(10) and agreement.due(11)
    assert not agreement.decide(11, (11, 3.9, 0.3), 5.0) and agreement.next_check == 14  # 3 steps surely fit
    assert not agreement.decide(14, (14, 4.8, 0.3), 5.0) and agreement.next_check == 15  # none: every step
    assert agreement.decide(15, (15, 5.1, 0.3), 5.0)  # the next step would end past the budget
    late = BudgetAgreement(every=10)  # values agreed a check earlier (NCCL) are carried forward
    assert late.decide(15, (14, 4.8, 0.3), 5.0) and not late.decide(15, (14, 4.6, 0.3), 5.0)
    assert not late.decide(20, (20, 1.0, 0.0), 5.0) and late.next_check == 21  # no step timed yet: check again


def _budget_rank(rank: int, world_size: int, scene: str) -> dict:
    import trainer.train.training_loop as loop
    from trainer.data import load_scene
    from trainer.parallel.trainer import DataParallelTrainer

    clock = [0.0]

    def perf_counter() -> float:  # the loop reads the clock at a step's start and end: one step, STEP_S
        clock[0] += STEP_S[rank]
        return clock[0]

    loop.time = types.SimpleNamespace(perf_counter=perf_counter)
    trainer = DataParallelTrainer(tiny_config(training__n_steps=1000, training__log_every=1000), load_scene(Path(scene)))
    checks = []
    decide = trainer.budget_agreement.decide

    def counted(step, agreed, budget_s):
        checks.append(step)
        return decide(step, agreed, budget_s)

    trainer.budget_agreement.decide = counted
    trainer.train(time_budget_s=BUDGET_S)
    out = {"step": trainer.step, "train_time_s": trainer.train_time_s, "checks": checks}
    trainer.close()
    return out


def test_ranks_stop_at_the_same_step_within_one_step_of_the_budget(demo_scene, tmp_path):
    results = run_ranks(_budget_rank, 2, tmp_path, str(demo_scene))
    assert results[0]["step"] == results[1]["step"] == 16  # the slowest rank: 16 steps of 0.3 s fit in 5.05 s
    slowest = results[1]["train_time_s"]
    assert slowest <= BUDGET_S < slowest + STEP_S[1]  # stopped within one step of the budget
    assert results[0]["checks"] == results[1]["checks"]  # the collective at the same steps on every rank
    assert len(results[0]["checks"]) < results[0]["step"] / 2  # not at every step: rarely far from the budget
