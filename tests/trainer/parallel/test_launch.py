"""Tests of trainer/parallel/launch.py: real multi-process jobs (gloo, CPU) through torch elastic.

The worker is tests/support/launch_worker.py: each step every rank all-reduces
``[rank + 1, step]``, so the sums must be ``[W (W + 1) / 2, step · W]``; it can raise, SIGKILL
itself or hang at a chosen rank and step.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.contract.errors import LaunchError
from trainer.parallel.launch import (
    RankFailure,
    WorkersFailed,
    _error_from_log,
    _failure_message,
    _order_failures,
    launch_workers,
    tail_lines,
)

WORKER = str(REPO / "tests" / "support" / "launch_worker.py")

pytestmark = pytest.mark.timeout(90)


def _launch(run_dir: Path, nproc: int, *worker_args: str, **kwargs) -> int:
    argv = [WORKER, "--run-dir", str(run_dir), *worker_args]
    return launch_workers(argv, nproc, run_dir=run_dir, **kwargs)


def _result(run_dir: Path, rank: int) -> dict:
    return json.loads((run_dir / f"result.rank{rank}.json").read_text())


def _expected_sums(world_size: int, steps: range) -> dict[str, list[float]]:
    return {str(s): [world_size * (world_size + 1) / 2, float(s * world_size)] for s in steps}


def _fault_to_end_s(run_dir: Path, end: float) -> float:
    return end - json.loads((run_dir / "fault_time.json").read_text())["time"]


def test_two_ranks_all_reduce_logs_env_and_signal_handlers(tmp_path):
    sigint_before = signal.getsignal(signal.SIGINT)
    rc = _launch(tmp_path, 2, "--steps", "3", timeout_s=30, env_extra={"NGPTUNE_TEST_MARK": "on"})
    assert rc == 0
    for rank in range(2):
        res = _result(tmp_path, rank)
        assert res["world_size"] == 2 and res["rank"] == rank
        assert res["backend"] == "gloo" and res["device"] == "cpu"
        assert res["sums"] == _expected_sums(2, range(3))
        assert res["attempts"] == {"0": [0, 1, 2]}
        assert res["env"] == {"NGPTUNE_TEST_MARK": "on", "NCCL_NVLS_ENABLE": "0"}
        log = (tmp_path / "logs" / f"rank{rank}.log").read_text()
        assert log.startswith(f"=== rank {rank}/2 local rank {rank} attempt 0")
        assert f"rank {rank} step 2 sums 3 4" in log
    # the launcher's own process is left as it was
    import os

    assert "NGPTUNE_TEST_MARK" not in os.environ
    assert signal.getsignal(signal.SIGINT) is sigint_before


def test_three_ranks_all_reduce(tmp_path):
    assert _launch(tmp_path, 3, "--steps", "2", timeout_s=30) == 0
    for rank in range(3):
        res = _result(tmp_path, rank)
        assert res["sums"] == _expected_sums(3, range(2))  # [6, 3·step]
        assert (tmp_path / "logs" / f"rank{rank}.log").is_file()


def test_rank_raising_oom_is_named_with_its_error_and_log(tmp_path, capfd):
    args = ("--steps", "4", "--fail-rank", "1", "--fail-step", "2", "--fail-mode", "oom")
    with pytest.raises(WorkersFailed) as info:
        _launch(tmp_path, 2, *args, "--timeout-s", "20", timeout_s=20)
    end = time.time()
    msg = str(info.value)
    assert isinstance(info.value, LaunchError)
    assert "\n" not in msg
    assert msg.startswith("rank 1 ran out of memory (OutOfMemoryError: CUDA out of memory.")
    assert f"log: {tmp_path / 'logs' / 'rank1.log'}" in msg
    root = info.value.root
    assert root.rank == 1 and root.exitcode == 1 and root.signal is None
    assert "torch.OutOfMemoryError: CUDA out of memory" in root.log_tail
    assert [f.rank for f in info.value.failures][0] == 1
    assert "last lines of" in capfd.readouterr().err
    assert _fault_to_end_s(tmp_path, end) < 20  # torn down well within distributed.timeout_s
    # rank 0 finished steps 0 and 1 and never saw step 2
    assert sorted(_result(tmp_path, 0)["sums"]) == ["0", "1"]


def test_sigkilled_rank_is_named_within_the_timeout(tmp_path):
    args = ("--steps", "4", "--fail-rank", "1", "--fail-step", "1", "--fail-mode", "sigkill")
    with pytest.raises(WorkersFailed) as info:
        _launch(tmp_path, 2, *args, "--timeout-s", "20", timeout_s=20)
    end = time.time()
    msg = str(info.value)
    assert msg.startswith("rank 1 was killed by SIGKILL (exit code -9)"), msg
    assert info.value.root.rank == 1 and info.value.root.signal == "SIGKILL"
    assert "injecting sigkill" in info.value.root.log_tail
    assert _fault_to_end_s(tmp_path, end) < 20


def test_hung_rank_is_bounded_by_the_collective_timeout(tmp_path):
    timeout_s = 3.0
    args = ("--steps", "3", "--fail-rank", "1", "--fail-step", "1", "--fail-mode", "sleep")
    with pytest.raises(WorkersFailed) as info:
        _launch(tmp_path, 2, *args, "--timeout-s", str(timeout_s), timeout_s=timeout_s)
    end = time.time()
    # rank 0's all-reduce gives up after timeout_s; the agent then stops the sleeping rank 1
    assert timeout_s <= _fault_to_end_s(tmp_path, end) < timeout_s + 6
    msg = str(info.value)
    # the rank that hung is named, not the one that gave up waiting for it
    assert msg.startswith("rank 1 stopped responding (hung or stopped): rank 0 timed out waiting for it"), msg
    assert "Timed out" in msg and "also failed: rank 0 (RuntimeError)" in msg, msg
    assert info.value.root.rank == 1
    assert json.loads((tmp_path / "status.json").read_text())["failed_rank"] == 1


def test_max_restarts_resumes_after_a_sigkill_and_finishes(tmp_path):
    args = ("--steps", "5", "--fail-rank", "1", "--fail-step", "3", "--fail-mode", "sigkill",
            "--fail-attempt", "0")
    assert _launch(tmp_path, 2, *args, timeout_s=20, max_restarts=1) == 0
    for rank in range(2):
        res = _result(tmp_path, rank)
        assert res["attempts"] == {"0": [0, 1, 2], "1": [3, 4]}  # resumed after step 2
        assert res["sums"] == _expected_sums(2, range(5))
        log = (tmp_path / "logs" / f"rank{rank}.log").read_text()
        assert f"rank {rank} attempt 0 starts at step 0" in log  # appended across attempts
        assert f"rank {rank} attempt 1 starts at step 3" in log


def test_port_in_use_fails_before_any_worker_starts(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.perf_counter()
        with pytest.raises(LaunchError) as info:
            _launch(tmp_path, 2, timeout_s=20, master_port=port)
        assert time.perf_counter() - t0 < 5
    assert str(info.value) == (
        f"127.0.0.1:{port} is already in use (another job?); choose another "
        f"distributed.master_port or use 0 for an automatic free port"
    )
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("argv", "kwargs", "expected"),
    [
        ([], {}, "argv_for_worker: expected '-m MODULE ARGS...' or 'SCRIPT ARGS...', got []"),
        (["-c", "pass"], {}, "argv_for_worker: expected '-m MODULE ARGS...' or 'SCRIPT ARGS...', got '-c' first"),
        (["/nonexistent/x.py"], {}, "argv_for_worker: script '/nonexistent/x.py' not found"),
        (["-m", "trainer"], {"nproc": 0}, "nproc_per_node: expected an integer >= 1, got 0"),
        (["-m", "trainer"], {"nnodes": 2}, "rdzv_endpoint: required with nnodes=2 (HOST:PORT of node 0's rendezvous store)"),
        (["-m", "trainer"], {"rdzv_endpoint": "host-without-port"}, "rdzv_endpoint: expected HOST:PORT, got 'host-without-port'"),
        (["-m", "trainer"], {"timeout_s": 0}, "distributed.timeout_s: expected a finite number of seconds > 0, got 0"),
        (["-m", "trainer"], {"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "node_rank: expected an integer < nnodes (2), got 2"),
        (["-m", "trainer"], {"nnodes": 2, "rdzv_endpoint": "h:0"}, "rdzv_endpoint: a job of 2 nodes needs a fixed port that every node knows, got 'h:0'"),
    ],
)
def test_bad_arguments_are_named(tmp_path, argv, kwargs, expected):
    nproc = kwargs.pop("nproc", 1)
    with pytest.raises(LaunchError) as info:
        launch_workers(argv, nproc, run_dir=tmp_path, **kwargs)
    assert str(info.value) == expected
    assert not (tmp_path / "logs").exists()


def _failure(rank, exitcode, signal_name=None, error=None, tail=""):
    return RankFailure(rank, rank, exitcode, signal_name, error, Path(f"logs/rank{rank}.log"), tail)


def test_root_cause_ranks_own_faults_before_consequences():
    killed = _failure(2, -9, "SIGKILL")
    peer_lost = _failure(0, 1, error="RuntimeError: [pair.cc:537] Read error: Connection reset by peer")
    stopped = _failure(1, -15, "SIGTERM")
    # the peer's error file is stamped a second earlier than the SIGKILL is noticed
    order = _order_failures([(stopped, 100), (peer_lost, 100), (killed, 101)])
    assert [f.rank for f in order] == [2, 0, 1]
    raised = _failure(3, 1, error="ValueError: bad")
    assert [f.rank for f in _order_failures([(killed, 101), (raised, 100)])] == [3, 2]


def test_a_collective_timeout_points_at_the_rank_that_stopped_answering():
    timed_out = _failure(0, 1, error="RuntimeError: [../gloo/transport/tcp/pair.cc:534] Timed out waiting 15000ms for recv")
    hung = _failure(1, 143, None)  # caught the agent's SIGTERM and exited 128 + 15
    hung = RankFailure(1, 1, 143, "SIGTERM", None, hung.log_path, "")
    order = _order_failures([(timed_out, 100), (hung, 101)])
    assert [f.rank for f in order] == [1, 0]
    assert _failure_message(order, 0).startswith(
        "rank 1 stopped responding (hung or stopped): rank 0 timed out waiting for it in a collective")
    stopped = _failure(2, -9, "SIGKILL")  # SIGSTOPped: only the agent's SIGKILL ends it
    assert [f.rank for f in _order_failures([(timed_out, 100), (stopped, 106)])] == [2, 0]
    raised = _failure(3, 1, error="ValueError: bad")  # a rank that failed by itself stays the root
    assert [f.rank for f in _order_failures([(timed_out, 100), (hung, 101), (raised, 102)])][0] == 3


def test_rank_failure_descriptions():
    assert _failure(1, 1, error="OutOfMemoryError: CUDA out of memory. Tried").describe() == (
        "rank 1 ran out of memory (OutOfMemoryError: CUDA out of memory. Tried)"
    )
    assert _failure(0, 1, error="ValueError: x").describe() == "rank 0 raised ValueError: x"
    assert _failure(2, -9, "SIGKILL").describe() == "rank 2 was killed by SIGKILL (exit code -9)"
    tail = "step 3\nerror: data.scene: not found\n\n"
    assert _failure(4, 2, tail=tail).describe() == "rank 4 exited with code 2: data.scene: not found"
    # an error message over several lines: its first line (which names the file) is kept
    tail = "step 3\nerror: ckpt/rank1.pt: unreadable rank state (UnpicklingError: load failed\n\nmore text.)\n"
    assert _failure(1, 2, tail=tail).describe() == (
        "rank 1 exited with code 2: ckpt/rank1.pt: unreadable rank state (UnpicklingError: load failed"
    )
    assert _failure(3, 1, tail="last words\n").describe() == "rank 3 exited with code 1: last words"


def test_error_from_a_traceback_in_the_log():
    tail = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "x.py", line 3, in <module>\n'
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert _error_from_log(tail) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert _error_from_log("step 1\nValueError: looks like one but no traceback\n") is None


def test_tail_lines(tmp_path):
    path = tmp_path / "rank0.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_lines(path, 3) == "line 97\nline 98\nline 99"
    assert tail_lines(path, 2, max_bytes=20) == "line 98\nline 99"
    assert tail_lines(tmp_path / "missing.log") == ""
