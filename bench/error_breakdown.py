"""Where the test error of saved renders lies: background, silhouette and interior pixels (prints tables).

Reads the PNG renders an evaluation wrote (``renders/test_NNN.png``, e.g. from ``time_to_psnr.py``)
and the scene's test images, composited on the evaluation's background (white for Blender scenes:
``rgb·a + (1 − a)``; black otherwise), and
splits the squared error by the ground truth's alpha: background (a = 0), silhouette (0 < a < 1)
and interior (a = 1). It also prints two reference figures computed from the ground truth alone:

- "mean PSNR with exact silhouettes": the renders' PSNR if every silhouette pixel were exact;
- "physical-composite ceiling": the PSNR of ``a·c + (1 − a)`` (coverage ``a`` of a colour
  ``c = rgb / a``, what a field with exact geometry and colour renders with a pixel-box filter)
  against the straight-alpha composite ``a·rgb + (1 − a) = a²·c + (1 − a)``. lego_400's RGB was
  box-filtered together with near-black colours of transparent pixels (``../shared/data/README.md``),
  so its silhouettes are darker than any physical coverage; this ceiling says how much that costs.

    python bench/error_breakdown.py --scene .scenes/lego_400 --renders runs/time_to_psnr/renders
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import cv2
import numpy as np
import torch
from _common import print_table

from trainer.data import load_scene
from trainer.data.images import load_pixel_table

CLASSES = ("background", "silhouette", "interior")


def _psnr(mse: float) -> float:
    return -10.0 * math.log10(mse) if mse > 0 else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--renders", type=Path, required=True, help="folder with test_NNN.png")
    args = parser.parse_args()
    scene = load_scene(args.scene)
    frames = scene.frames("test")
    found = [(i, f, args.renders / f"test_{i:03d}.png") for i, f in enumerate(frames)]
    found = [(i, f, p) for i, f, p in found if p.exists()]
    if not found:
        raise SystemExit(f"error_breakdown: no test_NNN.png renders in {args.renders}")
    table = load_pixel_table([f for _, f, _ in found], downscale=scene.downscale)
    sq_error = dict.fromkeys(CLASSES, 0.0)
    pixels = dict.fromkeys(CLASSES, 0)
    psnrs, exact_silhouette, ceiling = [], [], []
    for position, (_, frame, path) in enumerate(found):
        h, w = frame.intrinsics.height, frame.intrinsics.width
        image = table.image(position)
        rgba = image.numpy().astype(np.float64) / (255.0 if image.dtype == torch.uint8 else 1.0)
        rgb, alpha = rgba[..., :3], rgba[..., 3:4]
        background = 1.0 if scene.white_background else 0.0
        gt = rgb * alpha + background * (1.0 - alpha)
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None or bgr.shape[:2] != (h, w):
            raise SystemExit(f"error_breakdown: {path}: not a {w}x{h} image")
        pred = bgr[..., ::-1].astype(np.float64) / 255.0
        err = ((pred - gt) ** 2).sum(-1)  # [h, w], summed over channels
        a = alpha[..., 0]
        masks = {"background": a == 0.0, "silhouette": (a > 0.0) & (a < 1.0), "interior": a == 1.0}
        for name, mask in masks.items():
            sq_error[name] += float(err[mask].sum())
            pixels[name] += int(mask.sum())
        n_values = err.size * 3
        psnrs.append(_psnr(err.sum() / n_values))
        exact_silhouette.append(_psnr(err[~masks["silhouette"]].sum() / n_values))
        colour = np.clip(rgb / np.maximum(alpha, 1e-6), 0.0, 1.0)
        physical = colour * alpha + background * (1.0 - alpha)
        ceiling.append(_psnr(((physical - gt) ** 2).mean()))
    total_error, total_pixels = sum(sq_error.values()), sum(pixels.values())
    print_table(
        f"squared error of {len(found)} test renders by ground-truth alpha ({args.renders})",
        ["pixels", "share of pixels %", "share of squared error %", "PSNR within class dB"],
        [[name, 100.0 * pixels[name] / total_pixels, 100.0 * sq_error[name] / max(total_error, 1e-30),
          _psnr(sq_error[name] / max(3 * pixels[name], 1))] for name in CLASSES],
    )
    print_table(
        "per-image means",
        ["figure", "dB"],
        [["mean PSNR of the renders (8-bit PNG)", float(np.mean(psnrs))],
         ["mean PSNR with exact silhouettes", float(np.mean(exact_silhouette))],
         ["physical-composite ceiling (ground truth alone)", float(np.mean(ceiling))]],
    )


if __name__ == "__main__":
    main()
