"""The one harness for multi-process tests: W spawned processes join one gloo group on CPU, run a
module-level function and hand its return value back through a file.

Every test that needs real ranks goes through :func:`run_ranks`, so every rank leaves the group the
same way: on success it waits for its peers first (``shutdown_distributed(barrier=True)``). A gloo
rank that tears its group down while a peer still uses it can abort that peer at exit with
"terminate called without an active exception" (SIGABRT), which made the suite flaky in CI; and a
finished rank ends without the interpreter's teardown, where the same abort was still seen rarely.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.parallel.dist_env import exit_without_teardown, free_port, shutdown_distributed

TIMEOUT_S = 60


def _rank_main(rank: int, world_size: int, port: int, out_dir: str, fn, args: tuple) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=TIMEOUT_S))
    completed = False
    try:
        result = fn(rank, world_size, *args)
        torch.save(result, Path(out_dir) / f"result{rank}.pt")
        completed = True
    finally:
        shutdown_distributed(barrier=completed)  # see the module docstring
    exit_without_teardown(0)  # as a finished trainer rank does (trainer/__main__.py)


def run_ranks(fn, world_size: int, tmp_path: Path, *args) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; returns their results.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a rank raised (its traceback is in the message).
    """
    out = tmp_path / f"results_{fn.__name__}_{world_size}"
    out.mkdir(parents=True, exist_ok=True)
    mp.start_processes(
        _rank_main, args=(world_size, free_port(), str(out), fn, args), nprocs=world_size, join=True, start_method="spawn"
    )
    return [torch.load(out / f"result{r}.pt", weights_only=False) for r in range(world_size)]
