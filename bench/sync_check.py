"""Host synchronisations per training step, by call site (prints a table).

Trains ``--warmup`` steps, then runs ``--steps`` more under ``torch.cuda.set_sync_debug_mode("warn")``
and counts the "synchronizing CUDA operation" warnings by the Python line that caused them. A step
that keeps the GPU fed should show only the march's reads (on the prefetch stream) and, once per
occupancy update, the update's. Run alone (single-process trainer) or under torchrun for the
data-parallel trainer (rank 0 prints):

    python bench/sync_check.py --scene .scenes/lego_400
    torchrun --nproc-per-node 2 bench/sync_check.py --scene .scenes/lego_400
"""

from __future__ import annotations

import argparse
import collections
import os
import warnings
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.parallel.dist_env import detect_dist_env, init_distributed, shutdown_distributed
from trainer.parallel.build import build_distributed_trainer
from trainer.train.loop import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    cfg = apply_overrides(load_config(None), dict(parse_override(s) for s in args.overrides))
    distributed = "LOCAL_RANK" in os.environ
    scene = load_scene(args.scene)
    if distributed:
        env = detect_dist_env(cfg)
        init_distributed(env, cfg.distributed.timeout_s)
        trainer = build_distributed_trainer(cfg, scene)
    else:
        trainer = Trainer(cfg, scene)
    for _ in range(args.warmup):
        trainer.train_step()
    torch.cuda.synchronize()
    sites: collections.Counter[str] = collections.Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        for _ in range(args.steps):
            trainer.train_step()
        torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            sites[f"{Path(w.filename).name}:{w.lineno}"] += 1
    if trainer.rank == 0:
        kind = f"{type(trainer).__name__}, world size {trainer.world_size}"
        print_table(
            f"host syncs over {args.steps} steps after {args.warmup}, {kind}, {machine_description()}",
            ["call site", "syncs", "per step"],
            [[site, n, n / args.steps] for site, n in sites.most_common()] or [["(none)", 0, 0.0]],
        )
    trainer.close()
    if distributed:
        shutdown_distributed(barrier=True)  # a rank that leaves first can abort its peers at exit


if __name__ == "__main__":
    main()
