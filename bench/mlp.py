"""The fused MLP kernels (trainer/model/triton_mlp.py) per product precision and launch setting.

Times the field head's forward, forward+backward and the density-only pass (with and without a
live count of half the rows) at instant-ngp's shapes (32 hash-grid features, width 64, SH degree
4), against the PyTorch path, and prints each variant's largest error against the float32
PyTorch reference (relative to each tensor's largest magnitude). Median of ``--reps`` CUDA-event
timings after a warm-up; every variant in one process, so the ratios are side by side.

    python bench/mlp.py --samples 262144 --density-samples 1048576
"""

from __future__ import annotations

import argparse
import itertools

import torch
from _common import machine_description, print_table

from trainer.encoding.hashgrid import HashGridConfig
from trainer.encoding.sh import sh_encode
from trainer.model import triton_mlp
from trainer.model.field import NGPField
from trainer.model.mlp import MLPConfig

AABB = torch.tensor([[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]])


def _time_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _field(precision: str, fused: bool) -> NGPField:
    grid = HashGridConfig(n_levels=16, n_features_per_level=2, log2_hashmap_size=19, base_resolution=16,
                          per_level_scale=1.38)
    nets = (MLPConfig(n_neurons=64, n_hidden_layers=1), MLPConfig(n_neurons=64, n_hidden_layers=2))
    return NGPField(AABB.cuda(), grid, *nets, backend="torch", fused_mlp=fused, mlp_precision=precision).cuda()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2**18)
    parser.add_argument("--density-samples", type=int, default=2**20)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="only the default launch settings per precision")
    args = parser.parse_args()
    torch.manual_seed(0)
    n, nd = args.samples, args.density_samples
    ref = _field("ieee", fused=False)
    with torch.no_grad():
        for p in ref.parameters():
            if p.ndim == 2:
                p.copy_((torch.rand_like(p) * 2 - 1) * (6.0 / (p.shape[0] + p.shape[1])) ** 0.5 * 2)
    features = (torch.rand(n, 32, device="cuda") * 2 - 1) * 0.5
    features_d = (torch.rand(nd, 32, device="cuda") * 2 - 1) * 0.5
    sh = torch.nn.functional.normalize(torch.randn(n, 3, device="cuda"), dim=1)
    sh16 = sh_encode(sh, 4).contiguous()
    g_sigma = torch.randn(n, device="cuda") * 1e-3
    g_rgb = torch.randn(n, 3, device="cuda") * 1e-3
    dw, cw = ref.density_mlp.weights(), ref.rgb_mlp.weights()
    count = torch.tensor(nd // 2, device="cuda")

    def reference():
        x = features.clone().requires_grad_(True)
        h = ref.density_mlp(x)
        sigma = torch.exp(h[:, 0])
        rgb = torch.sigmoid(ref.rgb_mlp(torch.cat([h[:, 1:], sh16], dim=1)))
        return x, sigma, rgb

    x_ref, s_ref, c_ref = reference()
    grads_ref = torch.autograd.grad((s_ref * g_sigma).sum() + (c_ref * g_rgb).sum(), [x_ref, *dw, *cw])
    with torch.no_grad():
        d_ref = torch.exp(ref.density_mlp(features_d)[:, 0])

    def torch_fwd():
        with torch.no_grad():
            reference()

    def torch_fwd_bwd():
        x, sigma, rgb = reference()
        torch.autograd.grad((sigma * g_sigma).sum() + (rgb * g_rgb).sum(), [x, *dw, *cw])

    rows = [["torch (highest)", _time_ms(torch_fwd, args.reps), _time_ms(torch_fwd_bwd, args.reps), "-", "-", 0.0]]
    defaults = dict(triton_mlp.KERNEL_SETTINGS)
    if args.quick:
        settings = [defaults]
    else:
        settings = []
        for f_rows, f_warps, b_rows, b_warps, pps in itertools.product((64, 128), (4, 8), (32, 64), (4, 8), (2, 4, 8)):
            settings.append(dict(defaults, forward_rows=f_rows, forward_warps=f_warps, backward_rows=b_rows,
                                 backward_warps=b_warps, density_rows=f_rows, density_warps=f_warps,
                                 programs_per_sm=pps))
    for precision in ("ieee", "tf32", "bf16"):
        for setting in (settings if precision != "ieee" else [defaults]):
            triton_mlp.KERNEL_SETTINGS.update(setting)

            def fwd():
                with torch.no_grad():
                    triton_mlp.fused_field_head(features, sh16, dw, cw, precision)

            def fwd_bwd():
                x = features.clone().requires_grad_(True)
                sigma, rgb = triton_mlp.fused_field_head(x, sh16, dw, cw, precision)
                torch.autograd.grad((sigma * g_sigma).sum() + (rgb * g_rgb).sum(), [x, *dw, *cw])

            def dens():
                triton_mlp.fused_density(features_d, dw, precision)

            def dens_count():
                triton_mlp.fused_density(features_d, dw, precision, count)

            try:
                x = features.clone().requires_grad_(True)
                sigma, rgb = triton_mlp.fused_field_head(x, sh16, dw, cw, precision)
                grads = torch.autograd.grad((sigma * g_sigma).sum() + (rgb * g_rgb).sum(), [x, *dw, *cw])
                with torch.no_grad():
                    d = triton_mlp.fused_density(features_d, dw, precision)
                pairs = [(sigma, s_ref), (rgb, c_ref), (d, d_ref), *zip(grads, grads_ref)]
                err = max(float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30) for a, b in pairs)
                timing = [_time_ms(fwd, args.reps), _time_ms(fwd_bwd, args.reps), _time_ms(dens, args.reps),
                          _time_ms(dens_count, args.reps)]
            except Exception as exc:  # a launch setting the compiler refuses (registers, shared memory)
                print(f"{precision} {setting}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            label = (f"{precision} f{setting['forward_rows']}x{setting['forward_warps']} "
                     f"b{setting['backward_rows']}x{setting['backward_warps']} p{setting['programs_per_sm']}")
            rows.append([label, *timing, err])
    triton_mlp.KERNEL_SETTINGS.update(defaults)
    rows.sort(key=lambda r: (r[0] != "torch (highest)", r[2]))
    print_table(f"fused MLP, {n} samples (density {nd}; count {nd // 2}), {machine_description()}",
                ["variant", "forward_ms", "fwd_bwd_ms", "density_ms", "density_half_count_ms", "max_rel_err"],
                rows[:40])


if __name__ == "__main__":
    main()
