import json

import pytest

from trainer.contract.rundir import RunDir, atomic_write_text
from trainer.contract.metrics import (
    METRICS_COLUMNS,
    PHASES,
    MetricsError,
    MetricsWriter,
    phase_column,
    read_metrics,
)


def _record(step, **extra):
    return {"rank": 0, "world_size": 1, "step": step, "wall_time_s": 0.1 * step, "loss": 0.5,
            "throughput_samples_per_s": 1000.0, "step_time_ms": 2.0, **extra}


def test_every_column_name_carries_a_unit_or_is_dimensionless():
    for column in METRICS_COLUMNS:
        if column.unit in ("ms", "s", "dB", "MiB"):
            assert column.name.endswith("_" + {"ms": "ms", "s": "s", "dB": "db", "MiB": "mib"}[column.unit])
    assert [phase_column(p) for p in PHASES][:2] == ["data_ms", "march_ms"]
    with pytest.raises(KeyError):
        phase_column("bogus")


def test_writer_and_reader_round_trip(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsWriter(path) as w:
        w.write(_record(10, data_ms=1.5))
        w.write(_record(20, train_psnr_db=float("inf")))
    records = read_metrics(path, require_contiguous_steps=True)
    assert [r["step"] for r in records] == [10, 20]
    assert records[0]["data_ms"] == 1.5
    assert records[1]["train_psnr_db"] is None  # non-finite numbers are written as null


def test_writer_rejects_unknown_and_missing_columns(tmp_path):
    with MetricsWriter(tmp_path / "m.jsonl") as w:
        with pytest.raises(MetricsError, match="unknown column 'bogus_ms'"):
            w.write(_record(1, bogus_ms=1.0))
        bad = _record(1)
        del bad["loss"]
        with pytest.raises(MetricsError, match="missing required column 'loss'"):
            w.write(bad)


def test_reader_names_file_and_line_and_drops_a_cut_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"schema_version": 1, **_record(s)}) for s in (1, 2)]
    path.write_text(lines[0] + "\n" + lines[1][:20] + "\n")
    assert [r["step"] for r in read_metrics(path)] == [1]  # killed mid-write: last line dropped
    path.write_text(lines[0][:20] + "\n" + lines[1] + "\n")
    with pytest.raises(MetricsError, match=r"metrics.jsonl:1: not valid JSON"):
        read_metrics(path)
    path.write_text(lines[1] + "\n" + lines[0] + "\n")
    with pytest.raises(MetricsError, match="steps do not increase"):
        read_metrics(path, require_contiguous_steps=True)
    with pytest.raises(MetricsError, match="not found"):
        read_metrics(tmp_path / "missing.jsonl")


def test_rundir_layout_and_snapshot_listing_ignores_temp_files(tmp_path):
    run = RunDir(tmp_path / "run").create()
    assert run.metrics_path(0).name == "metrics.jsonl"
    assert run.metrics_path(2).name == "metrics.rank2.jsonl"
    assert run.render_path("test", 7).name == "test_007.png"
    run.snapshots_dir.mkdir()
    for step in (5, 100, 20):
        run.snapshot_path(step).write_bytes(b"x")
    (run.snapshots_dir / ".step_0000200.pt.abc.tmp").write_bytes(b"half")
    assert [s for s, _ in run.snapshots()] == [5, 20, 100]
    assert run.latest_snapshot() == run.snapshot_path(100)


def test_atomic_write_text_replaces_whole_file(tmp_path):
    path = tmp_path / "a" / "b.json"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]
