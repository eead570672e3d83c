"""Steps/s of the training step with candidate fast paths switched on one by one, in one process.

Each variant is timed on the same trainer (same scene, same warm state) for ``--steps`` steps after
``--settle`` untimed ones (which absorb compilation); the order is repeated ``--rounds`` times.
Variants monkeypatch the trainer; what wins is then built into the trainer properly.

    python bench/step_variants.py --scene ../shared/data/nerf_synthetic_lego_400
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import machine_description, print_table

import trainer.train.phases as phases
from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.render.volrend import composite
from trainer.train.loop import Trainer


def set_variant(trainer: Trainer, name: str, compiled: dict) -> None:
    phases.composite = compiled["composite"] if "composite" in name else composite
    # the patched composite is the reference path's: variants that compile it leave the Triton kernel
    trainer.triton_render = trainer.triton_render_resolved and "composite" not in name
    phases.photometric_loss = compiled["loss"] if "loss" in name else compiled["loss_eager"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--settle", type=int, default=60)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default="base,composite,composite+loss,base")
    args = parser.parse_args()
    cfg = load_config(None)
    overrides = dict(parse_override(s) for s in args.overrides)
    overrides.setdefault("training.log_every", 10**6)
    cfg = apply_overrides(cfg, overrides)
    trainer = Trainer(cfg, load_scene(args.scene), run_dir=None)
    compiled = {
        "composite": torch.compile(composite, dynamic=True),
        "loss": torch.compile(phases.photometric_loss, dynamic=True),
        "loss_eager": phases.photometric_loss,
    }
    trainer.triton_render_resolved = trainer.triton_render
    trainer.train(n_steps=args.warmup)
    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name in args.variants.split(","):
            set_variant(trainer, name, compiled)
            t_c = time.perf_counter()
            trainer.train(n_steps=trainer.step + args.settle)
            trainer.synchronize()
            settle_s = time.perf_counter() - t_c
            t0 = time.perf_counter()
            trainer.train(n_steps=trainer.step + args.steps)
            trainer.synchronize()
            rate = args.steps / (time.perf_counter() - t0)
            results.setdefault(name, []).append(rate)
            print(f"{name}: {rate:.1f} steps/s (settle {settle_s:.1f} s)", flush=True)
    base = max(results[next(iter(results))])
    print_table(f"training-step variants, {cfg.training.precision}, {machine_description()}",
                ["variant", "steps_per_s (best of rounds)", "all rounds", "vs first"],
                [[k, max(v), " ".join(f"{x:.1f}" for x in v), max(v) / base] for k, v in results.items()])
    trainer.close()


if __name__ == "__main__":
    main()
