"""``ngptune bench-comm`` (ngptune/commbench.py): 2 gloo ranks on the CPU through the launcher,
the nccl-tests table as CSV, and the flag errors that need no ranks."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from ngptune.cli import main
from ngptune.commbench import COLUMNS, CommBenchConfig, parse_nccl_settings, parse_sizes, register, show_table

pytestmark = pytest.mark.timeout(120)


def test_two_gloo_ranks_write_the_nccl_tests_table(tmp_path, capfd):
    csv = tmp_path / "comm.csv"
    argv = ["bench-comm", "--nproc-per-node", "2", "--sizes", "4K,64K", "--iters", "3", "--warmup", "1",
            "--csv", str(csv), "--out", str(tmp_path / "logs")]
    assert main(argv) == 0
    table = pd.read_csv(csv)
    assert tuple(table.columns) == COLUMNS
    assert table[["op", "size_bytes", "count"]].values.tolist() == [
        ["all_reduce", 4096, 1024], ["all_reduce", 65536, 16384],
        ["all_gather", 4096, 1024], ["all_gather", 65536, 16384],
    ]
    assert set(table["settings"]) == {"default"} and set(table["backend"]) == {"gloo"}
    assert set(table["world_size"]) == {2} and set(table["emulated_interconnect"]) == {"none"}
    assert (table["time_us"] > 0).all()
    # algbw = bytes / time (GB = 1e9 B); busbw = algbw · 2(n−1)/n = algbw (all-reduce, n = 2),
    # algbw · (n−1)/n = algbw / 2 (all-gather)
    algbw = table["size_bytes"] / (table["time_us"] * 1e3)
    assert table["algbw_gb_per_s"].tolist() == pytest.approx(algbw.tolist(), rel=1e-9)
    ratio = (table["busbw_gb_per_s"] / table["algbw_gb_per_s"]).tolist()
    assert ratio == [1.0, 1.0, 0.5, 0.5]
    out = capfd.readouterr().out
    assert "bench-comm: 2 ranks, gloo" in out and "all_gather" in out
    # said before the ranks start: what is measured (2 sizes x 2 operations x 1 setting)
    assert out.startswith("bench-comm: 2 ranks (gloo) take 4 measurements (sizes × operations × settings),")
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "all_reduce 4096 B:" in (tmp_path / "logs" / "setting0" / "logs" / "rank0.log").read_text()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--emulate-interconnect", "pcie"],
         "error: --emulate-interconnect: 'pcie' works through NCCL variables, but bench-comm runs on the gloo "
         "backend here; use --emulate-interconnect none, or the nccl backend on GPUs"),
        (["--nccl-settings", "NCCL_ALGO=Ring;NCCL_ALGO=Tree"],
         "error: --nccl-settings: NCCL variables do nothing on the gloo backend; run on GPUs (--backend nccl) "
         "or leave them out"),
        (["--backend", "nccl"], "error: --backend: nccl needs 2 CUDA devices (one per rank), this host shows 0"),
        (["--sizes", "1M,lots"], "error: --sizes: expected sizes like 4096,64K,1M,1G (bytes > 0), got 'lots'"),
        (["--sizes", "4"], "error: --sizes: every size must be at least 8 bytes (one float32 per rank), got [4]"),
        (["--ops", "all_reduce,broadcast"],
         "error: --ops: expected a comma-separated list of all_reduce, all_gather, got 'all_reduce,broadcast'"),
        (["--nproc-per-node", "1"],
         "error: --nproc-per-node: expected an integer >= 2 (a collective needs two ranks), got 1"),
        (["--iters", "0"], "error: --iters: expected an integer >= 1, got 0"),
    ],
    ids=["emulation_on_gloo", "nccl_settings_on_gloo", "nccl_without_gpus", "bad_size", "tiny_size", "bad_op",
         "one_rank", "no_iters"],
)
def test_bad_flags_are_named_before_any_rank_starts(flags, message, tmp_path, capfd):
    import torch

    if flags[:2] == ["--backend", "nccl"] and torch.cuda.is_available():
        pytest.skip("the host has CUDA devices")  # evaluated: only hosts without GPUs reach the error
    # "one_rank" gives --nproc-per-node twice: argparse keeps the last
    assert main(["bench-comm", "--nproc-per-node", "2", *flags, "--out", str(tmp_path / "logs")]) == 2
    err = capfd.readouterr().err.strip()
    assert err == message
    assert not (tmp_path / "logs").exists()


def test_parsers_and_settings_clash_with_emulation():
    assert parse_sizes("4096, 64K,1M,1GiB,2kb") == (4096, 65536, 2**20, 2**30, 2048)
    assert parse_nccl_settings([]) == ({},)
    assert parse_nccl_settings(["NCCL_ALGO=Ring;NCCL_ALGO=Tree,NCCL_PROTO=LL", "NCCL_BUFFSIZE=4194304"]) == (
        {"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}, {"NCCL_BUFFSIZE": "4194304"})
    from trainer.contract.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--nccl-settings: expected NCCL_<NAME>=value items, got 'ALGO=Ring'$"):
        parse_nccl_settings(["ALGO=Ring"])
    with pytest.raises(ConfigError, match=r"^--nccl-settings: NCCL_ALGO appears twice in 'NCCL_ALGO=Ring,NCCL_ALGO=Tree'"):
        parse_nccl_settings(["NCCL_ALGO=Ring,NCCL_ALGO=Tree"])
    with pytest.raises(ConfigError, match=r"^--nccl-settings: NCCL_P2P_DISABLE is set by --emulate-interconnect pcie"):
        CommBenchConfig(2, (4096,), backend="gloo", emulate_interconnect="pcie",
                        nccl_settings=({"NCCL_P2P_DISABLE": "0"},))


def test_register_adds_the_subcommand_to_a_fresh_parser():
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    register(sub)
    args = sub.choices["bench-comm"].parse_args(["--nccl-settings", "NCCL_ALGO=Ring", "--nccl-settings", "NCCL_ALGO=Tree"])
    assert args.func.__name__ == "bench_comm_command"
    assert (args.sizes, args.ops, args.iters, args.warmup) == ("1M,16M,64M", "all_reduce,all_gather", 20, 5)
    assert args.backend == "auto"
    assert args.nccl_settings == ["NCCL_ALGO=Ring", "NCCL_ALGO=Tree"] and args.emulate_interconnect == "none"


def test_the_table_stays_within_80_columns_for_slow_links_and_long_settings(capfd):
    # gloo on a loaded CPU: sub-MB/s bandwidths and second-long operations, beside NCCL settings
    rows = [dict(settings=settings, op=op, size_bytes=4096, count=1024, time_us=time_us,
                 algbw_gb_per_s=bw, busbw_gb_per_s=bw / 2)
            for settings in ("default", "NCCL_ALGO=Ring,NCCL_PROTO=Simple")
            for op, time_us, bw in (("all_reduce", 5360.0, 0.000764), ("all_gather", 1.23e6, 1.23e-5))]
    show_table(pd.DataFrame(rows), "bench-comm: 2 ranks, gloo, 3 iterations; GB = 10^9 B")
    lines = capfd.readouterr().out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert any("1230" in line and "1.23e-05" in line and "6.15e-06" in line for line in lines)
