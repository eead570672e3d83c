"""Samples per ray and where along the rays they fall, per config variant (prints a table).

Trains one single-process trainer per variant (same seed, same scene) for ``--steps`` steps or
``--time-budget`` seconds, then reports what the step marches and trains on:

* rays per step, trained samples per ray (the kept ones with ``training.compact_samples``, which
  size the batch) and the step time, from the metrics records of the last 20 % of the steps (of
  those since the previous row);
* on ``--probe-rays`` training rays drawn once (the sampler's draws are rewound, so training is not
  disturbed): marched samples per ray, kept samples per ray (those in front of the early stop,
  transmittance >= 1e-4), and the share of the kept samples in each level of the occupancy grid
  (level 0 = the unit cube, the scene box's cascades after it, then the contracted background
  shell when the scene model has one);
* the occupied share of each level's cells;
* held-out PSNR on ``--eval-images`` evenly spaced test views.

    python bench/samples_per_ray.py --scene ../shared/data/fox --config configs/small.json \
        --downscale 8 --steps 300,600 --set training.device=cpu --set training.max_march_steps=1024 \
        --variant box:training.scene_model=box --variant defaults
    python bench/samples_per_ray.py --scene .scenes/fox --time-budget 60 --eval-images 7 \
        --variant box:training.scene_model=box --variant defaults      # one GPU (bench/gpu_run.sh background)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.data.images import load_pixel_table
from trainer.render.compact import kept_counts
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE
from trainer.train.loop import Trainer


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``"name:a.b=1,c.d=x"`` → ("name", {"a.b": 1, "c.d": "x"}); ``"base"`` → ("base", {})."""
    name, _, rest = text.partition(":")
    return name, dict(parse_override(item) for item in rest.split(",") if item.strip())


@torch.no_grad()
def probe(trainer: Trainer, n_rays: int) -> dict[str, object]:
    """Marched and kept samples per ray on ``n_rays`` training rays (no jitter), the share of the
    kept samples per grid level and the occupied share of each level's cells."""
    state = trainer.sampler.rng_state()
    batch = trainer.sampler.sample(n_rays)
    trainer.sampler.set_rng_state(state)
    samples = trainer.march(batch.rays_o, batch.rays_d, jitter=False)
    grid = trainer.grid
    with trainer.inference_weights():
        sigmas = trainer.field.density(samples.positions).float()
    kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
    first = samples.packed_info[:, 0]
    rank = torch.arange(samples.n_samples, device=first.device) - first[samples.ray_indices]
    kept_mask = rank < kept[samples.ray_indices]
    level, _, _ = grid.locate(samples.positions)
    n_kept = max(int(kept_mask.sum()), 1)
    shares = [float(((level == c) & kept_mask).sum()) / n_kept for c in range(grid.levels)]
    occupied = grid.occupancy_mask().float().mean(dim=-1).tolist()
    return {
        "marched_per_ray": samples.n_samples / n_rays,
        "kept_per_ray": float(kept.float().mean()),
        "kept_share": "/".join(f"{s:.2f}" for s in shares),
        "occupied": "/".join(f"{o:.2f}" for o in occupied),
    }


def last_records(records: list[dict], first_step: int, last_step: int) -> list[dict]:
    """The metrics records of the last 20 % of the steps from ``first_step`` to ``last_step`` (at
    least the last record)."""
    since = last_step - 0.2 * (last_step - first_step)
    late = [r for r in records if r["step"] > since and r.get("rays_per_step") is not None]
    return late or records[-1:]


def mean(values) -> float:
    values = list(values)
    return sum(values) / max(len(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None, help="base config (default: ngptune's defaults)")
    parser.add_argument("--downscale", type=int, default=None, help="shrink every image by this factor")
    parser.add_argument("--steps", default="300",
                        help="training steps per variant; a comma-separated list probes at each (one row each)")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds of training per variant (instead of --steps)")
    parser.add_argument("--probe-rays", type=int, default=2048)
    parser.add_argument("--eval-images", type=int, default=2, help="held-out views scored (evenly spaced); 0: none")
    parser.add_argument("--variant", dest="variants", action="append", default=[])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    try:
        stops = sorted({int(x) for x in args.steps.split(",")})
    except ValueError:
        parser.error(f"--steps: expected comma-separated integers, got {args.steps!r}")
    if min(stops) < 1 or args.probe_rays < 1 or args.eval_images < 0 or (args.downscale is not None and args.downscale < 1):
        parser.error("--steps, --probe-rays and --downscale must be >= 1 and --eval-images >= 0")
    if args.time_budget is not None and not args.time_budget > 0:
        parser.error(f"--time-budget: expected seconds > 0, got {args.time_budget}")
    variants = [parse_variant(v) for v in (args.variants or ["base"])]
    scene = load_scene(args.scene, downscale=args.downscale)
    pixels = load_pixel_table(scene.frames("train"), downscale=scene.downscale)
    common = dict(parse_override(s) for s in args.overrides)
    rows = []
    for name, overrides in variants:
        cfg = apply_overrides(load_config(args.config), {**common, **overrides})
        trainer = Trainer(cfg, scene, pixel_table=pixels)
        for stop in [None] if args.time_budget is not None else stops:
            steps_before = trainer.step
            records: list[dict] = []
            if stop is None:
                trainer.train(n_steps=2**31 - 1, time_budget_s=args.time_budget, on_log=records.append)
            else:
                trainer.train(n_steps=stop, on_log=records.append)
            late = last_records(records, steps_before, trainer.step)
            rays = mean(r["rays_per_step"] for r in late)
            per_ray = mean(r["samples_per_step"] for r in late) / max(rays, 1e-9)
            step_ms = mean(r["step_time_ms"] for r in late)
            found = probe(trainer, args.probe_rays)
            psnr = float("nan")
            if args.eval_images:
                psnr = trainer.evaluate(split="test", max_images=args.eval_images, save_renders=False)["mean_psnr_db"]
            print(f"{name}: step {trainer.step}, {trainer.scene_model}, rays/step {rays:.0f}, samples/ray "
                  f"{per_ray:.1f}, step {step_ms:.1f} ms, {found}, held-out PSNR {psnr:.2f} dB", flush=True)
            rows.append([name, trainer.scene_model, trainer.step, trainer.train_time_s, step_ms, rays, per_ray,
                         found["marched_per_ray"], found["kept_per_ray"], found["kept_share"], found["occupied"],
                         psnr])
        trainer.close()
    print_table(
        f"Samples per ray, {args.scene.name} (downscale {scene.downscale}, aabb_scale {scene.aabb_scale}), "
        f"{args.probe_rays} probe rays, {args.eval_images} held-out views, {machine_description()}",
        ["variant", "scene model", "steps", "train s", "step ms", "rays/step", "samples/ray",
         "marched/ray", "kept/ray", "kept share per level", "occupied per level", "held-out PSNR dB"],
        rows,
    )


if __name__ == "__main__":
    main()
