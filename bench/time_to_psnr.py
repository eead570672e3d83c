"""Seconds of training to reach PSNR thresholds on a scene's test views (default lego_400).

Training time excludes evaluation. Every ``--eval-every-s`` seconds of training the current model is
evaluated on ``--curve-images`` evenly spaced test views (the curve); at the end all test views are
evaluated (the final figure).

    python bench/time_to_psnr.py --scene ../shared/data/nerf_synthetic_lego_400 --budget-s 300
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.contract.rundir import RunDir
from trainer.train.loop import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--eval-every-s", type=float, default=30.0)
    parser.add_argument("--curve-images", type=int, default=20)
    parser.add_argument("--final-images", type=int, default=None, help="default: all test views")
    parser.add_argument("--thresholds", default="25,30,33,35")
    parser.add_argument("--downscale", type=int, default=None, help="shrink images by this factor (default: the automatic rule, docs/loading.md)")
    parser.add_argument("--out", type=Path, default=Path("runs/time_to_psnr"))
    parser.add_argument("--save-snapshot", action="store_true", help="keep the model in OUT/snapshots/ (for bench/render.py)")
    args = parser.parse_args()

    cfg = load_config(args.config)
    overrides = dict(parse_override(s) for s in args.overrides)
    overrides.setdefault("training.n_steps", 10**7)
    overrides.setdefault("training.log_every", 250)
    cfg = apply_overrides(cfg, overrides)
    options = cfg.data.scene_options()  # --set data.format / data.aabb_scale / ... apply to the scene
    if args.downscale is not None:
        options["downscale"] = args.downscale
    scene = load_scene(args.scene, **options)
    run_dir = RunDir(args.out).create()
    trainer = Trainer(cfg, scene, run_dir)
    thresholds = [float(x) for x in args.thresholds.split(",")]
    test_frames = scene.frames("test")
    stride = max(1, len(test_frames) // max(args.curve_images, 1))
    curve_frames = test_frames[::stride][: args.curve_images]
    curve = []
    budget = 0.0
    while budget < args.budget_s:
        budget = min(budget + args.eval_every_s, args.budget_s)
        trainer.train(time_budget_s=budget)
        t0 = time.perf_counter()
        saved = scene.splits["test"]
        scene.splits["test"] = curve_frames
        try:
            result = trainer.evaluate(split="test", save_renders=False)
        finally:
            scene.splits["test"] = saved
        eval_s = time.perf_counter() - t0
        curve.append({"train_time_s": trainer.train_time_s, "step": trainer.step,
                      "psnr_db": result["mean_psnr_db"], "eval_s": eval_s})
        print(f"t={trainer.train_time_s:7.1f}s step={trainer.step:6d} psnr({len(curve_frames)} views)={result['mean_psnr_db']:.2f} dB (eval {eval_s:.1f}s)", flush=True)
    t0 = time.perf_counter()
    final = trainer.evaluate(split="test", max_images=args.final_images, save_renders=True)
    final_eval_s = time.perf_counter() - t0
    rows = []
    for thr in thresholds:
        hit = next((c for c in curve if c["psnr_db"] >= thr), None)
        rows.append([f"{thr:.0f} dB", hit["train_time_s"] if hit else "not reached", hit["step"] if hit else "-"])
    print_table(f"time to PSNR on {args.scene.name} ({len(curve_frames)}-view curve), {machine_description()}",
                ["threshold", "train_time_s", "step"], rows)
    print_table("curve", ["train_time_s", "step", "psnr_db"],
                [[c["train_time_s"], c["step"], c["psnr_db"]] for c in curve])
    steps_per_s = trainer.step / max(trainer.train_time_s, 1e-9)
    print_table("final", ["train_time_s", "steps", "steps_per_s", "test_views", "mean_psnr_db", "mean_ssim", "eval_s"],
                [[trainer.train_time_s, trainer.step, steps_per_s, len(final["images"]), final["mean_psnr_db"], final["mean_ssim"], final_eval_s]])
    (run_dir.root / "time_to_psnr.json").write_text(json.dumps({"curve": curve, "final": {k: v for k, v in final.items() if k != "images"},
                                                                "machine": machine_description()}, indent=2))
    if trainer.startup is not None:
        print(trainer.startup.line())
    if args.save_snapshot:
        trainer.save(run_dir.snapshot_path(trainer.step))
    trainer.close()


if __name__ == "__main__":
    main()
