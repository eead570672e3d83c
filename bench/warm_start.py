"""Warm start on a moving sequence: training steps and seconds until each scene's test PSNR
reaches a target, cold (fresh model) vs warm (the previous scene's model and occupancy grid,
fresh optimiser: :meth:`trainer.train.loop.Trainer.warm_start`, as ``train-many --warm-start
previous``). The sequence is the moving demo scene (``write_demo_sequence``); scene 0 is cold in
both rows. Every ``--eval-every`` steps the model is evaluated on ``--eval-images`` test views;
training time excludes evaluation.

    python bench/warm_start.py --frames 4 --resolution 64 --config configs/small.json --target-db 24
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.data.demo import write_demo_sequence
from trainer.train.loop import Trainer


def to_target(trainer: Trainer, target_db: float, eval_every: int, max_steps: int, eval_images: int):
    """(steps, training seconds, PSNR dB) at the first evaluation at or above ``target_db``
    (steps None when ``max_steps`` passed first)."""
    psnr = float("nan")
    while trainer.step < max_steps:
        trainer.train(n_steps=trainer.step + eval_every)
        psnr = float(trainer.evaluate(split="test", max_images=eval_images, save_renders=False)["mean_psnr_db"])
        if psnr >= target_db:
            return trainer.step, trainer.train_time_s, psnr
    return None, trainer.train_time_s, psnr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--target-db", type=float, default=24.0)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--eval-images", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=2000)
    args = parser.parse_args()
    cfg = load_config(args.config)
    if args.overrides:
        cfg = apply_overrides(cfg, dict(parse_override(o) for o in args.overrides))
    with tempfile.TemporaryDirectory(prefix="ngptune-warm-") as tmp:
        scenes = write_demo_sequence(Path(tmp) / "seq", args.frames, resolution=args.resolution)
        rows = []
        for mode in ("cold", "warm"):
            previous = None
            for i, scene_path in enumerate(scenes):
                trainer = Trainer(cfg, load_scene(scene_path))
                if mode == "warm" and previous is not None:
                    trainer.warm_start(previous)
                steps, seconds, psnr = to_target(trainer, args.target_db, args.eval_every, args.max_steps,
                                                 args.eval_images)
                previous = trainer.save(Path(tmp) / f"{mode}_{i}.pt")
                trainer.close()
                rows.append([mode, i, "" if steps is None else steps, seconds, psnr])
    print_table(f"Warm start: steps and training seconds to {args.target_db} dB test PSNR "
                f"(evaluated every {args.eval_every} steps on {args.eval_images} views; {machine_description()})",
                ["start", "scene", "steps", "train_time_s", "psnr_db"], rows)


if __name__ == "__main__":
    main()
