"""Test PSNR after a fixed number of steps for config variants, side by side (prints a table).

Trains one single-process trainer per variant for ``--steps`` steps from the same seed and
evaluates ``--eval-images`` evenly spaced test views every ``--eval-every`` steps, so quality
changes of a code path or a setting show at equal steps (and equal training time is a column).
A variant is ``name:key=value,key=value`` (dotted config keys); ``base`` applies no change.
``--eval-spp 1,8`` scores every checkpoint with each number of averaged renders per view (8 is
instant-ngp's ``run.py`` protocol); ``--eval-train K`` also scores K training views (at the first
spp), so the train-vs-test gap shows whether a plateau is under- or over-fitting.
``--without-alpha white`` trains on a copy of the scene whose images are composited onto white
and saved without alpha (the same object photographed on a white backdrop, an RGB capture).

    python bench/psnr_at_steps.py --scene .scenes/lego_400 --steps 3000 \
        --variant base --variant no_prefetch:training.prefetch_march=false
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.data.images import load_pixel_table
from trainer.train.loop import Trainer


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``"name:a.b=1,c.d=x"`` → ("name", {"a.b": 1, "c.d": "x"}); ``"base"`` → ("base", {})."""
    name, _, rest = text.partition(":")
    overrides = dict(parse_override(item) for item in rest.split(",") if item.strip())
    return name, overrides


def without_alpha(scene: Path, colour: str) -> Path:
    """A copy of ``scene`` (in a temporary folder) whose PNG images are composited onto ``colour``
    and saved as RGB."""
    from PIL import Image

    copy = Path(tempfile.mkdtemp(prefix="psnr-at-steps-rgb-")) / scene.name
    shutil.copytree(scene, copy)
    fill = (255, 255, 255, 255) if colour == "white" else (0, 0, 0, 255)
    for png in copy.rglob("*.png"):
        rgba = Image.open(png).convert("RGBA")
        Image.alpha_composite(Image.new("RGBA", rgba.size, fill), rgba).convert("RGB").save(png)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None, help="base config (default: ngptune's defaults)")
    parser.add_argument("--downscale", type=int, default=None, help="shrink every image by this factor (default: the automatic rule, docs/loading.md)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--eval-images", type=int, default=20)
    parser.add_argument("--variant", dest="variants", action="append", default=[])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--eval-spp", default="1", help="comma-separated renders per view, e.g. 1,8")
    parser.add_argument("--eval-train", type=int, default=0, help="also score this many training views")
    parser.add_argument("--without-alpha", choices=("white", "black"), default=None,
                        help="train on the scene's images composited onto this colour, saved without alpha")
    args = parser.parse_args()
    try:
        spps = [int(x) for x in args.eval_spp.split(",")]
    except ValueError:
        parser.error(f"--eval-spp: expected comma-separated integers, got {args.eval_spp!r}")
    if not all(1 <= spp <= 64 for spp in spps):
        parser.error(f"--eval-spp: each value must be in [1, 64], got {args.eval_spp!r}")
    if args.eval_images < 1 or args.eval_train < 0 or args.steps < 1 or args.eval_every < 1 or (args.downscale is not None and args.downscale < 1):
        parser.error("--steps, --eval-every, --eval-images and --downscale must be >= 1 and --eval-train >= 0")
    variants = [parse_variant(v) for v in (args.variants or ["base"])]
    scene_path = args.scene if args.without_alpha is None else without_alpha(args.scene, args.without_alpha)
    scene = load_scene(scene_path, downscale=args.downscale)
    pixels = load_pixel_table(scene.frames("train"), downscale=scene.downscale)
    common = dict(parse_override(s) for s in args.overrides)
    checkpoints = list(range(args.eval_every, args.steps + 1, args.eval_every)) or [args.steps]
    rows = []
    for name, overrides in variants:
        cfg = apply_overrides(load_config(args.config), {**common, **overrides})
        trainer = Trainer(cfg, scene, pixel_table=pixels)
        curves: dict[str, list[float]] = {}
        for stop in checkpoints:
            trainer.train(n_steps=stop)
            scored = [(f"test spp{spp}", "test", args.eval_images, spp) for spp in spps]
            if args.eval_train:
                scored.append((f"train spp{spps[0]}", "train", args.eval_train, spps[0]))
            for label, split, count, spp in scored:
                result = trainer.evaluate(split=split, max_images=count, save_renders=False, spp=spp)
                curves.setdefault(label, []).append(result["mean_psnr_db"])
                print(f"{name}: step {trainer.step} train {trainer.train_time_s:.1f} s {label} psnr "
                      f"{result['mean_psnr_db']:.2f} dB", flush=True)
        rows += [[name, label, *curve, trainer.train_time_s] for label, curve in curves.items()]
        trainer.close()
    print_table(
        f"PSNR (dB; {args.eval_images} test views, {args.eval_train} train views) at equal steps, "
        f"{args.scene.name}, {machine_description()}",
        ["variant", "scored on", *[f"step {s}" for s in checkpoints], "train s"],
        rows,
    )


if __name__ == "__main__":
    main()
