"""The ray march of a trained model with and without empty-space skipping, side by side.

Two batches of a trained run: training-like rays (``--train-rays`` random pixels of the training
views) through the fixed-capacity march (the captured training step's), and every pixel of one
orbit frame (``--width`` × ``--height``) through the packed march (the renderer's). Each batch is
marched with ``skip_empty`` on and off, alternated for ``--rounds`` rounds of ``--reps`` calls
(CUDA events; the first calls compile outside the clock); both walks must give identical
samples. Prints one table: ms per call, ratio, samples, and whether the samples are identical.

    python bench/march.py --run /tmp/ttp_default --scene .scenes/lego_400
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.data.rays import camera_rays_for_image
from trainer.inference.cameras import orbit_cameras, resize_cameras, scene_orbit
from trainer.inference.loading import load_model
from trainer.render.fixed_march import MarchBuffers
from trainer.render.occupancy import MIN_STEP_SIZE
from trainer.render.triton_march import march_fixed_triton, march_packed_triton, march_rule_tensor


def _timed_ms(call, reps: int, device: torch.device) -> float:
    if device.type != "cuda":  # a smoke run (TRITON_INTERPRET=1)
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        return (time.perf_counter() - t0) * 1e3 / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="run folder, snapshot or checkpoint folder")
    parser.add_argument("--scene", type=Path, default=None)
    parser.add_argument("--train-rays", type=int, default=40000, help="about lego_400's rays per training step")
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    model = load_model(args.run, args.scene, args.device)
    tr, scene = model.trainer, model.scene
    device = tr.device
    generator = torch.Generator(device="cpu").manual_seed(0)
    # training-like rays: random pixels of the training views
    frames = scene.frames("train")
    picked = torch.randperm(len(frames), generator=generator)[:16].tolist()
    rays = [camera_rays_for_image(frames[i], device) for i in picked]
    all_o, all_d = torch.cat([o for o, _ in rays]), torch.cat([d for _, d in rays])
    pick = torch.randperm(all_o.shape[0], generator=generator)[: args.train_rays].to(device)
    train_o, train_d = all_o[pick].contiguous(), all_d[pick].contiguous()
    # one orbit frame at the render size
    first = resize_cameras(frames[:1], args.width, args.height)[0]
    frame = orbit_cameras(scene_orbit(scene), 8, first.intrinsics)[1]
    render_o, render_d = camera_rays_for_image(frame, device)

    rule = dict(step_size=MIN_STEP_SIZE, cone_angle=tr.cone_angle, max_step_size=tr.max_step_size,
                max_steps=tr.cfg.training.max_march_steps)
    near = tr.cfg.training.near_distance
    box = tr.aabb.reshape(6).contiguous()
    rule_t = march_rule_tensor(MIN_STEP_SIZE, tr.cone_angle, tr.max_step_size, device)
    jitter = torch.rand(train_o.shape[0], device=device)
    n_train = int(march_packed_triton(train_o, train_d, tr.aabb, near, jitter, tr.grid, **rule)[5].sum())
    buffers = {skip: MarchBuffers(max(1, 2 * n_train), device) for skip in (True, False)}

    def train_call(skip: bool):
        return march_fixed_triton(train_o, train_d, box, rule_t, jitter, tr.grid, buffers[skip].outputs(),
                                  cone_angle=tr.cone_angle, max_steps=rule["max_steps"], near=near, skip_empty=skip)

    def render_call(skip: bool):
        return march_packed_triton(render_o, render_d, tr.aabb, near, None, tr.grid, skip_empty=skip, **rule)

    rows = []
    for name, call, n_rays in (("training batch, fixed capacity", train_call, train_o.shape[0]),
                               (f"orbit frame {args.width}x{args.height}, packed", render_call, render_o.shape[0])):
        outs = {skip: call(skip) for skip in (True, False)}  # compiles, and the identity check
        if name.startswith("training"):
            used = int(outs[False][0].sum())
            same = all(torch.equal(a, b) for a, b in zip(outs[True], outs[False])) and all(
                torch.equal(a[:used], b[:used]) for a, b in zip(buffers[True].outputs(), buffers[False].outputs()))
            n_samples = used
        else:
            same = all(torch.equal(a, b) for a, b in zip(outs[True], outs[False]))
            n_samples = int(outs[False][5].sum())
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for skip in (False, True):
                times[skip].append(_timed_ms(lambda: call(skip), args.reps, device))
        off, on = min(times[False]), min(times[True])
        rows.append([name, n_rays, n_samples, f"{off:.3f}", f"{on:.3f}", f"{off / on:.2f}", same])
    print_table(f"ray march with and without empty-space skipping, step {model.step}, {machine_description()}",
                ["batch", "rays", "samples", "ms step by step", "ms skipping", "speed-up", "identical samples"], rows)


if __name__ == "__main__":
    main()
