"""The registration report of ``ngptune prepare`` fits 80 columns: long camera lines and paths wrap
inside their cells."""

from __future__ import annotations

from pathlib import Path

from ngptune.console import make_console
from ngptune.prepare.report import RegistrationReport, print_report


def test_the_report_table_fits_80_columns_on_a_wide_console(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")
    scene = tmp_path / "scenes" / "a-workshop-capture-with-a-long-name"
    camera = ("OPENCV 1080x1920: fx 1429, fy 1428, cx 540.2, cy 960.8, k1 0.01121, k2 -0.02312, p1 0.0003151, "
              "p2 0.0001942 (10 images)")
    report = RegistrationReport(registered=10, total=10, mean_reprojection_error_px=0.61234, n_points=4321,
                                cameras=(camera,), unregistered=(), n_models=1, aabb_scale=4,
                                images_note="10 photos", stage_seconds={"features": 3.2, "matching": 5.0},
                                scene=Path(scene))
    print_report(report, make_console())
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = " ".join(lines)
    assert "0.612 px mean" in text and "OPENCV" in text and "1428" in text  # wrapped, not cut
