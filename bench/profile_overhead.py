"""Overhead of the profiler's always-on instrumentation on training throughput (prints a table).

One training process, one GPU. After ``--warmup`` steps it alternates blocks of ``--block-steps``
steps *plain* (phase timers off, no NVML sampling) and *instrumented* (phase timers on — pooled
CUDA events and NVTX ranges — and the NVML sampler of ``ngptune profile`` reading every GPU each
``--sampler-interval-ms`` in another process, as ``ngptune profile`` does from its driver
process). The order within each pair of blocks alternates, so drift (clocks, occupancy, batch
size) falls on both sides alike. Each block is timed between two device synchronisations. No trace
window. Reported: mean samples/s of each kind and the mean of the per-pair relative changes with
its standard error.

    python bench/profile_overhead.py --scene .scenes/lego_400 --pairs 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from pathlib import Path

from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.train.loop import Trainer


def sampler_process(interval_s: float, sampling, stop, counts) -> None:
    """Child process: an :class:`NvmlSampler` runs while ``sampling`` is set; ``counts[0]`` gets
    the number of rows read."""
    from ngptune.profiling.nvml import NvmlSampler

    sampler = None
    rows = 0
    while not stop.is_set():
        if sampling.is_set() and sampler is None:
            sampler = NvmlSampler(interval_s=interval_s).start()
        elif not sampling.is_set() and sampler is not None:
            sampler.stop()
            rows += len(sampler.rows)
            sampler = None
        time.sleep(0.005)
    if sampler is not None:
        sampler.stop()
        rows += len(sampler.rows)
    counts[0] = rows


def timed_block(trainer: Trainer, steps: int) -> float:
    """Samples per second over ``steps`` training steps (device-synchronised at both ends)."""
    trainer.synchronize()
    t0 = time.perf_counter()
    samples = 0
    for _ in range(steps):
        stats, _, _ = trainer.train_step()
        samples += stats.n_samples
    trainer.synchronize()
    elapsed = time.perf_counter() - t0
    trainer.timer.collect()  # the events of the block (kept out of the timed span)
    return samples / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--block-steps", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--sampler-interval-ms", type=float, default=100.0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    cfg = apply_overrides(load_config(None), dict(parse_override(s) for s in args.overrides))
    trainer = Trainer(cfg, load_scene(args.scene))
    for _ in range(args.warmup):
        trainer.train_step()

    ctx = multiprocessing.get_context("spawn")
    sampling, stop, counts = ctx.Event(), ctx.Event(), ctx.Array("l", 1)
    child = ctx.Process(target=sampler_process, args=(args.sampler_interval_ms / 1e3, sampling, stop, counts))
    child.start()
    time.sleep(3.0)  # the child imports NVML before the first block
    plain, instrumented, changes = [], [], []
    try:
        for pair in range(args.pairs):
            result = {}
            for on in ((False, True) if pair % 2 == 0 else (True, False)):
                trainer.timer.enabled = on
                (sampling.set if on else sampling.clear)()
                time.sleep(0.05)
                result[on] = timed_block(trainer, args.block_steps)
            plain.append(result[False])
            instrumented.append(result[True])
            changes.append(100.0 * (result[True] / result[False] - 1.0))
    finally:
        stop.set()
        child.join(timeout=30)
        trainer.close()
    stderr = statistics.stdev(changes) / len(changes) ** 0.5 if len(changes) > 1 else float("nan")
    rows = [
        ["plain", statistics.mean(plain), statistics.median(plain), ""],
        ["instrumented", statistics.mean(instrumented), statistics.median(instrumented),
         f"{statistics.mean(changes):+.2f} ± {stderr:.2f}"],
    ]
    print_table(
        f"instrumentation overhead, {args.scene.name}, {args.pairs} pairs of {args.block_steps}-step blocks after "
        f"{args.warmup} warm-up steps, NVML rows read: {counts[0]}, {machine_description()}",
        ["blocks", "mean samples/s", "median samples/s", "change % (mean ± s.e. of pairs)"],
        rows,
    )


if __name__ == "__main__":
    main()
