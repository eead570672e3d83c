"""``ngptune train-many`` on the console: its first line says the device and, on a CPU, the threads
of each job as every command's first line does; a job an earlier run finished is said once, in one
line under 80 columns; a job that ran gets its row's final state."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from ngptune.progress import RunsProgress
from ngptune.train_many import JobResult
from ngptune.train_many_command import job_done
from tests.support.cli import first_statement
from trainer.contract import LOAD_ENV, available_cores, describe_cpu_threads


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


def test_a_job_skipped_though_it_ran_with_other_flags_gets_its_whole_reason():
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    reason = ("skipped: finished by an earlier run at 2026-12-02T10:11:12 with other training flags (--n-steps 30; "
              "this run's: --n-steps 60) (step 30); remove runs/seq/0000/job.json to train it again")
    job_done(board, "0000", _result(steps=30, skipped_at="2026-12-03T09:00:00+01:00", reason=reason))
    lines = out.getvalue().splitlines()
    assert " ".join(line.strip() for line in lines) == f"0000: {reason}"
    assert "this run's: --n-steps 60" in out.getvalue() and all(len(line) <= 79 for line in lines)


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


def _finished_sequence(tmp_path) -> tuple:
    """A sequence of two scenes whose jobs an earlier run finished (the command trains nothing)."""
    seq, out = tmp_path / "seq", tmp_path / "out"
    for name in ("a", "b"):
        (seq / name).mkdir(parents=True)
        (out / name).mkdir(parents=True)
        job = _result(scene=str(seq / name), run_dir=str(out / name), log_path=str(out / "logs" / f"{name}.log"))
        (out / name / "job.json").write_text(json.dumps(dataclasses.asdict(job)))
    return seq, out


@pytest.mark.parametrize("load", ["0", "3.8"])
def test_the_first_line_says_the_device_and_the_threads_of_each_job(tmp_path, monkeypatch, capsys, load):
    from ngptune.cli import main

    monkeypatch.setenv("NGPTUNE_FAKE_GPUS", "0")  # a host without GPUs
    monkeypatch.setenv(LOAD_ENV, load)
    seq, out = _finished_sequence(tmp_path)
    assert main(["train-many", str(seq), "--out", str(out), "--set", "training.cpu_threads=0"]) == 0
    said = capsys.readouterr().out
    statement, n = first_statement(said)
    threads = describe_cpu_threads(0, 1)  # the words of train's, render's and export's first line
    assert statement == f"train-many: 2 scenes of {seq} on cpu, {threads}, one job at a time", said
    cores = available_cores()
    if load == "3.8" and cores > 1:
        assert f"({cores} cores, load 3.8)" in statement
    else:
        assert f"({cores} cores // 1 rank)" in statement
    assert all(len(line) <= 79 for line in said.splitlines()[:n] if " " in line.strip())
    assert main(["train-many", str(seq), "--out", str(out), "--set", "training.cpu_threads=1"]) == 0
    assert first_statement(capsys.readouterr().out)[0].endswith(
        " on cpu, 1 CPU thread per rank (training.cpu_threads), one job at a time")


def test_on_gpus_the_first_line_says_the_gpus_of_each_job(tmp_path, monkeypatch, capsys):
    from ngptune.cli import main

    monkeypatch.setenv("NGPTUNE_FAKE_GPUS", "2")
    seq, out = _finished_sequence(tmp_path)
    assert main(["train-many", str(seq), "--out", str(out)]) == 0
    assert first_statement(capsys.readouterr().out)[0] == (
        f"train-many: 2 scenes of {seq} on GPUs 0,1, 1 GPU per job, 2 jobs at once")
