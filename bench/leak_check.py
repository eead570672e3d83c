"""Are bright speckles on test views light leaking through surfaces? (trains, then prints a table)

Trains ``--steps`` steps, then renders ``--views`` evenly spaced test and training views twice, over
a white and over a black background: their difference is the transmittance left behind each pixel
(``C + T·bg``). Among the ground truth's interior pixels (alpha = 1, an opaque surface) it counts

- leaks: ``T > --leak-t`` (the ray went through the surface),
- opaque outliers: ``T ≤ --leak-t`` but a colour error above ``--outlier`` (the surface colour is
  wrong, e.g. view-dependent colour extrapolated to an unseen direction),

and each class's share of the squared error (white background, as the evaluation scores). "mean
PSNR" is the mean over views (the evaluation's figure); the "pooled" columns take the MSE over all
pixels of all views, as they are and with the leak or outlier pixels made exact.

    python bench/leak_check.py --scene .scenes/lego_400 --steps 4000 --views 10
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.data.images import load_pixel_table
from trainer.data.rays import camera_rays_for_image
from trainer.train.evaluate import evaluation_frames, ground_truth, render_rays
from trainer.train.loop import Trainer


def _psnr(mse: float) -> float:
    return -10.0 * math.log10(mse) if mse > 0 else float("inf")


def check_split(trainer: Trainer, split: str, views: int, leak_t: float, outlier: float) -> list:
    chosen = evaluation_frames(trainer.scene.frames(split), views)
    table = load_pixel_table([f for _, f in chosen], downscale=trainer.scene.downscale)
    device = trainer.device
    sums = dict(interior=0, leak=0, outlier=0, err=0.0, err_leak=0.0, err_outlier=0.0, values=0)
    psnrs = []
    with trainer.inference_weights():
        trainer.field.eval()
        for position, (_, frame) in enumerate(chosen):
            rays_o, rays_d = camera_rays_for_image(frame, device)
            white = render_rays(trainer, rays_o, rays_d, torch.ones(3, device=device))
            black = render_rays(trainer, rays_o, rays_d, torch.zeros(3, device=device))
            rgba, gt = ground_truth(table, position, torch.ones(3, device=device))
            transmittance = (white - black).mean(-1)
            err = ((white.clamp(0, 1) - gt) ** 2).sum(-1)
            interior = rgba[:, 3] >= 1.0
            leak = interior & (transmittance > leak_t)
            bad = interior & ~leak & (err.sqrt() / math.sqrt(3) > outlier)
            sums["interior"] += int(interior.sum())
            sums["leak"] += int(leak.sum())
            sums["outlier"] += int(bad.sum())
            sums["err"] += float(err.sum())
            sums["err_leak"] += float(err[leak].sum())
            sums["err_outlier"] += float(err[bad].sum())
            sums["values"] += 3 * err.shape[0]
            psnrs.append(_psnr(float(err.sum()) / (3 * err.shape[0])))
        trainer.field.train()
    total = max(sums["err"], 1e-30)
    return [split, len(chosen), float(np.mean(psnrs)),
            100.0 * sums["leak"] / max(sums["interior"], 1), 100.0 * sums["err_leak"] / total,
            100.0 * sums["outlier"] / max(sums["interior"], 1), 100.0 * sums["err_outlier"] / total,
            _psnr(sums["err"] / sums["values"]), _psnr((sums["err"] - sums["err_leak"]) / sums["values"]),
            _psnr((sums["err"] - sums["err_outlier"]) / sums["values"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--views", type=int, default=10)
    parser.add_argument("--leak-t", type=float, default=0.05)
    parser.add_argument("--outlier", type=float, default=0.1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    cfg = apply_overrides(load_config(None), dict(parse_override(s) for s in args.overrides))
    scene = load_scene(args.scene)
    trainer = Trainer(cfg, scene)
    trainer.train(n_steps=args.steps)
    rows = [check_split(trainer, split, args.views, args.leak_t, args.outlier) for split in ("test", "train")]
    print_table(
        f"leaks through surfaces after {trainer.step} steps ({args.scene.name}, {machine_description()}; "
        f"interior = ground-truth alpha 1, leak = transmittance > {args.leak_t}, outlier = opaque, error > {args.outlier})",
        ["split", "views", "mean PSNR dB", "leak % of interior", "leak % of sq. error", "outlier % of interior",
         "outlier % of sq. error", "pooled PSNR dB", "pooled, leaks exact dB", "pooled, outliers exact dB"],
        rows,
    )
    trainer.close()


if __name__ == "__main__":
    main()
