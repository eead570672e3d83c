"""The Triton compositing kernels (forward and backward) against :func:`composite` (the twin), and
the kept-sample count kernel against :func:`trainer.render.compact.kept_counts`.

As for the other Triton tests, the interpreter cases run in a fresh subprocess with
``TRITON_INTERPRET=1`` and print their observations as JSON; with CUDA the cases also run in-process
at full size. Values must agree to float32 rounding: the forward within 1e-5 (absolute, colours
in [0, 1]), the gradients within 1e-4 of their largest magnitude. Inputs are fresh random draws
(``NGPTUNE_TEST_SEED`` replays a run); the densities are large enough that early stopping
(T < 1e-4) cuts many rays, which the cases assert.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed


# (name, n_rays (CPU), n_rays (CUDA), most samples per ray, background: "per_ray" | "constant")
CASES = [
    ("two_blocks_per_ray_bg", 70, 1 << 14, 40, "per_ray"),
    ("long_rays_constant_bg", 9, 1 << 12, 300, "constant"),
    ("one_ray", 1, 1, 5, "per_ray"),
    ("rays_without_samples", 17, 1 << 10, 0, "per_ray"),
    ("no_rays", 0, 0, 5, "constant"),
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if b.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def observe(device: str, seed: int) -> list[dict]:
    from trainer.render.compact import kept_counts
    from trainer.render.march import PackedSamples
    from trainer.render.triton_volrend import composite_buffers_triton, composite_rgb_triton, kept_counts_triton
    from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE, composite

    generator = torch.Generator().manual_seed(seed)
    seen = []
    for name, n_cpu, n_gpu, most, bg_kind in CASES:
        n_rays = n_cpu if device == "cpu" else n_gpu
        counts = torch.randint(0, most + 1, (n_rays,), generator=generator)
        if n_rays > 2 and most:
            counts[1] = 0
            counts[2] = most
        n_samples = int(counts.sum())
        ray_indices = torch.repeat_interleave(torch.arange(n_rays), counts)
        packed_info = torch.stack((torch.cumsum(counts, 0) - counts, counts), dim=-1)
        sigmas = torch.rand(n_samples, generator=generator) * 80.0
        rgbs = torch.rand(n_samples, 3, generator=generator)
        dt = torch.rand(n_samples, generator=generator) * 0.05
        background = torch.rand(n_rays, 3, generator=generator) if bg_kind == "per_ray" else torch.rand(3, generator=generator)
        grad_out = torch.randn(n_rays, 3, generator=generator)
        moved = [x.to(device) for x in (sigmas, rgbs, dt, ray_indices, packed_info, background, grad_out)]
        sigmas, rgbs, dt, ray_indices, packed_info, background, grad_out = moved
        results = {}
        for backend in ("torch", "triton"):
            s, c = sigmas.clone().requires_grad_(), rgbs.clone().requires_grad_()
            if backend == "torch":
                rgb = composite(s, c, dt, ray_indices, n_rays, background).rgb
            else:
                rgb = composite_rgb_triton(s, c, dt, packed_info, background, EARLY_STOP_TRANSMITTANCE)
            if n_samples:
                rgb.backward(grad_out)
            results[backend] = (rgb.detach(), s.grad, c.grad)
        (ref, ref_gs, ref_gc), (fast, fast_gs, fast_gc) = results["torch"], results["triton"]
        record = {"case": name, "seed": seed, "n_rays": n_rays, "n_samples": n_samples,
                  "shape": list(fast.shape), "dtype": str(fast.dtype),
                  "forward_abs_err": float((fast - ref).abs().max()) if n_rays else 0.0}
        # the inference twin: rgb, opacity, depth and transmittance in one launch
        t = torch.cumsum(dt, 0)
        ref_all = composite(sigmas, rgbs, dt, ray_indices, n_rays, background, t=t)
        fast_all = composite_buffers_triton(sigmas, rgbs, dt, t, packed_info, background, EARLY_STOP_TRANSMITTANCE)
        record["buffers_abs_err"] = max((float((a - b).abs().max()) if n_rays else 0.0)
                                        for a, b in zip(fast_all, ref_all))
        packed = PackedSamples(positions=torch.zeros(n_samples, 3, device=device), directions=torch.zeros(n_samples, 3, device=device),
                               t=dt, dt=dt, ray_indices=ray_indices, packed_info=packed_info, n_rays=n_rays)
        kept_ref = kept_counts(sigmas, dt, packed, EARLY_STOP_TRANSMITTANCE)
        kept_fast = kept_counts_triton(sigmas, dt, packed_info, EARLY_STOP_TRANSMITTANCE)
        record["kept_dtype"] = str(kept_fast.dtype)
        record["kept_mismatches"] = int((kept_ref != kept_fast).sum())
        record["kept_below_count"] = int((kept_ref < packed_info[:, 1]).sum())
        if n_samples:
            record["grad_sigma_rel_err"] = _rel(fast_gs, ref_gs)
            record["grad_rgb_rel_err"] = _rel(fast_gc, ref_gc)
            record["early_stopped_samples"] = int((ref_gc.abs().sum(-1) == 0).sum())
        seen.append(record)
    return seen


def _check(seen: list[dict]) -> None:
    assert [r["case"] for r in seen] == [c[0] for c in CASES]
    for r in seen:
        where = f"case {r['case']} (seed {r['seed']})"
        assert r["shape"] == [r["n_rays"], 3] and r["dtype"] == "torch.float32", where
        assert r["forward_abs_err"] <= 1e-5, f"{where}: {r}"
        assert r["buffers_abs_err"] <= 1e-5 * max(1.0, r["n_samples"] * 0.05), f"{where}: {r}"  # depth grows with t
        assert r["kept_mismatches"] == 0 and r["kept_dtype"] == "torch.int64", f"{where}: {r}"
        if r["n_samples"]:
            assert r["grad_sigma_rel_err"] <= 1e-4 and r["grad_rgb_rel_err"] <= 1e-4, f"{where}: {r}"
    long_rays = next(r for r in seen if r["case"] == "long_rays_constant_bg")
    assert long_rays["early_stopped_samples"] > 0 and long_rays["kept_below_count"] > 0



def test_triton_composite_matches_reference_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="full-size check needs CUDA")
def test_triton_composite_matches_reference_on_cuda():
    _check(observe("cuda", random_seed()))


def test_bad_inputs_are_refused():
    from trainer.render.triton_volrend import composite_rgb_triton

    packed = torch.tensor([[0, 2]])
    with pytest.raises(ValueError, match="float32"):
        composite_rgb_triton(torch.ones(2).double(), torch.ones(2, 3), torch.ones(2), packed, torch.ones(3), 1e-4)
    with pytest.raises(ValueError, match=r"rgbs \[S, 3\]"):
        composite_rgb_triton(torch.ones(2), torch.ones(3, 3), torch.ones(2), packed, torch.ones(3), 1e-4)
    with pytest.raises(ValueError, match="background"):
        composite_rgb_triton(torch.ones(2), torch.ones(2, 3), torch.ones(2), packed,
                             torch.ones(3, requires_grad=True), 1e-4)


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))
