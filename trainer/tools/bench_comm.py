"""``python -m trainer.tools.bench_comm --nproc-per-node N --out DIR --backend nccl|gloo --sizes B,... --ops ...``:
time collectives on N local ranks, the measurement of ``ngptune bench-comm``.

The N ranks start through the trainer's elastic launcher (:func:`trainer.parallel.launch.launch_workers`,
the path of ``python -m trainer --nproc-per-node``), each running this module with ``--worker``;
their logs are ``DIR/logs/rank<R>.log``. Each rank times ``--iters`` back-to-back calls of every
collective at every size (bytes) after ``--warmup`` untimed ones (CUDA events on GPUs,
``time.perf_counter`` on the CPU), and the slowest rank's mean time per collective is kept, as
nccl-tests does; bandwidths as training reports them
(:func:`trainer.parallel.grad_sync.collective_bandwidth_gb_per_s`). Rank 0 writes the rows to
``DIR/bench_comm.json`` (:data:`trainer.contract.commandline.BENCH_COMM_RESULT_FILE`): a list of objects with ``size_bytes``, ``count``,
``op``, ``time_us``, ``algbw_gb_per_s``, ``busbw_gb_per_s``, ``emulated_interconnect``,
``backend``, ``world_size``. NCCL variables to measure come from the environment.

A failed rank or rendezvous is one ``error: `` line (naming the rank and its log), exit 2; Ctrl-C
or SIGTERM stops the ranks, exit 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

from trainer.contract import TrainerError, atomic_write_text, print_error
from trainer.contract.commandline import BENCH_COMM_RESULT_FILE, add_bench_comm_arguments

__all__ = ["main"]

BYTES_PER_ELEMENT = 4  # float32 buffers


def _time_collective_ms(op: str, size_bytes: int, iters: int, warmup: int, device) -> tuple[float, int, int]:
    """Mean milliseconds per collective on this rank, the bytes it stands for (whole output for
    all-gather) and the float32 element count. Collective: every rank calls it alike."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    if op == "all_reduce":
        count = size_bytes // BYTES_PER_ELEMENT
        buffer = torch.zeros(count, dtype=torch.float32, device=device)

        def call() -> None:
            dist.all_reduce(buffer)
    else:
        per_rank = size_bytes // (BYTES_PER_ELEMENT * n)
        count = per_rank * n
        local = torch.zeros(per_rank, dtype=torch.float32, device=device)
        output = torch.empty(count, dtype=torch.float32, device=device)

        def call() -> None:
            dist.all_gather_into_tensor(output, local)

    for _ in range(warmup):
        call()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    dist.barrier()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            call()
        end.record()
        end.synchronize()
        elapsed_ms = start.elapsed_time(end)
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        elapsed_ms = (time.perf_counter() - t0) * 1e3
    return elapsed_ms / iters, count * BYTES_PER_ELEMENT, count


def _worker(args: argparse.Namespace) -> int:
    """One rank; rank 0 writes the rows."""
    import torch
    import torch.distributed as dist

    from trainer.contract import config_from_dict
    from trainer.parallel.dist_env import detect_dist_env, init_distributed, shutdown_distributed
    from trainer.parallel.grad_sync import collective_bandwidth_gb_per_s, collective_device

    torch.set_num_threads(1)
    cfg = config_from_dict({
        "training": {"device": "cuda" if args.backend == "nccl" else "cpu"},
        "distributed": {"backend": args.backend, "timeout_s": args.timeout_s,
                        "emulate_interconnect": args.emulate_interconnect},
    }, source="bench-comm")
    env = detect_dist_env(cfg)
    init_distributed(env, args.timeout_s)
    completed = False
    try:
        rows = []
        for op in args.ops.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                time_ms, size_bytes, count = _time_collective_ms(op, size, args.iters, args.warmup, env.device)
                slowest = torch.tensor([time_ms], dtype=torch.float64, device=collective_device())
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                time_ms = float(slowest.item())
                algbw, busbw = collective_bandwidth_gb_per_s(op, size_bytes, time_ms, env.world_size)
                rows.append({"size_bytes": size_bytes, "count": count, "op": op, "time_us": time_ms * 1e3,
                             "algbw_gb_per_s": algbw, "busbw_gb_per_s": busbw,
                             "emulated_interconnect": args.emulate_interconnect, "backend": env.backend,
                             "world_size": env.world_size})
                if env.is_main:
                    print(f"{op} {size_bytes} B: {time_ms * 1e3:.1f} us, busbw {busbw:.3g} GB/s", flush=True)
        if env.is_main:
            atomic_write_text(args.out / BENCH_COMM_RESULT_FILE, json.dumps(rows, indent=1) + "\n")
        completed = True
    finally:
        shutdown_distributed(barrier=completed)
    return 0


def _launch(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Start ``--nproc-per-node`` ranks of this module with ``--worker`` and the other flags."""
    import signal

    from trainer.parallel.launch import launch_workers

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)  # the driver stopped (or died): stop the ranks too
    worker = ["-m", "trainer.tools.bench_comm", "--worker", *argv]
    try:
        launch_workers(worker, args.nproc_per_node, timeout_s=args.timeout_s, run_dir=args.out)
    except KeyboardInterrupt:
        print("interrupted: the ranks were stopped", file=sys.stderr, flush=True)
        return 130
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    worker = raw[:1] == ["--worker"]
    parser = argparse.ArgumentParser(prog="python -m trainer.tools.bench_comm",
                                     description="Time collectives on N local ranks.")
    add_bench_comm_arguments(parser)
    args = parser.parse_args(raw[1:] if worker else raw)
    try:
        return _worker(args) if worker else _launch(args, raw)
    except TrainerError as exc:
        print_error(exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
