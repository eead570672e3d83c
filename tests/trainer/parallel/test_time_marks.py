"""Evaluations at fixed seconds of training (``training.eval_at_s``): each mark is taken once, at
the first check whose agreed training time reaches it (rank 0's), at the same step on every rank;
the checks fall at the records and, between them, at the step the pace predicts for the next
mark. The step durations come from a clock the test sets, so nothing here depends on the
machine's speed."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tests.support.ranks import run_ranks
from tests.support.scenes import tiny_config
from trainer.train.time_marks import TimeMarks

pytestmark = pytest.mark.timeout(120)

STEP_S = (0.2, 0.3)  # each rank's step time on the test's clock: rank 1 is the slower
MARKS_S = (3, 1)  # any order


def test_marks_are_taken_once_in_order_and_a_resumed_run_skips_those_behind_it():
    marks = TimeMarks([12, 4, 36])
    assert marks.pending and not marks.reached(3.9)
    assert marks.reached(4.0) and not marks.reached(11.0)
    assert marks.reached(40.0) and not marks.pending  # one record past two marks: one evaluation takes both
    resumed = TimeMarks([4, 12, 36], trained_s=12.0)
    assert resumed.ahead == [36.0] and not resumed.reached(20.0) and resumed.reached(36.5)
    assert not TimeMarks([]).pending
    assert TimeMarks([4, 12, 36]).past(12.0) == [12.0, 36.0] and TimeMarks([4]).past(None) == []


def test_the_next_check_falls_where_the_pace_reaches_the_next_mark_no_further_than_the_clock_has_run():
    marks = TimeMarks([4, 12], trained_s=1.0)
    marks.start(100)  # the clock starts at step 100, 1 s trained: the first check measures the pace
    assert marks.check_step == 101 and not marks.due(100) and marks.due(101)
    assert not marks.reached(1.5, 101) and marks.check_step == 102  # 0.5 s per step; 1 step measured: 1 on
    assert not marks.reached(2.0, 102) and marks.check_step == 104  # 4 steps to 4 s; 2 measured
    assert not marks.reached(3.0, 104) and marks.check_step == 106  # 2 steps to 4 s
    assert not marks.reached(3.9, 106) and marks.check_step == 107  # 0.1 s to go: at least one step on
    assert marks.reached(4.5, 107) and marks.check_step == 114  # 0.6 s per step: 13 steps to 12 s; 7 measured
    assert not marks.reached(8.7, 114) and marks.check_step == 120  # the slower of 0.6 (since 107) and 0.55
    assert marks.reached(12.0, 120) and marks.check_step is None and not marks.pending
    still = TimeMarks([4])
    still.start(0)
    assert not still.reached(0.0, 1) and still.check_step is None  # no pace: the records check alone


@pytest.mark.parametrize("base_s, slow_s, every", [(0.05, 0.35, 16), (0.02, 0.4, 8), (0.05, 1.0, 32)])
def test_slow_steps_at_intervals_do_not_make_a_mark_late_or_fold_two_into_one(base_s, slow_s, every):
    """Steps of ``base_s`` with a ``slow_s`` one every ``every`` (occupancy updates), checked only
    where the marks schedule (no records): each mark is taken by its own check within its second
    (reported at that whole second), at a few checks per mark."""
    marks = TimeMarks(range(1, 12))
    marks.start(0)
    time_s, taken, checks = 0.0, [], 0
    for step in range(1, 3000):
        time_s += slow_s if step % every == 0 else base_s
        if marks.due(step):
            checks += 1
            ahead = list(marks.ahead)
            if marks.reached(time_s, step):
                taken.append((time_s, [m for m in ahead if m not in marks.ahead]))
    assert [ms for _, ms in taken] == [[float(m)] for m in range(1, 12)]  # one check each
    assert [int(t) for t, _ in taken] == list(range(1, 12))  # each within its own second
    assert checks <= 6 * 11


def _fake_clock(step_s: float) -> None:
    import trainer.train.training_loop as loop

    clock = [0.0]

    def perf_counter() -> float:  # the loop reads the clock at a step's start and end: one step, step_s
        clock[0] += step_s
        return clock[0]

    loop.time = types.SimpleNamespace(perf_counter=perf_counter)


def _train_with_marks(trainer) -> dict:
    times: dict[int, float] = {}
    evaluated: list[int] = []
    evaluate = trainer.evaluate

    def recorded(*args, **kwargs):
        evaluated.append(trainer.step)
        return evaluate(*args, **kwargs)

    trainer.evaluate = recorded
    trainer.train(on_step=lambda step, train_time_s: times.__setitem__(step, train_time_s))
    return {"evaluated": evaluated, "times": times, "step": trainer.step}


def test_a_single_process_evaluates_at_the_first_step_past_each_mark_between_records(demo_scene, monkeypatch):
    import trainer.train.training_loop as loop
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    monkeypatch.setattr(loop, "time", loop.time)  # restored after the test
    _fake_clock(0.25)
    # records every 16 steps (4 s): both marks fall inside the first record interval
    cfg = tiny_config(training__n_steps=24, training__log_every=16, training__eval_at_s=[1, 3],
                      training__eval_every_max_images=1)
    trainer = Trainer(cfg, load_scene(demo_scene))
    out = _train_with_marks(trainer)
    trainer.close()
    times = out["times"]
    assert len(out["evaluated"]) == 2
    for mark, step in zip((1, 3), out["evaluated"]):
        assert times[step] >= mark > times[step - 1]  # the first step past the mark, not the next record


def test_a_mark_the_last_steps_before_the_time_budget_reach_is_taken_before_the_run_ends(demo_scene, monkeypatch):
    import trainer.train.training_loop as loop
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    monkeypatch.setattr(loop, "time", loop.time)  # restored after the test
    monkeypatch.setattr(TimeMarks, "due", lambda self, step: False)  # no check between records: the end must take it
    _fake_clock(0.25)
    cfg = tiny_config(training__n_steps=1000, training__log_every=100, training__eval_at_s=[1],
                      training__eval_every_max_images=1)
    trainer = Trainer(cfg, load_scene(demo_scene))
    out = {}
    evaluate = trainer.evaluate
    trainer.evaluate = lambda *a, **k: out.setdefault("at", (trainer.step, trainer.train_time_s)) and evaluate(*a, **k)
    trainer.train(time_budget_s=2.1)
    trainer.close()
    step, time_s = out["at"]  # evaluated once, at the step the budget stopped the run
    assert step == trainer.step < 100 and time_s >= 1.0


def _marks_rank(rank: int, world_size: int, scene: str) -> dict:
    from trainer.data import load_scene
    from trainer.parallel.trainer import DataParallelTrainer

    _fake_clock(STEP_S[rank])
    cfg = tiny_config(training__n_steps=16, training__log_every=8, training__eval_at_s=list(MARKS_S),
                      training__eval_every_max_images=1)
    trainer = DataParallelTrainer(cfg, load_scene(Path(scene)))
    out = _train_with_marks(trainer)
    trainer.close()
    return out


def test_ranks_take_each_mark_at_the_same_step_on_rank_0s_clock(demo_scene, tmp_path):
    results = run_ranks(_marks_rank, 2, tmp_path, str(demo_scene))
    assert results[0]["evaluated"] == results[1]["evaluated"] and len(results[0]["evaluated"]) == 2
    rank0, slower = results[0]["times"], results[1]["times"]
    for mark, step in zip(sorted(MARKS_S), results[0]["evaluated"]):
        # the first step rank 0's clock (its records', its checkpoints') reached it at: never below the mark
        assert rank0[step] >= mark > rank0[step - 1]
        assert slower[step - 1] >= mark  # rank 1's own clock had passed it a step earlier: rank 0's decided
