"""A tiny distributed worker for tests/trainer/parallel/test_launch.py and test_dist_env.py (run by launch_workers).

Each step s every rank all-reduces ``[rank + 1, s]`` (float64, sum); the result must be
``[W (W + 1) / 2, s · W]``. After each step the rank writes its progress (the last finished
step) to ``RUN_DIR/progress.rank<R>.json``; a restarted group resumes after the smallest
finished step over all ranks (a stand-in for resuming from the newest complete checkpoint).
``RUN_DIR/result.rank<R>.json`` holds the sums so far and the steps each attempt ran.

Faults, at ``--fail-rank`` and ``--fail-step`` (before that step's all-reduce), on attempt
``--fail-attempt`` only (-1: every attempt): ``oom`` raises ``torch.OutOfMemoryError``,
``raise`` raises ``ValueError``, ``sigkill`` kills the process, ``sleep`` sleeps 600 s; the
wall-clock time of the fault goes to ``RUN_DIR/fault_time.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.contract.config import config_from_dict
from trainer.parallel.dist_env import detect_dist_env, init_distributed, shutdown_distributed
from trainer.contract.rundir import atomic_write_text


def main() -> None:
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--timeout-s", type=float, default=20.0)
    p.add_argument("--world-size", type=int, default=None, help="distributed.world_size")
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-step", type=int, default=-1)
    p.add_argument("--fail-attempt", type=int, default=-1)
    p.add_argument("--fail-mode", choices=["oom", "raise", "sigkill", "sleep"], default=None)
    args = p.parse_args()

    cfg = config_from_dict(
        {"distributed": {"world_size": args.world_size, "timeout_s": args.timeout_s}},
        source="launch_worker",
    )
    env = detect_dist_env(cfg)
    init_distributed(env, cfg.distributed.timeout_s)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world_size = env.rank, env.world_size
    progress_path = args.run_dir / f"progress.rank{rank}.json"
    result_path = args.run_dir / f"result.rank{rank}.json"

    done = json.loads(progress_path.read_text())["step"] if progress_path.exists() else -1
    resume = torch.tensor([done + 1], dtype=torch.int64)
    dist.all_reduce(resume, op=dist.ReduceOp.MIN)
    start = int(resume.item())
    print(f"rank {rank} attempt {attempt} starts at step {start}", flush=True)

    result = json.loads(result_path.read_text()) if result_path.exists() else {"sums": {}, "attempts": {}}
    result["attempts"][str(attempt)] = []
    for step in range(start, args.steps):
        fault_here = rank == args.fail_rank and step == args.fail_step
        if fault_here and args.fail_attempt in (-1, attempt):
            print(f"rank {rank} step {step}: injecting {args.fail_mode}", flush=True)
            atomic_write_text(args.run_dir / "fault_time.json", json.dumps({"time": time.time()}))
            if args.fail_mode == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
            if args.fail_mode == "raise":
                raise ValueError(f"simulated failure at step {step}")
            if args.fail_mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if args.fail_mode == "sleep":
                time.sleep(600)
        t = torch.tensor([rank + 1.0, float(step)], dtype=torch.float64)
        dist.all_reduce(t)
        print(f"rank {rank} step {step} sums {t[0].item():g} {t[1].item():g}", flush=True)
        result["sums"][str(step)] = t.tolist()
        result["attempts"][str(attempt)].append(step)
        result.update(rank=rank, world_size=world_size, backend=env.backend, device=str(env.device),
                      env={k: os.environ.get(k) for k in ("NGPTUNE_TEST_MARK", "NCCL_NVLS_ENABLE")})
        atomic_write_text(result_path, json.dumps(result))
        atomic_write_text(progress_path, json.dumps({"step": step}))
    shutdown_distributed(barrier=True)


if __name__ == "__main__":
    main()
