"""The link's busbw for the profile (ngptune/profiling/link.py): bench-comm tables given with
--bench-comm-csv (good, truncated, without all-reduce rows, another link), the --link-busbw values,
and the measurement's configuration and failure path (no ranks are started here)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest

from ngptune.commbench import COLUMNS
from ngptune.profiling.collect import ProfileDir
from ngptune.profile_command import _link_busbw
from ngptune.profiling.link import (
    LINK_BENCH_SIZE_BYTES,
    LinkBandwidthError,
    link_bench_config,
    measure_link_busbw,
    parse_link_busbw,
    read_link_busbw,
)
from trainer.contract.config import config_from_dict
from trainer.contract.errors import ConfigError

MIB = 2**20


def _row(size_bytes: int, busbw: float, *, op: str = "all_reduce", settings: str = "default",
         emulated: str = "none", world_size: int = 2) -> dict:
    return {"size_bytes": size_bytes, "count": size_bytes // 4, "op": op, "time_us": 100.0,
            "algbw_gb_per_s": busbw, "busbw_gb_per_s": busbw, "settings": settings,
            "emulated_interconnect": emulated, "backend": "nccl", "world_size": world_size}


def _write(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(path, index=False)
    return path


@pytest.fixture()
def bench_csv(tmp_path: Path) -> Path:
    """A two-setting bench-comm table: all-reduce at 1, 64 and 1024 MiB, all-gather at 64 MiB."""
    return _write(tmp_path / "comm.csv", [
        _row(MIB, 5.0), _row(64 * MIB, 20.0), _row(1024 * MIB, 30.0),
        _row(MIB, 6.0, settings="NCCL_ALGO=Tree,NCCL_PROTO=Simple"),
        _row(64 * MIB, 24.5, settings="NCCL_ALGO=Tree,NCCL_PROTO=Simple"),
        _row(64 * MIB, 99.0, op="all_gather"),
    ])


def test_a_good_table_gives_the_best_all_reduce_at_64_mib(bench_csv: Path) -> None:
    busbw, status = read_link_busbw(bench_csv, emulated_interconnect="none", world_size=2)
    # 64 MiB is the reference size; of its two settings the better; all-gather rows do not count
    assert busbw == 24.5
    assert status.status == "ok"
    assert status.detail == (f"all_reduce of 64 MiB on 2 nccl ranks, NCCL NCCL_ALGO=Tree,NCCL_PROTO=Simple: "
                             f"busbw 24.5 GB/s, from {bench_csv}")
    # another world size is used, and said
    _, status = read_link_busbw(bench_csv, emulated_interconnect="none", world_size=4)
    assert status.detail.endswith("(measured on 2 ranks, this run has 4)")


def test_the_nearest_size_on_a_log_scale_wins_and_the_larger_on_a_tie(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.csv", [_row(MIB, 1.0), _row(16 * MIB, 2.0), _row(128 * MIB, 3.0)])
    assert read_link_busbw(path, emulated_interconnect="none", world_size=2)[0] == 3.0  # 128 MiB: 1 octave off
    path = _write(tmp_path / "b.csv", [_row(32 * MIB, 7.0), _row(128 * MIB, 6.0), _row(4 * MIB, 9.0)])
    assert read_link_busbw(path, emulated_interconnect="none", world_size=2)[0] == 6.0  # tie 32/128 MiB: larger
    assert LINK_BENCH_SIZE_BYTES == 64 * MIB


def test_a_truncated_table_is_an_error_naming_the_file(bench_csv: Path) -> None:
    text = bench_csv.read_text()
    cut = bench_csv.with_name("cut.csv")
    cut.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 20])  # the last row cut after 20 characters
    with pytest.raises(LinkBandwidthError, match=rf"^{cut}: row 6 is incomplete \(truncated file\?\)$"):
        read_link_busbw(cut, emulated_interconnect="none", world_size=2)
    cut.write_text(text[: text.index("\n") + 1])
    with pytest.raises(LinkBandwidthError, match=rf"^{cut}: no rows, only the header \(truncated\?\)$"):
        read_link_busbw(cut, emulated_interconnect="none", world_size=2)
    cut.write_text("")
    with pytest.raises(LinkBandwidthError, match=rf"^{cut}: empty file without a header \(truncated\?\)$"):
        read_link_busbw(cut, emulated_interconnect="none", world_size=2)
    _write(cut, [_row(MIB, 5.0), _row(64 * MIB, -1.0)])
    with pytest.raises(LinkBandwidthError, match=rf"^{cut}: row 2: busbw_gb_per_s must be a positive number, got '-1.0'$"):
        read_link_busbw(cut, emulated_interconnect="none", world_size=2)


def test_a_table_without_all_reduce_rows_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "gather.csv", [_row(64 * MIB, 12.0, op="all_gather")])
    with pytest.raises(LinkBandwidthError, match=rf"^{path}: no all_reduce rows \(ops: all_gather\); measure the link "
                                                 r"with ngptune bench-comm --ops all_reduce$"):
        read_link_busbw(path, emulated_interconnect="none", world_size=2)


def test_other_files_and_other_links_are_errors(tmp_path: Path, bench_csv: Path) -> None:
    phases = tmp_path / "phases.csv"
    phases.write_text("rank,step,phase,time_ms\n0,1,data,1.0\n")
    with pytest.raises(LinkBandwidthError, match=rf"^{phases}: missing columns \['size_bytes', 'count', 'op'"):
        read_link_busbw(phases, emulated_interconnect="none", world_size=2)
    with pytest.raises(LinkBandwidthError, match=rf"^{tmp_path / 'nowhere.csv'}: bench-comm table not found$"):
        read_link_busbw(tmp_path / "nowhere.csv", emulated_interconnect="none", world_size=2)
    # measured over the native link, profiled under emulated sockets: not the same link
    with pytest.raises(LinkBandwidthError, match=rf"^{bench_csv}: measured with emulated interconnect none, but the "
                                                 r"profiled run emulates 'sockets'; measure with ngptune bench-comm "
                                                 r"--emulate-interconnect sockets$"):
        read_link_busbw(bench_csv, emulated_interconnect="sockets", world_size=2)
    # "nvlink" sets no NCCL variable: the same link as "none"
    nvlink = _write(tmp_path / "nvlink.csv", [_row(64 * MIB, 150.0, emulated="nvlink")])
    assert read_link_busbw(nvlink, emulated_interconnect="none", world_size=2)[0] == 150.0
    mixed = _write(tmp_path / "mixed.csv", [_row(64 * MIB, 150.0), _row(64 * MIB, 3.6, emulated="sockets")])
    assert read_link_busbw(mixed, emulated_interconnect="sockets", world_size=2)[0] == 3.6


def test_link_busbw_flag_values() -> None:
    assert parse_link_busbw("auto") == "auto" and parse_link_busbw(" OFF ") == "off"
    assert parse_link_busbw("26") == 26.0 and parse_link_busbw("3.6e0") == 3.6
    for bad in ("0", "-3", "fast", "nan", "inf", ""):
        with pytest.raises(ConfigError, match=rf"^--link-busbw: expected auto, off or the link's busbw in GB/s \(> 0\), got '{bad}'$"):
            parse_link_busbw(bad)


def test_off_a_number_and_one_rank_measure_nothing(tmp_path: Path) -> None:
    cfg = config_from_dict({"training": {"device": "cpu"}}, source="test")
    profile = ProfileDir(tmp_path / "p")
    assert _link_busbw("off", cfg, 2, profile) == (None, _status("missing", "not requested (--link-busbw off)"))
    assert _link_busbw(26.0, cfg, 2, profile) == (26.0, _status("ok", "given: --link-busbw 26 GB/s"))
    assert _link_busbw("auto", cfg, 1, profile) == (
        None, _status("missing", "one rank: no gradient all-reduce, so no link to measure"))
    assert not profile.root.exists()  # nothing was launched or written


def _status(status: str, detail: str):
    from ngptune.profiling import SourceStatus

    return SourceStatus(status, detail)


def test_the_measurement_follows_the_profiled_run_and_reports_a_failure(tmp_path: Path) -> None:
    cpu = config_from_dict({"training": {"device": "cpu"}, "distributed": {"timeout_s": 42.0}}, source="test")
    bench = link_bench_config(cpu, 3)
    assert (bench.nproc_per_node, bench.backend, bench.emulate_interconnect) == (3, "gloo", "none")
    assert (bench.sizes_bytes, bench.ops, bench.timeout_s) == ((64 * MIB,), ("all_reduce",), 42.0)
    # the run emulates PCIe on gloo: the bench cannot follow it; the profile goes on without the figure
    pcie = config_from_dict({"training": {"device": "cpu"}, "distributed": {"emulate_interconnect": "pcie"}}, source="test")
    busbw, status = measure_link_busbw(pcie, 2, tmp_path / "bench_comm", tmp_path / "bench_comm.csv")
    assert busbw is None and status.status == "failed"
    assert status.detail.startswith("the link measurement (bench-comm) failed: --emulate-interconnect: 'pcie' works "
                                    "through NCCL variables")
    assert not (tmp_path / "bench_comm.csv").exists()


def test_bench_comm_csv_flag_errors_stop_the_profile_before_it_writes(tmp_path: Path, bench_csv: Path, capfd) -> None:
    from ngptune.cli import main

    gather = _write(tmp_path / "gather.csv", [_row(64 * MIB, 12.0, op="all_gather")])
    out = tmp_path / "prof"
    cases = [
        (["--bench-comm-csv", str(gather)], f"error: {gather}: no all_reduce rows (ops: all_gather); measure the link "
                                            "with ngptune bench-comm --ops all_reduce"),
        (["--bench-comm-csv", str(bench_csv), "--link-busbw", "off"],
         "error: --bench-comm-csv: gives the link's busbw for --link-busbw auto; it cannot be combined with --link-busbw off"),
        (["--link-busbw", "quick"], "error: --link-busbw: expected auto, off or the link's busbw in GB/s (> 0), got 'quick'"),
    ]
    for flags, message in cases:
        assert main(["profile", "--nproc-per-node", "2", "--out", str(out), *flags]) == 2
        assert capfd.readouterr().err.strip() == message
        assert not out.exists()


def test_register_has_the_link_flags() -> None:
    from ngptune.profile_command import register

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    register(sub)
    args = sub.choices["profile"].parse_args([])
    assert (args.link_busbw, args.bench_comm_csv) == ("auto", None)
