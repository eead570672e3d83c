"""``ngptune monitor``: the real no-GPU error here; the live loop, CSV export and Ctrl-C on fake GPUs."""

from __future__ import annotations

import csv
import io
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from ngptune.monitor import parse_gpus, run_monitor
from ngptune.profiling.nvml import GpuReader, NvmlUnavailable, import_nvml
from ngptune.profiling.tables import GPU_TIMELINE_TABLE
from tests.support.fake_nvml import FakeGpu, make_fake_nvml
from tests.support.paths import REPO


def _has_gpu() -> bool:
    try:
        GpuReader(nvml=import_nvml()).close()
    except NvmlUnavailable:
        return False
    return True


@pytest.mark.skipif(_has_gpu(), reason="this machine has an NVIDIA GPU: the no-GPU error cannot occur")
def test_no_gpu_is_one_clear_error_and_exit_code_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "ngptune", "monitor", "--count", "1"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no NVIDIA GPU found (NVML: "), proc.stderr


def test_count_refreshes_write_complete_csv_rows_and_append(tmp_path: Path) -> None:
    gpus = [FakeGpu(power_mw=351_234, temp_c=55), FakeGpu(power_mw=90_000, temp_c=33)]
    out = tmp_path / "gpus.csv"
    console = Console(file=io.StringIO(), width=200)
    reader = GpuReader(nvml=make_fake_nvml(gpus))
    assert run_monitor(reader, interval_s=0.01, csv_path=out, count=3, console=console) == 3
    assert run_monitor(reader, interval_s=0.01, csv_path=out, count=2, console=console) == 2
    reader.close()
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10  # 5 refreshes x 2 GPUs, one header
    assert list(rows[0]) == list(GPU_TIMELINE_TABLE)
    assert [float(r["power_w"]) for r in rows[:2]] == [351.234, 90.0]
    assert {r["gpu"] for r in rows} == {"0", "1"}
    assert rows[0]["nvlink_tx_kib_per_s"] == ""  # first sample: no rate yet
    text = console.file.getvalue()
    assert "Fake H200" in text and "351.2" in text


_SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.support.fake_nvml import FakeGpu, make_fake_nvml
    sys.modules["pynvml"] = make_fake_nvml([FakeGpu(power_mw=250_500), FakeGpu(temp_c=71)])
    from ngptune.cli import main
    sys.exit(main(["monitor", "--interval", "0.02", "--csv", sys.argv[1], "--gpus", "1,0"]))
    """
)


def test_ctrl_c_stops_cleanly_with_a_complete_csv(tmp_path: Path) -> None:
    out = tmp_path / "live.csv"
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_text().count("\n") >= 7:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    text = out.read_text()
    assert text.endswith("\n")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) >= 6 and len(rows) % 2 == 0  # whole refreshes only
    assert all(None not in r and len(r) == len(GPU_TIMELINE_TABLE) for r in rows)
    assert [r["gpu"] for r in rows[:2]] == ["1", "0"]
    assert float(rows[1]["power_w"]) == 250.5 and float(rows[0]["temp_c"]) == 71.0


def test_bad_gpu_lists_are_rejected() -> None:
    import argparse

    assert parse_gpus("0,1") == [0, 1]
    for bad in ("a,b", "", "0,0", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="GPU indices"):
            parse_gpus(bad)


def test_unknown_gpu_index_names_the_flag() -> None:
    from trainer.contract.errors import ConfigError

    with pytest.raises(ConfigError, match="--gpus: GPU 3 not found"):
        GpuReader(gpus=[3], nvml=make_fake_nvml([FakeGpu()]))
