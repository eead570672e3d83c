"""The communication environment: socket interface names checked against the host (NCCL's prefix,
``=`` and ``^`` syntax; Gloo's exact names) and NCCL_*/GLOO_* variables compared across ranks."""

from __future__ import annotations

import os

import pytest

from tests.support.ranks import run_ranks
from trainer.contract.errors import ConfigError, LaunchError
from trainer.parallel.net_env import check_same_comm_env, check_socket_ifnames, comm_env, matching_interfaces

HOST = ["docker0", "eth0", "eth1", "ib0", "lo"]


@pytest.mark.parametrize("value, chosen", [
    ("eth", ["eth0", "eth1"]),                   # a prefix
    ("=eth", []),                                 # exact names only
    ("=eth1,ib0", ["eth1", "ib0"]),
    ("^docker,lo", ["eth0", "eth1", "ib0"]),      # exclusion of prefixes
    ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),  # exclusion of an exact name
    ("ib0:5000", ["ib0"]),                        # an entry with a port
    ("wlan", []),
])
def test_nccl_socket_ifname_syntax(value, chosen):
    assert matching_interfaces("NCCL_SOCKET_IFNAME", value, HOST) == chosen


def test_gloo_socket_ifname_takes_exact_names():
    assert matching_interfaces("GLOO_SOCKET_IFNAME", "eth", HOST) == []
    assert matching_interfaces("GLOO_SOCKET_IFNAME", "eth1,lo", HOST) == ["eth1", "lo"]


def test_a_wrong_ifname_is_refused_naming_the_value_and_the_host_interfaces():
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='eth9' selects no network interface of .*; "
                                          r"its interfaces: docker0, eth0, eth1, ib0, lo$"):
        check_socket_ifnames({"NCCL_SOCKET_IFNAME": "eth9"}, HOST)
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='\^eth,ib,lo,docker'"):
        check_socket_ifnames({"NCCL_SOCKET_IFNAME": "^eth,ib,lo,docker"}, HOST)  # excludes every one
    with pytest.raises(ConfigError, match=r"^GLOO_SOCKET_IFNAME='eth'"):
        check_socket_ifnames({"GLOO_SOCKET_IFNAME": "eth"}, HOST)
    check_socket_ifnames({"NCCL_SOCKET_IFNAME": "^docker,lo", "GLOO_SOCKET_IFNAME": "eth0"}, HOST)


def test_the_launcher_refuses_an_interface_this_host_lacks(tmp_path, monkeypatch):
    from trainer.launch_cli import main

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    assert main(["--nproc-per-node", "2", "--device", "cpu", "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()  # refused before any rank started


def test_comm_env_mismatch_names_the_variable_and_the_ranks():
    assert comm_env({"NCCL_ALGO": "Tree", "PATH": "/bin", "GLOO_DEVICE_TRANSPORT": "TCP"}) == {
        "GLOO_DEVICE_TRANSPORT": "TCP", "NCCL_ALGO": "Tree"}
    check_same_comm_env([{"NCCL_ALGO": "Tree", "NCCL_SOCKET_IFNAME": "eth0"}, {"NCCL_ALGO": "Tree", "NCCL_SOCKET_IFNAME": "ib0"}])
    with pytest.raises(LaunchError, match=r"^NCCL_PROTO differs across ranks \(ranks 0,2: 'LL'; rank 1: '\(unset\)'\)"):
        check_same_comm_env([{"NCCL_PROTO": "LL"}, {}, {"NCCL_PROTO": "LL"}])


def _exchange(rank: int, world_size: int) -> str:
    from trainer.parallel.dist_env import check_ranks_agree_on_comm_env

    os.environ["NCCL_ALGO"] = "Tree" if rank == 0 else "Ring"
    try:
        check_ranks_agree_on_comm_env()
    except LaunchError as exc:
        return str(exc)
    return "agreed"


def test_ranks_with_different_nccl_algo_are_refused_at_start_up(tmp_path):
    messages = run_ranks(_exchange, 2, tmp_path)
    assert messages[0] == messages[1]
    assert messages[0].startswith("NCCL_ALGO differs across ranks (rank 0: 'Tree'; rank 1: 'Ring')")


def test_a_failed_rank_keeps_the_whole_first_error_line(tmp_path):
    from trainer.parallel.launch import RankFailure

    long = ("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2100, unhandled system error (run with "
            "NCCL_DEBUG=INFO for details), NCCL version 2.21.5 ncclSystemError: System call (e.g. socket, "
            "malloc) or external library call failed or device error. Last error: Bootstrap : no socket "
            "interface found. Unable to find interface matching NCCL_SOCKET_IFNAME=eth9\nsecond line")
    failure = RankFailure(1, 1, 1, None, long, tmp_path / "rank1.log", "")
    assert failure.describe() == "rank 1 raised " + long.splitlines()[0]
