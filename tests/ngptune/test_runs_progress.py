"""The driver's progress of the runs it started (profile, train-many): a row per run from rank 0's
metrics records, plain lines off a terminal, a table that fits 80 columns on one."""

from __future__ import annotations

import io
import json
import re

from ngptune.progress import RunsProgress, last_record


def _record(step: int, wall_time_s: float, rate: float) -> dict:
    return {"step": step, "wall_time_s": wall_time_s, "throughput_samples_per_s": rate, "step_time_ms": 1.0}


def test_plain_lines_name_the_run_its_step_eta_and_throughput():
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    board.add("0000", 100)
    board.update("0000", _record(40, 20.0, 1234.0))
    board.finish("0000", "completed")
    board.add("0001", None)
    board.finish("0001", "failed")
    board.finish("0002", "skipped: done before")  # a job an earlier run finished: no start, no record
    assert out.getvalue().splitlines() == ["0000: waiting", "0000: step 40/100, eta 0:30, 1.23 k samples/s",
                                           "0000: completed at step 40/100", "0001: waiting", "0001: failed",
                                           "0002: skipped: done before"]


def test_a_record_of_start_up_steps_only_shows_start_up_not_its_rate_nor_an_eta(monkeypatch):
    import ngptune.progress as progress_module

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", 0.0)  # a line for every record
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    board.add("profile run", 30)
    board.update("profile run", {**_record(1, 1e-4, 7.7e9), "timed_steps": 0})  # its rate measures the start-up
    board.update("profile run", {**_record(2, 0.5, 35_900.0), "timed_steps": 1})
    assert out.getvalue().splitlines() == ["profile run: waiting", "profile run: step 1/30, eta -:--, start-up",
                                           "profile run: step 2/30, eta 0:07, 35.9 k samples/s"]


def test_the_table_of_two_runs_fits_80_columns():
    from rich.console import Console

    screen = io.StringIO()
    board = RunsProgress(console=Console(file=screen, width=80, force_terminal=True, color_system=None))
    board.update("0000-a-rather-long-scene-name-here", _record(1500, 600.0, 6.1e6), total=2000)
    board.update("0001", _record(12, 3.0, 7.7e4), total=2000)
    board.refresh()
    board.close()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()).replace("\r", "\n").splitlines()
    rows = [line for line in drawn if "step " in line]
    first = [r for r in rows if "step 1500/2000" in r][-1]
    second = [r for r in rows if "step 12/2000" in r][-1]
    assert "eta 3:20" in first and first.rstrip().endswith("6.10 M samples/s") and len(first.rstrip()) <= 80
    assert "eta 8:17" in second and len(second.rstrip()) <= 80


def test_last_record_skips_a_line_being_written(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert last_record(metrics) is None
    good = {"schema_version": 1, "rank": 0, "world_size": 1, "step": 5, "wall_time_s": 1.0, "loss": 0.1,
            "throughput_samples_per_s": 10.0, "step_time_ms": 2.0}
    metrics.write_text(json.dumps(good) + "\n" + '{"schema_version": 1, "ra')
    assert last_record(metrics)["step"] == 5


def test_between_records_the_progress_lines_of_the_run_s_output_are_shown(tmp_path, monkeypatch):
    """A short run logs one record, at its end: until then its step comes from the trainer's
    ``progress:`` lines (the launcher's ``rank 0:`` copy too); a record at a later step wins, and
    a progress line keeps the last record's throughput."""
    import ngptune.progress as progress_module
    from ngptune.progress import log_progress, newest_progress
    from trainer.contract import progress_line, read_progress_line

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", 0.0)
    assert read_progress_line(progress_line(12, 30, 6.4, "0:10")) == (12, 30, 6.4)
    log = tmp_path / "trainer.log"
    assert log_progress(log) is None
    log.write_text("training demo on cpu, 1 rank\n" + progress_line(12, 30, 6.0, "0:09") + "\nstep 10  loss 0.1\n")
    assert newest_progress(None, log) == {"step": 12, "total": 30, "wall_time_s": 6.0}
    record = _record(10, 5.0, 2000.0)
    assert newest_progress(record, log)["step"] == 12  # the line is further on
    assert newest_progress(_record(20, 9.0, 2000.0), log)["step"] == 20  # the record is
    log.write_text(log.read_text() + "rank 0: " + progress_line(24, 30, 12.0, "0:03") + "\n" + '{"half a li')
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    board.add("profile run", None, state="starting")
    board.update("profile run", record)
    board.update("profile run", newest_progress(record, log))
    assert out.getvalue().splitlines() == ["profile run: starting", "profile run: step 10/?, eta -:--, 2.00 k samples/s",
                                           "profile run: step 24/30, eta 0:03, 2.00 k samples/s"]


def test_the_profile_shows_the_trainer_s_progress_lines_before_its_only_record(tmp_path, capsys, monkeypatch):
    import ngptune.progress as progress_module
    from ngptune.profile_command import RunWatcher
    from ngptune.profiling.collect import ProfileDir
    from trainer.contract import progress_line

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", 0.0)  # a plain line at every look (stdout: no terminal)
    profile = ProfileDir(tmp_path / "profile")
    profile.trainer_log_path.parent.mkdir(parents=True)
    watcher = RunWatcher(profile, 30)
    watcher.poll()  # nothing written yet
    profile.trainer_log_path.write_text("training demo on cpu, 1 rank (2 CPU threads per rank)\n")
    watcher.poll()
    with open(profile.trainer_log_path, "a") as log:
        log.write(progress_line(7, 30, 10.0, "0:33") + "\n")
    watcher.poll()
    watcher.board.close()
    assert capsys.readouterr().out.splitlines() == [
        "profile run: starting", "trainer: training demo on cpu, 1 rank (2 CPU threads per rank)",
        "profile run: step 0/30, eta -:--", "profile run: step 7/30, eta 0:33"]


def test_off_a_terminal_a_job_s_steps_show_as_its_log_reports_them(tmp_path, monkeypatch):
    """train-many, piped: a job reports its step from the progress lines of its log before its
    first metrics record; a line comes when the step is first known and at each quarter, never
    the same line twice, then the outcome."""
    import ngptune.progress as progress_module
    from ngptune.progress import newest_progress
    from trainer.contract import progress_line

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", float("inf"))  # no line from the clock
    log = tmp_path / "0000.log"
    out = io.StringIO()
    board = RunsProgress(out=out, plain=True)
    board.update("0000", None, total=60)  # the job started (train-many's on_start)
    board.update("0000", newest_progress(None, log), total=60)  # no log yet
    for step in range(6, 60, 6):  # the trainer's lines at each tenth; train-many looks after each
        with open(log, "a") as f:
            f.write(progress_line(step, 60, step / 10, "0:01") + "\n")
        board.update("0000", newest_progress(None, log), total=60)
    board.finish("0000", "completed", step=60)  # its last look saw step 54: the job's status has 60
    assert out.getvalue().splitlines() == ["0000: step 0/60, eta -:--", "0000: step 6/60, eta 0:05",
                                           "0000: step 18/60, eta 0:04", "0000: step 30/60, eta 0:03",
                                           "0000: step 48/60, eta 0:01", "0000: completed at step 60/60"]


def test_the_profile_follows_a_short_run_s_steps_from_the_trainer_s_lines(tmp_path, capsys, monkeypatch):
    """``ngptune profile --steps 30``: the trainer (its plain output into the profile's log)
    says how far it is at each tenth of its steps, so the profile's line shows steps between
    0 and 30, though the run is shorter than the plain lines' interval."""
    import contextlib

    import ngptune.progress as progress_module
    import trainer.run.progress as trainer_progress
    from ngptune.profile_command import RunWatcher
    from ngptune.profiling.collect import ProfileDir
    from trainer.run.progress import TrainProgress

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", float("inf"))
    monkeypatch.setattr(trainer_progress, "PLAIN_PROGRESS_EVERY_S", float("inf"))
    profile = ProfileDir(tmp_path / "profile")
    profile.trainer_log_path.parent.mkdir(parents=True)
    watcher = RunWatcher(profile, 30)
    with open(profile.trainer_log_path, "w") as log, contextlib.redirect_stdout(log):
        print("training demo on cpu, 1 rank (2 CPU threads per rank)", flush=True)
        trained = TrainProgress(30, quiet=True)
        trained.step(1, 0.0, started=False)
        for step in range(2, 30):
            trained.step(step, 0.1 * step)
            watcher.poll()  # the profile looks between the trainer's steps
    watcher.board.close()
    steps = [int(m.group(1)) for m in re.finditer(r"^profile run: step (\d+)/30", capsys.readouterr().out, re.M)]
    assert steps == [3, 9, 15, 24], steps
