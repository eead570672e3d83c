"""``ngptune train-many`` on the console: a job an earlier run finished is said once, in one line
under 80 columns; a job that ran gets its row's final state."""

from __future__ import annotations

import io

from ngptune.progress import RunsProgress
from ngptune.train_many import JobResult
from ngptune.train_many_command import job_done


def _result(**fields) -> JobResult:
    base = dict(scene="/data/seq/0000", gpus="cpu", steps=2000, train_time_s=123.4, psnr_db=23.4, status="completed",
                log_path="runs/seq/0000/logs/train.log", run_dir="runs/seq/0000", warm_started_from="")
    return JobResult(**{**base, **fields})


def test_a_skipped_job_is_said_once_in_one_line():
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    job_done(board, "0000-scene", _result(finished_at="2026-12-02T10:11:12+01:00", skipped_at="2026-12-03T09:00:00+01:00",
                                          reason="skipped: finished by an earlier run at 2026-12-02T10:11:12 (step "
                                                 "2000); remove runs/seq/0000/job.json to train it again"))
    lines = out.getvalue().splitlines()
    assert lines == ["0000-scene: skipped, finished earlier (step 2000, 2026-12-02T10:11:12+01:00)"]  # was two
    assert len(lines[0]) <= 79


def test_a_job_that_ran_ends_its_row():
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    job_done(board, "0001", _result())
    job_done(board, "0002", _result(status="failed", steps=None, reason="scene path does not exist"))
    assert out.getvalue().splitlines() == ["0001: completed at step 2000", "0002: failed: scene path does not exist",
                                           "0002: failed"]


def test_a_finished_job_s_last_piped_line_has_its_final_step():
    """Piped, the last look at a job's progress may be a few steps short of its end (step 90 of
    100): its final line takes the step from the job's status."""
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    board.update("0003", None, total=100)
    board.update("0003", {"step": 90, "total": 100, "wall_time_s": 9.0}, total=100)
    job_done(board, "0003", _result(steps=100))
    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("0003: step 90/100, ") and lines[-1] == "0003: completed at step 100/100", lines
