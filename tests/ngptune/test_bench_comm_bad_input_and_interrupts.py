"""Edge cases of ``ngptune bench-comm`` (ngptune/commbench.py): odd --sizes, --ops and
--timeout-s, link variables in --nccl-settings, a --csv that cannot be written, a narrow terminal,
and a run stopped with SIGINT or SIGKILL midway (2 gloo ranks on the CPU)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ngptune.cli import main
from ngptune import commbench
from ngptune.commbench import COLUMNS, CommBenchConfig, parse_sizes, show_table
from tests.support.paths import REPO
from trainer.contract.errors import ConfigError

pytestmark = pytest.mark.timeout(120)


def _bench_comm(tmp_path: Path, *flags: str) -> int:
    return main(["bench-comm", "--nproc-per-node", "2", "--sizes", "4K", "--iters", "1", "--warmup", "0",
                 "--out", str(tmp_path / "logs"), *flags])


def test_duplicate_and_huge_sizes_are_named():
    with pytest.raises(ConfigError, match=r"^--sizes: '1M' appears twice; give each size once$"):
        parse_sizes("1M,64K,1M")
    with pytest.raises(ConfigError, match=r"^--sizes: '1024K' appears twice \(the same as '1M'\); give each size once$"):
        parse_sizes("1M,1024K")
    with pytest.raises(ConfigError, match=r"^--sizes: '99999999999999999999G' is \d+ bytes, more than the largest size"):
        parse_sizes("99999999999999999999G")
    assert parse_sizes("1024G") == (commbench.MAX_SIZE_BYTES,)


def test_duplicate_ops_and_bad_timeouts_are_one_error_before_any_rank(tmp_path, capfd):
    cases = {
        ("--ops", "all_reduce,all_gather,all_reduce"):
            "error: --ops: all_reduce appears twice in 'all_reduce,all_gather,all_reduce'; give each collective once",
        ("--timeout-s", "inf"): "error: --timeout-s: expected a finite number of seconds > 0, got inf",
        ("--timeout-s", "nan"): "error: --timeout-s: expected a finite number of seconds > 0, got nan",
        ("--timeout-s", "0"): "error: --timeout-s: expected a finite number of seconds > 0, got 0.0",
    }
    for flags, message in cases.items():
        assert _bench_comm(tmp_path, *flags) == 2, flags
        err = capfd.readouterr().err.strip()
        assert err == message  # one line: no traceback, no "rank logs kept in" a temporary folder
        assert not (tmp_path / "logs").exists()


def test_an_out_that_is_a_file_is_named_as_the_flag(tmp_path, capfd):
    (tmp_path / "logs").write_text("not a folder")
    assert _bench_comm(tmp_path, "--csv", str(tmp_path / "comm.csv")) == 2
    assert capfd.readouterr().err.strip() == f"error: --out {tmp_path / 'logs'}: is a file, expected a folder for the ranks' logs"
    assert not (tmp_path / "comm.csv").exists()


def test_link_variables_in_nccl_settings_are_refused_without_emulation():
    # the rows would say emulated_interconnect "none" while NCCL ran over PCIe or sockets
    for name in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        with pytest.raises(ConfigError, match=rf"^--nccl-settings: {name} changes the link, which --emulate-interconnect"):
            CommBenchConfig(2, (4096,), backend="gloo", nccl_settings=({"NCCL_ALGO": "Ring"}, {name: "1"}))


def test_a_csv_that_cannot_be_written_is_one_error_after_the_table(tmp_path, capfd):
    assert _bench_comm(tmp_path, "--csv", "/dev/full") == 2
    captured = capfd.readouterr()
    assert "all_reduce" in captured.out  # the measured table was shown
    assert captured.err.strip() == "error: --csv /dev/full: cannot write the table (No space left on device)"


def test_a_failed_write_keeps_the_previous_table_whole(tmp_path, monkeypatch):
    import trainer.contract.rundir

    csv = tmp_path / "comm.csv"
    csv.write_text("size_bytes\n1\n")
    frame = pd.DataFrame([[1] * len(COLUMNS)], columns=list(COLUMNS))

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer.contract.rundir.os, "fsync", full)
    with pytest.raises(ConfigError, match=rf"^--csv {re.escape(str(csv))}: cannot write the table \(No space left"):
        commbench.write_table_csv(frame, csv, "--csv")
    assert csv.read_text() == "size_bytes\n1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["comm.csv"]  # no temporary file left
    monkeypatch.undo()
    commbench.write_table_csv(frame, csv, "--csv")
    assert tuple(pd.read_csv(csv).columns) == COLUMNS


def test_a_narrow_terminal_wraps_numbers_instead_of_cutting_them(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "70")
    frame = pd.DataFrame([{"settings": "NCCL_ALGO=Ring,NCCL_PROTO=LL", "op": "all_reduce", "size_bytes": 67108864,
                           "count": 16777216, "time_us": 123456.7, "algbw_gb_per_s": 0.123, "busbw_gb_per_s": 0.456}])
    show_table(frame, "bench-comm")
    out = capsys.readouterr().out
    assert "all_reduce" in out and "…" not in out  # before: "67,108,…" and "16,777,…"
    assert "67.1 M" in out and "16.8 M" in out  # whole on their lines (before: "1,048,57" then "6")


def test_the_table_fits_80_columns_on_a_wide_or_piped_console(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    frame = pd.DataFrame([{"settings": "NCCL_ALGO=Ring,NCCL_PROTO=LL", "op": "all_reduce", "size_bytes": 67108864,
                           "count": 16777216, "time_us": 141079.6, "algbw_gb_per_s": 0.123, "busbw_gb_per_s": 0.456}])
    show_table(frame, "bench-comm")
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    assert any("141" in line and "141079" not in line for line in lines), lines  # ms, not µs


def _start(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """A bench-comm run that takes minutes; returns it and its two ranks' pids once both run."""
    logs = tmp_path / "logs"
    argv = [sys.executable, "-m", "ngptune", "bench-comm", "--nproc-per-node", "2", "--sizes", "4M",
            "--iters", "1000000", "--warmup", "0", "--out", str(logs), "--csv", str(tmp_path / "comm.csv")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    pids: list[int] = []
    while time.monotonic() < deadline and len(pids) < 2:
        time.sleep(0.2)
        pids = []
        for rank in (0, 1):
            log = logs / "setting0" / "logs" / f"rank{rank}.log"
            found = re.search(r" pid (\d+):", log.read_text()) if log.is_file() else None
            if found:
                pids.append(int(found.group(1)))
    assert len(pids) == 2, "the ranks did not start"
    time.sleep(2.0)  # inside the timed loop
    return proc, pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _stop(proc: subprocess.Popen, pids: list[int]) -> None:
    for pid in [proc.pid, *pids]:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def test_sigint_midway_stops_the_ranks_with_one_line_and_no_table(tmp_path):
    proc, pids = _start(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1].startswith("bench-comm interrupted: the ranks were stopped and no table "
                                                       "was written (rank logs in ")
        assert _gone_within(pids, 10)
        assert not (tmp_path / "comm.csv").exists()
    finally:
        _stop(proc, pids)


def test_sigkill_midway_leaves_no_orphaned_ranks_and_no_table(tmp_path):
    proc, pids = _start(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        assert _gone_within(pids, 10), "the ranks ran on after bench-comm was killed"
        assert not (tmp_path / "comm.csv").exists()
        assert not list(tmp_path.glob(".comm.csv.*"))
    finally:
        _stop(proc, pids)
