"""The table ``ngptune train-many`` prints fits 80 columns, a re-run's skipped jobs included."""

from __future__ import annotations

import io

from rich.console import Console

from ngptune.reporting.train_many_report import print_summary_table
from ngptune.train_many import JOB_FILE, JobResult
from trainer.contract.textlines import joined


def _result(scene: str, **fields) -> JobResult:
    base = dict(scene=scene, gpus="cpu", steps=2000, train_time_s=1234.5, psnr_db=23.4567, status="completed",
                log_path=f"runs/{scene}/logs/train.log", run_dir=f"runs/{scene}", warm_started_from="")
    return JobResult(**{**base, **fields})


def test_a_re_runs_table_fits_80_columns_in_a_pipe_and_on_a_terminal():
    results = [_result("/seq/0000-a-scene-name", skipped_at="2026-12-03T09:00:00"),
               _result("/seq/0001", warm_started_from="runs/0000/snapshots/step_0002000.pt",
                       skipped_at="2026-12-03T09:00:00"),
               _result("/seq/0002-a-scene-with-a-name-far-longer-than-its-column", status="failed", steps=None,
                       train_time_s=None, psnr_db=None, reason="scene path does not exist: " + "/seq/0002" * 8)]
    for width in (200, 80):  # piped output is 200 columns wide (ngptune.console)
        screen = io.StringIO()
        print_summary_table(results, Console(file=screen, width=width, color_system=None), JOB_FILE)
        lines = screen.getvalue().splitlines()
        assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]  # 96 before
        rows = [line for line in lines if " 1234.5 s " in line]
        assert len(rows) == 2 and all("23.46 dB" in row and "completed*" in row for row in rows), lines
        assert rows[0].startswith("0000-a-scene-name ") and rows[1].rstrip().endswith("yes")
        note = next(i for i, line in enumerate(lines) if line.startswith("* finished by an earlier run, skipped now"))
        assert joined(lines[note:note + 2]) == ("* finished by an earlier run, skipped now (remove its job.json, "
                                                "e.g. runs/seq/0000-a-scene-name/job.json, to train it again)")
        assert any(line.startswith("/seq/0002-a-scene-with-a-name-far-longer-than-its-column:") for line in lines)
