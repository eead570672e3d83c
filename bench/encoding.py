"""Hash-grid encoding throughput: torch / triton / tcnn side by side (compare with ANCHORS.md).

Paper-era grid by default (L=16, F=2, T=2^19, N_min=16, b=1.5, fp16 table). For N = 2^18, 2^20,
2^22 and two point distributions — "random" (uniform in the unit cube) and "ray" (128 consecutive
samples along random rays) — it times the forward pass and forward+backward (gradient with respect
to the table) of every available backend, and checks triton against the torch reference (relative
error of the features and of the table gradient, on the same table).

Timing: median over ``--repeats`` repeats of ``--calls`` back-to-back calls (fewer when one call
is slow, so the torch reference at 2^22 stays within ~1 s per repeat), measured with CUDA events
on a GPU (``time.perf_counter`` on CPU), after warm-up calls (which include Triton compilation).
The calls rotate over ``--input-sets`` different point sets (and upstream gradients) so that the
timing is not of one buffer that sits in L2. The table backends are timed through
``backend.encode``; tiny-cuda-nn through its module, on its own output dtype (as ANCHORS.md does).

    python bench/encoding.py                   # GPU: full table
    python bench/encoding.py --csv enc.csv     # also write the rows as CSV
    python bench/encoding.py --sweep           # also sweep Triton BLOCK × num_warps at 2^20
    python bench/encoding.py --quick           # CPU smoke run (torch; triton under TRITON_INTERPRET=1)
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.encoding.backends import get_backend
from trainer.encoding.hashgrid import HashGridConfig, level_offsets
from trainer.contract.errors import ConfigError

SAMPLES_PER_RAY = 128
# instant-ngp's smallest ray-marching step, sqrt(3) / NERF_STEPS with NERF_STEPS = 1024
# (testbed_nerf.cu, MIN_CONE_STEPSIZE).
RAY_STEP = math.sqrt(3.0) / 1024
CSV_COLUMNS = [
    "n_points",
    "points",
    "backend",
    "table_dtype",
    "fwd_time_ms",
    "fwd_samples_per_s",
    "fwd_bwd_time_ms",
    "fwd_bwd_samples_per_s",
    "fwd_rel_err_vs_torch",
    "grad_rel_err_vs_torch",
]


def random_points(n: int, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """[n, 3] float32 uniform in the unit cube."""
    return torch.rand(n, 3, device=device, generator=generator)


def ray_points(n: int, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """[n, 3] float32: n / 128 rays, each 128 consecutive samples ``o + (k + ½)·dt·d``.

    Origins uniform in the unit cube, directions uniform on the sphere, ``dt = √3 / 1024``
    (instant-ngp's minimum step). Samples that leave the cube are reflected back into it at its
    faces (a triangle wave), so every sample is inside and consecutive samples stay neighbours.
    """
    assert n % SAMPLES_PER_RAY == 0, f"n must be a multiple of {SAMPLES_PER_RAY}, got {n}"
    n_rays = n // SAMPLES_PER_RAY
    origins = torch.rand(n_rays, 1, 3, device=device, generator=generator)
    directions = torch.randn(n_rays, 1, 3, device=device, generator=generator)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    t = (torch.arange(SAMPLES_PER_RAY, device=device) + 0.5) * RAY_STEP
    positions = origins + directions * t[None, :, None]  # [n_rays, 128, 3]
    folded = torch.remainder(positions, 2.0)
    return (1.0 - (1.0 - folded).abs()).reshape(n, 3)


POINT_GENERATORS = {"random": random_points, "ray": ray_points}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call_ms(
    fn, n_inputs: int, device: torch.device, repeats: int, max_calls: int, target_s: float
) -> float:
    """Median over ``repeats`` of the mean time of back-to-back calls ``fn(i)``, in ms.

    ``fn(i)`` runs on input set ``i % n_inputs``. Calls per repeat: ``max_calls``, or fewer (at
    least 1) so one repeat takes about ``target_s``.
    """
    for i in range(3 if device.type == "cuda" else 1):  # warm-up: compilation, allocator, clocks
        fn(i % n_inputs)
    _sync(device)
    t0 = time.perf_counter()
    fn(0)
    _sync(device)
    one_call_s = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, min(max_calls, int(target_s / one_call_s)))
    per_call_ms = []
    for r in range(repeats):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for c in range(calls):
                fn((r * calls + c) % n_inputs)
            end.record()
            end.synchronize()
            per_call_ms.append(start.elapsed_time(end) / calls)
        else:
            t0 = time.perf_counter()
            for c in range(calls):
                fn((r * calls + c) % n_inputs)
            per_call_ms.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(per_call_ms)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


class _Encoder:
    """One backend ready to time: ``forward(x)`` and ``forward_backward(x, grad)``."""

    def __init__(self, name: str, cfg: HashGridConfig, table: torch.Tensor, dtype: torch.dtype):
        device = table.device
        self.name = name
        self.backend = get_backend(name, device, dtype)
        if self.backend.owns_parameters:
            self.module = self.backend.build_module(cfg, dtype, device)
            self.parameters = [p for p in self.module.parameters() if p.requires_grad]
            self._encode = self.module
        else:
            self.parameters = [table]
            self._encode = lambda x: self.backend.encode(x, table, cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._encode(x)

    def forward_backward(self, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
        """Table gradient for upstream ``grad`` (in the output dtype: see ``upstream``)."""
        return torch.autograd.grad(self._encode(x), self.parameters, grad)

    def upstream(self, grads: list[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
        """``grads`` in this backend's output dtype (tiny-cuda-nn may output float16)."""
        dtype = self.forward(x[:128]).dtype
        return [grad.to(dtype) for grad in grads]


def bench_backends(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Time every available backend at every size and point distribution; rows as dicts."""
    cfg = HashGridConfig(
        n_levels=args.n_levels,
        n_features_per_level=args.n_features,
        log2_hashmap_size=args.log2_hashmap_size,
        base_resolution=args.base_resolution,
        per_level_scale=args.per_level_scale,
    )
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    table = torch.empty(level_offsets(cfg)[-1], cfg.n_features_per_level, device=device)
    table = table.uniform_(-1.0, 1.0, generator=generator).to(dtype).requires_grad_()

    encoders = []
    for name in args.backends:
        try:
            encoders.append(_Encoder(name, cfg, table, dtype))
        except ConfigError as error:
            print(f"skipping backend {name}: {error}")
    table_mib = table.numel() * table.element_size() / 2**20
    print(f"grid {cfg}, {args.dtype} table of {table_mib:.1f} MiB")
    if not encoders:
        return []

    rows = []
    for log2_n in args.log2_sizes:
        n = 1 << log2_n
        for points in args.points:
            inputs = [
                POINT_GENERATORS[points](n, device, generator) for _ in range(args.input_sets)
            ]
            grads = [
                torch.randn(n, cfg.output_dim, device=device, generator=generator)
                for _ in range(args.input_sets)
            ]
            errors = _triton_vs_torch(encoders, inputs[0], grads[0])
            for encoder in encoders:
                upstream = encoder.upstream(grads, inputs[0])
                fwd_ms = time_per_call_ms(
                    lambda i: encoder.forward(inputs[i]),
                    args.input_sets, device, args.repeats, args.calls, args.target_s,
                )
                fwd_bwd_ms = time_per_call_ms(
                    lambda i: encoder.forward_backward(inputs[i], upstream[i]),
                    args.input_sets, device, args.repeats, args.calls, args.target_s,
                )
                fwd_err, grad_err = errors if encoder.name == "triton" else (math.nan, math.nan)
                rows.append({
                    "n_points": n,
                    "points": points,
                    "backend": encoder.name,
                    "table_dtype": args.dtype,
                    "fwd_time_ms": fwd_ms,
                    "fwd_samples_per_s": n / fwd_ms * 1e3,
                    "fwd_bwd_time_ms": fwd_bwd_ms,
                    "fwd_bwd_samples_per_s": n / fwd_bwd_ms * 1e3,
                    "fwd_rel_err_vs_torch": fwd_err,
                    "grad_rel_err_vs_torch": grad_err,
                })
            del inputs, grads
    return rows


def _triton_vs_torch(encoders: list[_Encoder], x: torch.Tensor, grad: torch.Tensor):
    """(feature, table-gradient) relative errors of triton vs torch on the same table, or NaNs."""
    by_name = {encoder.name: encoder for encoder in encoders}
    if "triton" not in by_name or "torch" not in by_name:
        return math.nan, math.nan
    triton_features = by_name["triton"].forward(x)
    torch_features = by_name["torch"].forward(x)
    (triton_grad,) = by_name["triton"].forward_backward(x, grad)
    (torch_grad,) = by_name["torch"].forward_backward(x, grad)
    return _rel_err(triton_features, torch_features), _rel_err(triton_grad, torch_grad)


def sweep_triton(args: argparse.Namespace, device: torch.device) -> None:
    """Forward and backward kernel times of Triton over BLOCK × num_warps at 2^20 random points."""
    from trainer.encoding import triton_hashgrid

    cfg = HashGridConfig(
        n_levels=args.n_levels,
        n_features_per_level=args.n_features,
        log2_hashmap_size=args.log2_hashmap_size,
        base_resolution=args.base_resolution,
        per_level_scale=args.per_level_scale,
    )
    n = 1 << args.sweep_log2_n
    generator = torch.Generator(device=device).manual_seed(args.seed)
    table = torch.empty(level_offsets(cfg)[-1], cfg.n_features_per_level, device=device)
    table = table.uniform_(-1.0, 1.0, generator=generator).to(getattr(torch, args.dtype))
    inputs = [random_points(n, device, generator) for _ in range(args.input_sets)]
    grads = [torch.randn(n, cfg.output_dim, device=device, generator=generator)
             for _ in range(args.input_sets)]
    rows = []
    for block in (64, 128, 256, 512, 1024):
        for num_warps in (1, 2, 4, 8):
            if block < 32 * num_warps:
                continue
            fwd_ms = time_per_call_ms(
                lambda i: triton_hashgrid.hash_grid_forward_triton(
                    inputs[i], table, cfg, block=block, num_warps=num_warps
                ),
                args.input_sets, device, args.repeats, args.calls, args.target_s,
            )
            bwd_ms = time_per_call_ms(
                lambda i: triton_hashgrid.hash_grid_backward_triton(
                    inputs[i], grads[i], cfg, block=block, num_warps=num_warps
                ),
                args.input_sets, device, args.repeats, args.calls, args.target_s,
            )
            rows.append([block, num_warps, fwd_ms, n / fwd_ms / 1e6, bwd_ms, n / bwd_ms / 1e6])
    print_table(
        f"Triton launch sweep, 2^{args.sweep_log2_n} random points, {args.dtype} table "
        f"(module defaults: forward BLOCK={triton_hashgrid.FORWARD_BLOCK} "
        f"warps={triton_hashgrid.FORWARD_NUM_WARPS}, "
        f"backward BLOCK={triton_hashgrid.BACKWARD_BLOCK} warps={triton_hashgrid.BACKWARD_NUM_WARPS})",
        ["BLOCK", "num_warps", "fwd_time_ms", "fwd_G_samples_per_s", "bwd_kernel_time_ms",
         "bwd_G_samples_per_s"],
        rows,
    )


def print_results(rows: list[dict], backends: list[str]) -> None:
    """A long table (one row per backend) and a side-by-side table in G samples/s."""
    print_table(
        "hash-grid encoding throughput (M samples/s = million samples per second)",
        ["N", "points", "backend", "fwd_ms", "fwd_M_samples_per_s", "fwd_bwd_ms",
         "fwd_bwd_M_samples_per_s", "fwd_rel_err", "grad_rel_err"],
        [[f"2^{int(math.log2(r['n_points']))}", r["points"], r["backend"], r["fwd_time_ms"],
          r["fwd_samples_per_s"] / 1e6, r["fwd_bwd_time_ms"], r["fwd_bwd_samples_per_s"] / 1e6,
          _fmt_err(r["fwd_rel_err_vs_torch"]), _fmt_err(r["grad_rel_err_vs_torch"])] for r in rows],
    )
    present = [b for b in backends if any(r["backend"] == b for r in rows)]
    table_rows = []
    for key in dict.fromkeys((r["n_points"], r["points"]) for r in rows):
        by_backend = {r["backend"]: r for r in rows if (r["n_points"], r["points"]) == key}
        row: list[object] = [f"2^{int(math.log2(key[0]))}", key[1]]
        row += [by_backend[b]["fwd_samples_per_s"] / 1e9 for b in present]
        row += [by_backend[b]["fwd_bwd_samples_per_s"] / 1e9 for b in present]
        triton_row = by_backend.get("triton")
        row.append(_fmt_err(triton_row["fwd_rel_err_vs_torch"]) if triton_row else "-")
        table_rows.append(row)
    print_table(
        "side by side, G samples/s (targets for triton on one H200, fp16 table, 2^20 random: "
        "fwd ≥ 1.5, fwd+bwd ≥ 0.33)",
        ["N", "points"] + [f"{b}_fwd" for b in present] + [f"{b}_fwd_bwd" for b in present]
        + ["triton_rel_err"],
        table_rows,
    )


def _fmt_err(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1e}"


def write_csv(rows: list[dict], path: Path) -> None:
    """One line per (N, points, backend) with the columns of CSV_COLUMNS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="CPU smoke run: N = 2^10, 2 repeats of at most 3 calls")
    parser.add_argument("--csv", type=Path, default=None, help="also write the rows to this CSV")
    parser.add_argument("--log2-sizes", type=int, nargs="+", default=None,
                        help="log2 of the point counts (default 18 20 22; 10 with --quick)")
    parser.add_argument("--points", nargs="+", choices=sorted(POINT_GENERATORS),
                        default=["random", "ray"])
    parser.add_argument("--backends", nargs="+", choices=["torch", "triton", "tcnn"],
                        default=["torch", "triton", "tcnn"])
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                        help="table dtype")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="most calls per repeat")
    parser.add_argument("--target-s", type=float, default=0.25,
                        help="fewer calls per repeat when one repeat would take longer than this")
    parser.add_argument("--input-sets", type=int, default=4, help="point sets rotated over")
    parser.add_argument("--n-levels", type=int, default=16)
    parser.add_argument("--n-features", type=int, default=2)
    parser.add_argument("--log2-hashmap-size", type=int, default=19)
    parser.add_argument("--base-resolution", type=int, default=16)
    parser.add_argument("--per-level-scale", type=float, default=1.5)
    parser.add_argument("--sweep", action="store_true",
                        help="also sweep Triton BLOCK × num_warps (GPU)")
    parser.add_argument("--sweep-log2-n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.log2_sizes is None:
        args.log2_sizes = [10] if args.quick else [18, 20, 22]
    if min(args.log2_sizes) < 7:
        parser.error(f"--log2-sizes: at least 7 (one ray of {SAMPLES_PER_RAY} samples)")
    if args.quick:
        args.repeats = 2
        args.calls = 3
        args.input_sets = 2
    return args


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.quick:
        print("no CUDA device: use --quick for a CPU smoke run")
        return
    print(f"hash-grid encoding benchmark on {machine_description()}")
    rows = bench_backends(args, device)
    print_results(rows, args.backends)
    if args.csv is not None:
        write_csv(rows, args.csv)
    if args.sweep:
        if device.type == "cuda":
            sweep_triton(args, device)
        else:
            print("--sweep needs a CUDA device")


if __name__ == "__main__":
    main()
