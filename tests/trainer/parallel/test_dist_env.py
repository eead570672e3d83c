"""Tests of trainer/parallel/dist_env.py: launcher variables (torchrun, SLURM) → DistEnv, config
checks, ports, and joining a process group with a bounded wait."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.support.paths import REPO
from trainer.contract.config import config_from_dict
from trainer.contract.errors import ConfigError, LaunchError
from trainer.parallel.dist_env import (
    DistEnv,
    check_port_free,
    detect_dist_env,
    expand_hostlist,
    expand_tasks_per_node,
    find_launcher,
    free_port,
    init_distributed,
    shutdown_distributed,
    slurm_job_port,
)

WORKER = str(REPO / "tests" / "support" / "launch_worker.py")
CPU = torch.device("cpu")


def _cfg(**distributed):
    device = distributed.pop("device", "auto")
    return config_from_dict({"distributed": distributed, "training": {"device": device}})


TORCHRUN = {
    "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29501",
}
SRUN = {
    "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456",
    "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3",
}


# ---------------------------------------------------------------- which launcher, single process


def test_find_launcher():
    assert find_launcher({}) == "none"
    assert find_launcher(TORCHRUN) == "torchrun"
    assert find_launcher(SRUN) == "slurm"
    assert find_launcher({**SRUN, **TORCHRUN}) == "torchrun"  # torchrun inside an allocation
    assert find_launcher({"SLURM_PROCID": "0"}) == "none"


def test_single_process_without_launcher():
    env = detect_dist_env(_cfg(), environ={}, cuda_device_count=0)
    assert env == DistEnv(0, 0, 1, 1, "127.0.0.1", 0, "gloo", CPU, "none")
    assert not env.is_distributed and env.is_main


def test_config_world_size_without_launcher_is_an_error():
    with pytest.raises(LaunchError, match=r"^distributed.world_size: config says 3 but this process "
                       r"was not started by a launcher"):
        detect_dist_env(_cfg(world_size=3), environ={}, cuda_device_count=0)
    assert detect_dist_env(_cfg(world_size=1), environ={}, cuda_device_count=0).world_size == 1


# ---------------------------------------------------------------- torchrun variables


def test_torchrun_variables_cpu():
    env = detect_dist_env(_cfg(), environ=TORCHRUN, cuda_device_count=0)
    assert env == DistEnv(1, 1, 2, 2, "10.0.0.5", 29501, "gloo", CPU, "torchrun")
    assert env.is_distributed and not env.is_main


def test_torchrun_variables_gpu_pick_local_rank_and_nccl():
    env = detect_dist_env(_cfg(), environ=TORCHRUN, cuda_device_count=2)
    assert env.device == torch.device("cuda:1") and env.backend == "nccl"
    # a launcher that shows each task only its own GPU
    assert detect_dist_env(_cfg(), environ=TORCHRUN, cuda_device_count=1).device == torch.device("cuda:0")
    # forced gloo on GPUs stays gloo
    assert detect_dist_env(_cfg(backend="gloo"), environ=TORCHRUN, cuda_device_count=2).backend == "gloo"


def test_too_few_gpus_for_the_local_ranks():
    env = {**TORCHRUN, "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4"}
    with pytest.raises(LaunchError, match=r"^4 processes on this node but only 2 CUDA devices"):
        detect_dist_env(_cfg(), environ=env, cuda_device_count=2)


def test_world_size_mismatch_with_the_config():
    with pytest.raises(ConfigError) as info:
        detect_dist_env(_cfg(world_size=3), environ=TORCHRUN, cuda_device_count=0)
    assert str(info.value) == "distributed.world_size: config says 3 but the launcher started 2 processes"
    with pytest.raises(ConfigError, match="config says 2 but the launcher started 4 processes"):
        detect_dist_env(_cfg(world_size=2), environ=SRUN, cuda_device_count=0)


def test_config_fills_what_the_launcher_leaves_out():
    env = detect_dist_env(_cfg(world_size=4, master_addr="head", master_port=29999),
                          environ={"RANK": "2"}, cuda_device_count=0)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (2, 2, 4, 4)
    assert (env.master_addr, env.master_port) == ("head", 29999)
    # the launcher's values win over the config's
    env = detect_dist_env(_cfg(master_addr="head", master_port=29999), environ=TORCHRUN, cuda_device_count=0)
    assert (env.master_addr, env.master_port) == ("10.0.0.5", 29501)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({**TORCHRUN, "RANK": "one"}, "environment variable RANK: expected an integer, got 'one'"),
        ({**TORCHRUN, "WORLD_SIZE": "0"}, "environment variable WORLD_SIZE: expected an integer >= 1, got 0"),
        ({**TORCHRUN, "MASTER_PORT": "70000"}, "environment variable MASTER_PORT: expected a port in [1, 65535], got 70000"),
        ({**TORCHRUN, "RANK": "2"}, "rank 2 is not below the world size 2 (torchrun)"),
        ({**TORCHRUN, "LOCAL_RANK": "2"}, "local rank 2 is not below the local world size 2 (torchrun)"),
        ({"WORLD_SIZE": "2"}, "environment variable WORLD_SIZE is set but RANK is not"),
        ({"RANK": "0"}, "environment variable RANK is set but WORLD_SIZE is not, and distributed.world_size is null; set one of them"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "distributed.master_port: 0 (automatic) needs a launcher that picks the port; the launcher gave none, so set a port"),
    ],
)
def test_bad_launcher_variables_are_named(environ, message):
    with pytest.raises(LaunchError) as info:
        detect_dist_env(_cfg(), environ=environ, cuda_device_count=0)
    assert str(info.value) == message


def test_device_and_backend_errors():
    with pytest.raises(ConfigError, match=r"^training.device: 'cuda:1' would put every rank on one GPU"):
        detect_dist_env(_cfg(device="cuda:1"), environ=TORCHRUN, cuda_device_count=2)
    with pytest.raises(ConfigError, match=r"^training.device: 'cuda' requested but no CUDA device"):
        detect_dist_env(_cfg(device="cuda"), environ=TORCHRUN, cuda_device_count=0)
    with pytest.raises(ConfigError, match=r"^distributed.backend: 'nccl' needs CUDA tensors"):
        detect_dist_env(_cfg(backend="nccl"), environ=TORCHRUN, cuda_device_count=0)
    with pytest.raises(ConfigError, match=r"^distributed.backend: 'nccl' needs CUDA tensors"):
        detect_dist_env(_cfg(backend="nccl", device="cpu"), environ=TORCHRUN, cuda_device_count=2)
    single = detect_dist_env(_cfg(device="cuda:1"), environ={}, cuda_device_count=2)
    assert single.device == torch.device("cuda:1") and single.backend == "nccl"


# ---------------------------------------------------------------- SLURM variables


def test_slurm_variables():
    env = detect_dist_env(_cfg(), environ=SRUN, cuda_device_count=0)
    # port: 15000 + crc32(b"123456") % 15000 = 15000 + 158520161 % 15000 = 15161
    assert env == DistEnv(3, 1, 4, 2, "gpu07", 15161, "gloo", CPU, "slurm")
    assert slurm_job_port("123456") == 15161


def test_slurm_port_and_address_sources():
    assert detect_dist_env(_cfg(master_port=29555), environ=SRUN, cuda_device_count=0).master_port == 29555
    exported = {**SRUN, "MASTER_ADDR": "head", "MASTER_PORT": "29600"}
    env = detect_dist_env(_cfg(master_port=29555), environ=exported, cuda_device_count=0)
    assert (env.master_addr, env.master_port) == ("head", 29600)
    no_list = {k: v for k, v in SRUN.items() if k != "SLURM_JOB_NODELIST"}
    assert detect_dist_env(_cfg(), environ=no_list, cuda_device_count=0).master_addr == "10.1.2.3"
    step = {**SRUN, "SLURM_STEP_NODELIST": "gpu08"}  # the step's first node hosts rank 0
    assert detect_dist_env(_cfg(), environ=step, cuda_device_count=0).master_addr == "gpu08"
    bare = {k: v for k, v in no_list.items() if k not in ("SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_ID")}
    with pytest.raises(LaunchError, match="needs a launcher that picks the port"):
        detect_dist_env(_cfg(), environ=bare, cuda_device_count=0)


def test_slurm_tasks_per_node_and_gpu():
    env = {k: v for k, v in SRUN.items() if k != "SLURM_NTASKS_PER_NODE"}
    env.update(SLURM_NTASKS="7", SLURM_PROCID="6", SLURM_LOCALID="0",
               SLURM_TASKS_PER_NODE="2(x3),1", SLURM_NODEID="3")
    got = detect_dist_env(_cfg(), environ=env, cuda_device_count=1)
    assert (got.rank, got.world_size, got.local_world_size) == (6, 7, 1)
    assert got.device == torch.device("cuda:0") and got.backend == "nccl"
    with pytest.raises(LaunchError, match=r"SLURM_NODEID: node 4 is not in SLURM_TASKS_PER_NODE='2\(x3\),1'"):
        detect_dist_env(_cfg(), environ={**env, "SLURM_NODEID": "4"}, cuda_device_count=0)


def test_expand_hostlist():
    assert expand_hostlist("node[01-03,07],gpu-a5") == ["node01", "node02", "node03", "node07", "gpu-a5"]
    assert expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("a,b.example.org") == ["a", "b.example.org"]
    for bad, why in [("node[1-", "'[' without ']'"), ("n[3-1]", "range '3-1' runs backwards"),
                     ("n[x]", "bad range 'x'"), ("a,,b", "empty host name"), ("a]", "']' without '['")]:
        with pytest.raises(LaunchError) as info:
            expand_hostlist(bad)
        assert str(info.value) == f"SLURM host list {bad!r}: {why}"


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(LaunchError, match=r"cannot read 'x2'"):
        expand_tasks_per_node("x2")


def test_slurm_job_port_is_stable_and_in_range():
    ports = {slurm_job_port(str(job)) for job in range(1000, 1200)}
    assert all(15000 <= p < 30000 for p in ports)
    assert len(ports) > 190  # distinct for nearly all neighbouring jobs
    assert slurm_job_port("987") == slurm_job_port("987")


# ---------------------------------------------------------------- ports


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    check_port_free("127.0.0.1", port)


def test_check_port_free_names_host_and_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(LaunchError) as info:
            check_port_free("127.0.0.1", port)
    assert str(info.value) == (
        f"127.0.0.1:{port} is already in use (another job?); choose another "
        f"distributed.master_port or use 0 for an automatic free port"
    )


# ---------------------------------------------------------------- the process group


def test_init_distributed_single_process_is_a_no_op():
    env = detect_dist_env(_cfg(), environ={}, cuda_device_count=0)
    init_distributed(env, timeout_s=1.0)
    assert not dist.is_initialized()
    shutdown_distributed()  # nothing to leave


def test_init_distributed_gives_up_after_the_timeout(monkeypatch):
    for key in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(key, raising=False)
    port = free_port()
    env = DistEnv(1, 1, 2, 2, "127.0.0.1", port, "gloo", CPU, "slurm")  # rank 0 never comes
    t0 = time.perf_counter()
    with pytest.raises(LaunchError) as info:
        init_distributed(env, timeout_s=1.0)
    assert time.perf_counter() - t0 < 10  # the store client retries once within ~2.5 timeouts
    assert str(info.value).startswith(
        f"rank 1 of 2 could not join the gloo process group at 127.0.0.1:{port} within 1 s "
        f"(distributed.timeout_s): "
    )
    assert not dist.is_initialized()


def test_init_distributed_rank0_port_in_use(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = DistEnv(0, 0, 2, 2, "127.0.0.1", port, "gloo", CPU, "slurm")
        with pytest.raises(LaunchError, match=rf"^127.0.0.1:{port} is already in use"):
            init_distributed(env, timeout_s=1.0)
    assert not dist.is_initialized()


@pytest.mark.timeout(60)
def test_srun_style_processes_form_a_group(tmp_path):
    """Two processes that only have SLURM_* variables (as srun starts them) find each other; rank
    0 hosts the store at the first node of the node list and the derived port."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "TORCHELASTIC_")) and k not in TORCHRUN}
    port = free_port()
    procs = []
    for rank in range(2):
        env = {**base, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": "2",
               "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "localhost",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, WORKER, "--run-dir", str(tmp_path), "--steps", "2", "--timeout-s", "20"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=50)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for rank in range(2):
        res = json.loads((tmp_path / f"result.rank{rank}.json").read_text())
        assert res["world_size"] == 2 and res["rank"] == rank
        assert res["sums"] == {"0": [3.0, 0.0], "1": [3.0, 2.0]}


def _peer_gone(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from datetime import timedelta

    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=20))
    if rank == 1:
        os._exit(3)  # dies after the group formed, without saying goodbye
    t0 = time.monotonic()
    try:
        shutdown_distributed(barrier=True)
        message = None
    except LaunchError as exc:
        message = str(exc)
    Path(out).write_text(json.dumps({"message": message, "wait_s": time.monotonic() - t0,
                                     "left_group": not dist.is_initialized()}))


def test_barrier_before_shutdown_names_the_missing_peer(tmp_path):
    import torch.multiprocessing as mp

    out = tmp_path / "rank0.json"
    context = mp.start_processes(_peer_gone, args=(free_port(), str(out)), nprocs=2, join=False, start_method="spawn")
    context.processes[0].join(60)
    context.processes[1].join(10)
    result = json.loads(out.read_text())
    assert result["message"] is not None, "the barrier passed although rank 1 was gone"
    assert result["message"].startswith("rank 0 of 2: a peer rank did not reach the end of the run"), result
    assert result["left_group"] and result["wait_s"] < 25, result
