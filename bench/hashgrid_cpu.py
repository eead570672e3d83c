"""Hash encoding on a CPU: the reference against the per-corner fast path, side by side.

For the CPU preset's grid (configs/small.json: L=8, F=2, T=2^15) and the default grid (L=16, F=2,
T=2^19), float32 tables, it times :func:`trainer.encoding.hashgrid.hash_grid_encode_reference`
and :func:`trainer.encoding.corner_hashgrid.hash_grid_encode_corners` on the same points: the
forward pass without autograd (what evaluation, rendering and the occupancy update run) and
forward + backward with respect to the table (what a training step runs), and prints the largest
difference of their features. Median of ``--repeats`` after one warm-up call, alternating the two
functions so that a change of the machine's load hits both.

    python bench/hashgrid_cpu.py                  # 2^16 points, 1 thread (the CPU preset's)
    python bench/hashgrid_cpu.py --threads 2 --points 262144
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import machine_description, print_table

from trainer.encoding.corner_hashgrid import hash_grid_encode_corners
from trainer.encoding.hashgrid import HashGridConfig, hash_grid_encode_reference, level_offsets

GRIDS = {
    "CPU preset (L=8, T=2^15)": HashGridConfig(n_levels=8, n_features_per_level=2, log2_hashmap_size=15,
                                               base_resolution=16),
    "default (L=16, T=2^19)": HashGridConfig(),
}
ENCODERS = {"reference": hash_grid_encode_reference, "corners": hash_grid_encode_corners}


def seconds(call) -> float:
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2**16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{machine_description()}, {args.threads} thread(s), {args.points} points")
    rows = []
    for grid_name, cfg in GRIDS.items():
        generator = torch.Generator().manual_seed(0)
        table = (torch.rand(level_offsets(cfg)[-1], 2, generator=generator) - 0.5).requires_grad_()
        x = torch.rand(args.points, 3, generator=generator)
        upstream = torch.randn(args.points, cfg.output_dim, generator=generator)

        def forward(encode):
            with torch.no_grad():
                encode(x, table, cfg)

        def forward_backward(encode):
            torch.autograd.grad((encode(x, table, cfg) * upstream).sum(), table)

        times = {(name, kind): [] for name in ENCODERS for kind in ("fwd", "fwd_bwd")}
        for name, encode in ENCODERS.items():
            forward(encode)
            forward_backward(encode)
        for _ in range(args.repeats):
            for name, encode in ENCODERS.items():
                times[name, "fwd"].append(seconds(lambda: forward(encode)))
                times[name, "fwd_bwd"].append(seconds(lambda: forward_backward(encode)))
        with torch.no_grad():
            diff = float((hash_grid_encode_corners(x, table, cfg) - hash_grid_encode_reference(x, table, cfg)).abs().max())
        ms = {key: statistics.median(values) * 1e3 for key, values in times.items()}
        for name in ENCODERS:
            rows.append([grid_name, name, ms[name, "fwd"], args.points / ms[name, "fwd"] / 1e3,
                         ms[name, "fwd_bwd"], args.points / ms[name, "fwd_bwd"] / 1e3,
                         ms["reference", "fwd"] / ms[name, "fwd"], ms["reference", "fwd_bwd"] / ms[name, "fwd_bwd"],
                         diff if name == "corners" else 0.0])
    print_table("hash encoding on a CPU (median ms; M points/s; speed-up over the reference)",
                ["grid", "encoder", "fwd_ms", "fwd_Mpoints_per_s", "fwd_bwd_ms", "fwd_bwd_Mpoints_per_s",
                 "fwd_speedup", "fwd_bwd_speedup", "max_abs_diff"], rows)


if __name__ == "__main__":
    main()
