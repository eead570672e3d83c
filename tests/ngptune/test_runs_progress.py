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
                                           "0000: completed", "0001: waiting", "0001: failed",
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
