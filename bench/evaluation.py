"""Evaluation speed and the honesty of its estimate, on a trained run.

For each ``--batch-samples`` value (samples per field evaluation; ``0`` = a whole chunk of rays
at once, the renderer without batching), renders the run's evaluation views as the final
evaluation does (``--views`` of them, evenly spaced, ``training.eval_spp``) and prints the
estimate the trainer would print before it (:func:`trainer.train.eval_estimate.measure_eval_seconds`
with the same batching), the time taken, the estimate's error and the field's sample rate.

    python bench/evaluation.py --run runs/fox90 --views 1 --threads 1
    python bench/evaluation.py --run runs/lego --views 4 --batch-samples 0 65536 262144
    python bench/evaluation.py --run runs/fox90 --threads 1 --field-only --batch-samples 16384 65536 262144 1048576

``--field-only`` times the field alone (2^20 random points in the scene box, forward without
gradients) at each batch size instead: the per-sample rate the renderer gets from its batches.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from unittest import mock

import torch
from _common import machine_description, print_table

import trainer.train.evaluate as evaluate_module
from trainer.inference.loading import load_model
from trainer.train.eval_estimate import measure_eval_seconds
from trainer.train.evaluate import eval_split_name, evaluation_frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="run folder, snapshot or checkpoint folder")
    parser.add_argument("--scene", type=Path, default=None, help="the scene, if it moved since training")
    parser.add_argument("--device", default=None)
    parser.add_argument("--views", type=int, default=1, help="evaluation views (evenly spaced over the split)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--batch-samples", type=int, nargs="+", default=[0, 2**16],
                        help="samples per field evaluation; 0: a whole chunk of rays at once")
    parser.add_argument("--field-only", action="store_true", help="time the field alone at each batch size")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = load_model(args.run, args.scene, args.device)
    trainer = model.trainer
    if args.field_only:
        field_rates(model, [b for b in args.batch_samples if b > 0])
        return
    split = eval_split_name(trainer)
    frames = [f for _, f in evaluation_frames(trainer.scene.frames(split), args.views)]
    pixels = sum(f.intrinsics.width * f.intrinsics.height for f in frames)
    spp = trainer.cfg.training.eval_spp
    rows = []
    for batch in args.batch_samples:
        sizes = {key: batch if batch > 0 else 2**62 for key in evaluate_module.EVAL_BATCH_SAMPLES}
        with mock.patch.dict(evaluate_module.EVAL_BATCH_SAMPLES, sizes):
            t0 = time.perf_counter()
            estimate = measure_eval_seconds(trainer, frames, spp)
            probe_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = trainer.evaluate(max_images=args.views, save_renders=False)
            took = time.perf_counter() - t0
        rows.append([("a chunk at once" if batch == 0 else str(batch)), f"{estimate:.1f}", f"{took:.1f}",
                     f"{estimate / took:.2f}", f"{probe_s:.1f}", f"{pixels * spp / took:.3g}",
                     f"{result['mean_psnr_db']:.2f}"])
    model.close()
    k = frames[0].intrinsics
    print_table(f"Evaluation of {len(frames)} {split} view(s) of {k.width}x{k.height}, spp {spp}, step {model.step}, "
                f"{torch.get_num_threads()} thread(s) ({machine_description()})",
                ["samples per field call", "estimate s", "took s", "estimate / took", "probe s", "rays/s", "PSNR dB"],
                rows)


def field_rates(model, batches: list[int], points: int = 2**20) -> None:
    """Print the field's forward rate (samples/s, best of two passes) at each batch size."""
    trainer = model.trainer
    generator = torch.Generator().manual_seed(0)
    low, high = trainer.aabb[0].cpu(), trainer.aabb[1].cpu()
    positions = (torch.rand(points, 3, generator=generator) * (high - low) + low).to(model.device)
    directions = torch.nn.functional.normalize(torch.randn(points, 3, generator=generator), dim=-1).to(model.device)
    rows = []
    trainer.field.eval()
    with torch.no_grad():
        for batch in batches:
            best = float("inf")
            for _ in range(2):
                t0 = time.perf_counter()
                for start in range(0, points, batch):
                    trainer.field(positions[start:start + batch], directions[start:start + batch])
                if model.device.type == "cuda":
                    torch.cuda.synchronize(model.device)
                best = min(best, time.perf_counter() - t0)
            rows.append([str(batch), f"{points / best:.3g}"])
    model.close()
    print_table(f"Field forward, {points} random points, {torch.get_num_threads()} thread(s) ({machine_description()})",
                ["samples per call", "samples/s"], rows)


if __name__ == "__main__":
    main()
