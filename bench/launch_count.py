"""Host-side launches of one training step, by phase and by operator (what keeps a host-bound step slow).

Warms up, then records ``--steps`` steps with ``torch.profiler`` and counts the runtime calls that
enqueue device work (kernel launches, memcpy/memset) per step, attributed to the trainer's phase
(``phase:<name>`` ranges of :class:`trainer.train.timing.PhaseTimer`) and to the top-level aten
operator that issued them. On a CUDA device it also prints device time per step by kernel name
(where the step's GPU time goes). On a CPU there are no runtime calls; the operator counts are printed.

    python bench/launch_count.py --scene ../shared/data/nerf_synthetic_lego_400
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from _common import machine_description, print_table
from torch.profiler import ProfilerActivity, profile

from trainer.contract.config import apply_overrides, load_config, parse_override
from trainer.data import load_scene
from trainer.train.loop import Trainer

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchCooperativeKernel",
                "cudaGraphLaunch")  # a graph replay counts as one launch


def _is_launch(name: str) -> bool:
    return any(name.startswith(prefix) for prefix in LAUNCH_CALLS)


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--downscale", type=int, default=1)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    cfg = load_config(args.config)
    overrides = dict(parse_override(s) for s in args.overrides)
    overrides.setdefault("training.log_every", 10**6)
    cfg = apply_overrides(cfg, overrides)
    trainer = Trainer(cfg, load_scene(args.scene, downscale=args.downscale), run_dir=None)
    every = cfg.training.occupancy_update_every
    warm = args.warmup + (-args.warmup) % every + 1  # the recorded steps hold no occupancy update
    trainer.train(n_steps=warm)
    trainer.synchronize()
    trainer.timer.record_functions = True
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if trainer.device.type == "cuda"
                 else [ProfilerActivity.CPU]) as prof:
        trainer.train(n_steps=warm + args.steps)
        trainer.synchronize()
    host_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    by_phase: collections.Counter = collections.Counter()
    by_op: collections.Counter = collections.Counter()
    ops: collections.Counter = collections.Counter()
    for event in prof.events():
        chain = list(_ancestors(event))
        phase = next((a.name[len("phase:"):] for a in chain if a.name.startswith("phase:")), "outside phases")
        aten = [a for a in chain if a.name.startswith("aten::") or a.name.startswith("triton") or "Backward" in a.name]
        if _is_launch(event.name):
            by_phase[phase] += 1
            by_op[(phase, aten[-1].name if aten else "(no aten op)")] += 1
        elif event.name.startswith("aten::") and not any(a.name.startswith("aten::") for a in chain):
            ops[event.name] += 1
    n = args.steps
    total = sum(by_phase.values())
    title = f"launches per step ({n} steps, {machine_description()}; host {host_ms:.2f} ms/step under the profiler)"
    print_table(title, ["phase", "launches"], [[p, c / n] for p, c in by_phase.most_common()] + [["total", total / n]])
    print_table("launches per step by phase and top-level operator", ["phase", "operator", "launches"],
                [[p, o, c / n] for (p, o), c in by_op.most_common(args.top)])
    print_table("top-level aten operators per step", ["operator", "calls"],
                [[o, c / n] for o, c in ops.most_common(args.top)] + [["total", sum(ops.values()) / n]])
    if trainer.device.type == "cuda":
        print_kernel_times(prof, n, args.top)
    trainer.close()


def print_kernel_times(prof, n_steps: int, top: int) -> None:
    """Table of device time per step (µs) by kernel name, largest first, with each kernel's share."""
    from torch.autograd import DeviceType

    kernels = []
    for avg in prof.key_averages():
        if avg.device_type != DeviceType.CUDA:
            continue
        device_us = getattr(avg, "self_device_time_total", None)
        if device_us is None:
            device_us = avg.self_cuda_time_total
        kernels.append((avg.key, device_us / n_steps, avg.count / n_steps))
    kernels.sort(key=lambda k: -k[1])
    total_us = sum(k[1] for k in kernels)
    rows = [[name[:90], us, calls, 100.0 * us / max(total_us, 1e-9)] for name, us, calls in kernels[:top]]
    print_table(f"device time per step by kernel (total {total_us:.0f} us)",
                ["kernel", "us_per_step", "calls_per_step", "share_pct"], rows + [["total", total_us, "", 100.0]])


if __name__ == "__main__":
    main()
