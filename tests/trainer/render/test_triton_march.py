"""The Triton ray marcher against the PyTorch marcher (its slow twin).

On a CPU-only machine the kernels run in Triton's interpreter, which must be on before
:mod:`trainer.render.triton_march` is first imported, so the cases run in a fresh subprocess
(``python tests/trainer/render/test_triton_march.py SEED``) that prints its observations as JSON; the tests
assert on them. The interpreter computes float32 in IEEE arithmetic as PyTorch's CPU kernels do,
so there the samples must be identical. With CUDA the same cases run in-process at full size; a
sample whose midpoint lies within rounding of a cell face may be decided differently there (the
module docstring of triton_march), so at most 0.1 % of rays may differ in their sample count.

Inputs are fresh random draws; the seed is in every assertion message (``NGPTUNE_TEST_SEED``
replays a run).
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed


# (name, aabb_scale, cone_angle, grid: "random" | "empty" | None, n_rays (CPU), n_rays (CUDA), max_steps,
#  background_steps: > 0 marches the background shell of the unbounded scene model, with a grid that has it)
# ("cascades_cone" marches without jitter, "no_grid_capped" with a near distance > 0)
CASES = [
    ("unit_box_grid", 1, 0.0, "random", 70, 1 << 14, 1024, 0),
    ("cascades_cone", 16, 1 / 256, "random", 40, 1 << 14, 1024, 0),
    ("no_grid_capped", 4, 1 / 256, None, 50, 1 << 12, 7, 0),
    ("empty_grid", 2, 0.0, "empty", 20, 1 << 10, 1024, 0),
    ("no_rays", 1, 0.0, "random", 0, 0, 1024, 0),
    ("shell_cone", 4, 1 / 256, "random", 40, 1 << 14, 1024, 24),
    ("shell_unit_box_capped", 1, 0.0, "random", 40, 1 << 12, 30, 16),
    ("shell_no_grid", 2, 1 / 256, None, 30, 1 << 12, 1024, 8),
]
GPU_MAX_MISMATCHED_RAYS = 1e-3


def observe(device: str, seed: int) -> list[dict]:
    """Run every case through both marchers; return what was seen (JSON-able)."""
    from trainer.render.march import march_rays
    from trainer.render.occupancy import OccupancyGrid, pack_bits

    seen = []
    generator = torch.Generator(device="cpu").manual_seed(seed)
    for name, scale, cone, grid_kind, n_cpu, n_gpu, max_steps, shell in CASES:
        n = n_cpu if device == "cpu" else n_gpu
        grid = None
        if grid_kind is not None:
            grid = OccupancyGrid(aabb_scale=scale, resolution=16 if device == "cpu" else 128, background_shell=shell > 0)
            cells = grid.cells_per_cascade
            mask = torch.rand(grid.levels, cells, generator=generator) < (0.3 if grid_kind == "random" else 0.0)
            grid.bitfield.copy_(pack_bits(mask).reshape(grid.levels, -1))
            grid = grid.to(device)
        # the unbounded model's cameras are inside the box: most shell rays start there
        spread = 0.9 if shell else 3.0
        origins = (torch.rand(n, 3, generator=generator) - 0.5) * spread * scale + 0.5
        directions = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator), dim=-1)
        if n >= 3:
            origins[0] = torch.tensor([0.5, 0.5, 0.5])  # starts inside the box
            directions[1] = torch.tensor([1.0, 0.0, 0.0])  # parallel to two axes
            origins[2] = torch.tensor([-4.0 * scale, 0.5, 0.5])  # points away from the box: a miss
            directions[2] = torch.tensor([-1.0, 0.0, 0.0])
        if n >= 4:
            origins[3, 1] = float("nan")  # a broken ray: no sample (a miss in the reference)
        aabb = torch.tensor([[0.5 - 0.5 * scale] * 3, [0.5 + 0.5 * scale] * 3])
        kwargs = dict(step_size=0.01 * scale if device == "cpu" else 3**0.5 / 1024, cone_angle=cone,
                      max_steps=max_steps, max_step_size=0.08 * scale, jitter=name != "cascades_cone",
                      near=0.05 * scale if name == "no_grid_capped" else 0.0, background_steps=shell)
        runs = {}
        for backend in ("torch", "triton"):
            jitter_generator = torch.Generator(device=device).manual_seed(seed + 1)
            runs[backend] = march_rays(origins.to(device), directions.to(device), aabb.to(device), grid,
                                       backend=backend, generator=jitter_generator, **kwargs)
        ref, fast = runs["torch"], runs["triton"]
        counts_ref, counts_fast = ref.packed_info[:, 1].cpu(), fast.packed_info[:, 1].cpu()
        same_rays = (counts_ref == counts_fast).nonzero().flatten()
        shell_samples = int((~_inside_box(ref.positions.cpu(), scale)).sum()) if shell else 0
        record = {
            "case": name, "seed": seed, "shell_samples": shell_samples, "n_rays": n, "n_samples_ref": ref.n_samples, "n_samples_fast": fast.n_samples,
            "mismatched_rays": int((counts_ref != counts_fast).sum()),
            "packed_start_consistent": bool(torch.equal(fast.packed_info[:, 0].cpu(),
                                                        torch.cumsum(counts_fast, 0) - counts_fast)),
            "dtypes": [str(fast.t.dtype), str(fast.dt.dtype), str(fast.ray_indices.dtype), str(fast.positions.dtype)],
            "n_rays_field": fast.n_rays,
        }
        # compare the samples of the rays whose counts agree, ray by ray
        max_t = max_dt = max_pos = max_dir = 0.0
        rays_equal = True
        for ray in same_rays.tolist():
            s_ref, c = int(ref.packed_info[ray, 0]), int(counts_ref[ray])
            s_fast = int(fast.packed_info[ray, 0])
            if c == 0:
                continue
            a, b = slice(s_ref, s_ref + c), slice(s_fast, s_fast + c)
            max_t = max(max_t, float((ref.t[a] - fast.t[b]).abs().max()))
            max_dt = max(max_dt, float((ref.dt[a] - fast.dt[b]).abs().max()))
            max_pos = max(max_pos, float((ref.positions[a] - fast.positions[b]).abs().max()))
            max_dir = max(max_dir, float((ref.directions[a] - fast.directions[b]).abs().max()))
            rays_equal &= bool((fast.ray_indices[b] == ray).all())
        record.update(max_t_diff=max_t, max_dt_diff=max_dt, max_pos_diff=max_pos, max_dir_diff=max_dir,
                      ray_indices_right=rays_equal)
        if shell and n:
            record["fixed"] = _fixed_capacity_pair(origins.to(device), directions.to(device), aabb.to(device), grid,
                                                   seed, ref.n_samples, kwargs)
        seen.append(record)
    return seen


def _fixed_capacity_pair(origins, directions, aabb, grid, seed: int, n_marched: int, kwargs: dict) -> dict:
    """The fixed-capacity march (``march_fixed``) of both backends into buffers that hold about two
    thirds of the samples: which rays fit, the counts, and the largest difference of the samples."""
    from trainer.render.fixed_march import MarchBuffers, march_fixed
    from trainer.render.triton_march import march_rule_tensor

    device = origins.device
    out = {}
    for backend in ("torch", "triton"):
        rule = march_rule_tensor(kwargs["step_size"], kwargs["cone_angle"], kwargs["max_step_size"], device)
        buffers = MarchBuffers(max(1, 2 * n_marched // 3), device)
        fixed = march_fixed(origins, directions, aabb, grid, buffers, step_size=kwargs["step_size"],
                            cone_angle=kwargs["cone_angle"], max_steps=kwargs["max_steps"],
                            max_step_size=kwargs["max_step_size"],
                            generator=torch.Generator(device=device).manual_seed(seed + 2), backend=backend,
                            rule=rule, near=kwargs["near"], background_steps=kwargs["background_steps"])
        out[backend] = fixed
    ref, fast = out["torch"], out["triton"]
    n = int(ref.n_valid)
    return {
        "fits_equal": bool(torch.equal(ref.ray_fits.cpu(), fast.ray_fits.cpu())),
        "counts_equal": bool(torch.equal(ref.samples.packed_info.cpu(), fast.samples.packed_info.cpu())),
        "n_valid": [n, int(fast.n_valid)],
        "max_t_diff": float((ref.samples.t[:n] - fast.samples.t[:n]).abs().max()) if n else 0.0,
    }


def _inside_box(points: torch.Tensor, scale: int) -> torch.Tensor:
    return ((points - 0.5).abs().amax(dim=-1) <= 0.5 * scale + 1e-6)


def _check(seen: list[dict], exact: bool) -> None:
    assert [r["case"] for r in seen] == [c[0] for c in CASES]
    for r in seen:
        where = f"case {r['case']} (seed {r['seed']})"
        assert r["dtypes"] == ["torch.float32", "torch.float32", "torch.int64", "torch.float32"], where
        assert r["n_rays_field"] == r["n_rays"], where
        assert r["packed_start_consistent"], where
        assert r["ray_indices_right"], where
        if exact:
            assert r["mismatched_rays"] == 0, f"{where}: {r}"
            assert r["n_samples_fast"] == r["n_samples_ref"], where
            assert r["max_t_diff"] == 0 and r["max_dt_diff"] == 0 and r["max_pos_diff"] == 0, f"{where}: {r}"
        else:
            assert r["mismatched_rays"] <= GPU_MAX_MISMATCHED_RAYS * max(r["n_rays"], 1), f"{where}: {r}"
            assert r["max_t_diff"] <= 1e-5 * 16 and r["max_pos_diff"] <= 1e-5 * 16, f"{where}: {r}"
        assert r["max_dir_diff"] == 0, where
        if r["case"] == "empty_grid" or r["case"] == "no_rays":
            assert r["n_samples_fast"] == 0, where
        elif r["n_rays"]:
            assert r["n_samples_ref"] > 0, f"{where}: the case marches no sample at all"
    capped = next(r for r in seen if r["case"] == "no_grid_capped")
    assert capped["n_samples_fast"] <= 7 * capped["n_rays"]
    for r in seen:
        if r["case"].startswith("shell"):  # the shell cases march past the box
            assert r["shell_samples"] > 0, f"case {r['case']} (seed {r['seed']}): no sample beyond the box"
            fixed = r["fixed"]  # and the fixed-capacity march of both backends agrees on them
            if exact:
                assert fixed["fits_equal"] and fixed["counts_equal"] and fixed["max_t_diff"] == 0, f"{r}"
            assert 0 < fixed["n_valid"][0] < r["n_samples_ref"], f"{r}"
    shell_capped = next(r for r in seen if r["case"] == "shell_unit_box_capped")
    assert shell_capped["n_samples_fast"] <= 30 * shell_capped["n_rays"]



def test_triton_march_matches_reference_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()), exact=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="full-size check needs CUDA")
def test_triton_march_matches_reference_on_cuda():
    _check(observe("cuda", random_seed()), exact=False)


def test_triton_backend_refused_where_it_cannot_run():
    from trainer.render import march

    o = torch.zeros(2, 3)
    d = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    box = torch.tensor([[0.0] * 3, [1.0] * 3])
    with pytest.raises(ValueError, match="float32 rays"):
        march.march_rays(o.double(), d.double(), box, None, backend="triton")
    with pytest.raises(ValueError, match="backend must be"):
        march.march_rays(o, d, box, None, backend="cuda")
    if not march.triton_march_available(torch.device("cpu")):
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            march.march_rays(o, d, box, None, backend="triton")
    # auto on the CPU is the reference
    ref = march.march_rays(o, d, box, None, step_size=0.25, backend="torch")
    auto = march.march_rays(o, d, box, None, step_size=0.25, backend="auto")
    assert torch.equal(ref.t, auto.t) and torch.equal(ref.packed_info, auto.packed_info)


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))
