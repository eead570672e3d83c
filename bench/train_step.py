"""Steps/s and samples/s of a full training step (default: lego_400 at 2^18 samples per step).

Warms up (occupancy grid settles, batch size adapts), then times ``--steps`` steps and prints the
per-phase breakdown measured by the trainer's phase timers.

    python bench/train_step.py --scene ../shared/data/nerf_synthetic_lego_400
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.contract.metrics import PHASES
from trainer.train.loop import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--downscale", type=int, default=1)
    args = parser.parse_args()
    cfg = load_config(args.config)
    overrides = dict(parse_override(s) for s in args.overrides)
    overrides.setdefault("training.n_steps", args.warmup + args.steps)
    overrides.setdefault("training.log_every", args.steps)
    cfg = apply_overrides(cfg, overrides)
    trainer = Trainer(cfg, load_scene(args.scene, downscale=args.downscale), run_dir=None)
    trainer.train(n_steps=args.warmup)
    trainer.timer.collect()
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    record = trainer.train(n_steps=args.warmup + args.steps)
    elapsed = time.perf_counter() - t0
    rows = [[args.steps, args.steps / elapsed, record["throughput_samples_per_s"], record["samples_per_step"],
             record["rays_per_step"], record["step_time_ms"], record.get("samples_clipped", 0),
             record.get("mem_allocated_mib", 0.0), trainer.step_choice.kind,
             f"{record.get('ray_capacity', '-')}/{record.get('sample_capacity', '-')}/{record.get('recaptures', '-')}"]]
    print_table(f"training step on {args.scene.name}, {cfg.training.precision}, cuda_graphs {cfg.training.cuda_graphs}, backend {trainer.field.encoding.backend_name if hasattr(trainer.field, 'encoding') else '?'}, {machine_description()}",
                ["steps", "steps_per_s", "samples_per_s", "samples_per_step", "rays_per_step", "step_time_ms",
                 "samples_clipped", "peak_mem_mib", "step", "rays/samples capacity, recaptures"], rows)
    print_table("phases (mean ms per step)", ["phase", "ms"],
                [[p, record[f"{p}_ms"]] for p in PHASES if record.get(f"{p}_ms")] + [["other", record["other_ms"]]])
    trainer.close()


if __name__ == "__main__":
    main()
