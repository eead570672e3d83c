"""Empty-space skipping in the Triton marcher keeps exactly the samples of the step-by-step walk.

The same kernel runs twice per case, ``skip_empty=True`` and ``False``: every output (counts,
``t``, ``dt``, ray indices, positions) must be bit-identical, on the CPU interpreter (in a fresh
subprocess, as in ``test_triton_march.py``) and on CUDA. The cases are built to break a wrong
skip: sparse grids (long empty runs), cascades with the cone rule (steps growing across the
linear, geometric and clamped regions), rays grazing cell faces (a direction component of
1e-4 … 1e-7) and origins on cell faces, and a grid of a few occupied blocks.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed

# (name, aabb_scale, cone_angle, occupancy: fraction of cells or "blocks", rays grazing faces)
CASES = [
    ("sparse_unit_box", 1, 0.0, 0.03, False),
    ("sparse_cascades_cone", 8, 1 / 256, 0.05, False),
    ("grazing_faces", 2, 0.0, 0.1, True),
    ("grazing_cascades_cone", 16, 1 / 256, 0.1, True),
    ("blocks_cone", 4, 1 / 64, "blocks", False),
]


def _grid(scale: int, occupancy, resolution: int, generator: torch.Generator):
    from trainer.render.occupancy import OccupancyGrid, pack_bits

    grid = OccupancyGrid(aabb_scale=scale, resolution=resolution)
    if occupancy == "blocks":  # a few solid cubes of cells per cascade
        mask = torch.zeros(grid.levels, resolution, resolution, resolution, dtype=torch.bool)
        for level in range(grid.levels):
            for _ in range(3):
                lo = torch.randint(0, resolution - 4, (3,), generator=generator).tolist()
                side = resolution // 8
                mask[level, lo[2]:lo[2] + side, lo[1]:lo[1] + side, lo[0]:lo[0] + side] = True
        mask = mask.reshape(grid.levels, -1)
    else:
        mask = torch.rand(grid.levels, grid.cells_per_cascade, generator=generator) < occupancy
    grid.bitfield.copy_(pack_bits(mask).reshape(grid.levels, -1))
    return grid


def _rays(n: int, scale: int, resolution: int, grazing: bool, generator: torch.Generator):
    # from inside and around the box towards a point of the box: most rays cross it
    origins = (torch.rand(n, 3, generator=generator) - 0.5) * 2.0 * scale + 0.5
    targets = (torch.rand(n, 3, generator=generator) - 0.5) * scale + 0.5
    directions = torch.nn.functional.normalize(targets - origins, dim=-1)
    if grazing:
        half = n // 2
        # one or two tiny components: along cell faces for many cells
        tiny = 10.0 ** -torch.randint(4, 8, (half, 2), generator=generator).double()
        directions[:half, 1] = (tiny[:, 0] * torch.sign(directions[:half, 1])).float()
        directions[: half // 2, 2] = (tiny[: half // 2, 1] * torch.sign(directions[: half // 2, 2])).float()
        directions = torch.nn.functional.normalize(directions, dim=-1)
        # origins on the faces of cascade 0's cells
        faces = torch.randint(0, resolution + 1, (half, 2), generator=generator).float() / resolution
        origins[:half, 1:] = faces
        origins[:half, 0] = -1.0 * scale
        directions[:half, 0] = directions[:half, 0].abs()
    return origins, directions


def observe(device: str, seed: int) -> list[dict]:
    """Both walks of every case; what differs between them (JSON-able)."""
    from trainer.render.fixed_march import MarchBuffers
    from trainer.render.triton_march import march_fixed_triton, march_packed_triton, march_rule_tensor

    generator = torch.Generator(device="cpu").manual_seed(seed)
    resolution = 16 if device == "cpu" else 128
    n = 32 if device == "cpu" else 1 << 15
    seen = []
    for name, scale, cone, occupancy, grazing in CASES:
        aabb = torch.tensor([[0.5 - 0.5 * scale] * 3, [0.5 + 0.5 * scale] * 3], device=device)
        step = (0.02 if device == "cpu" else 3**0.5 / 1024) * (scale if cone == 0.0 else 1)
        rule = dict(step_size=step, cone_angle=cone, max_step_size=0.05 * scale, max_steps=4096)
        for _ in range(20):  # a few rays may all miss a sparse grid: draw again (the same draws for a seed)
            grid = _grid(scale, occupancy, resolution, generator).to(device)
            origins, directions = _rays(n, scale, resolution, grazing, generator)
            origins, directions = origins.to(device), directions.to(device)
            jitter = torch.rand(n, generator=generator).to(device)
            packed = {skip: march_packed_triton(origins, directions, aabb, 0.0, jitter, grid, skip_empty=skip, **rule)
                      for skip in (True, False)}
            if int(packed[False][5].sum()) > 0:
                break
        same = all(torch.equal(a, b) for a, b in zip(packed[True], packed[False]))
        counts = packed[False][5]
        record = {"case": name, "seed": seed, "n_samples": int(counts.sum()), "identical": same,
                  "rays_with_samples": int((counts > 0).sum())}
        seen.append(record)
        if name != "blocks_cone":
            continue
        # the fixed-capacity march (the same walk, rays cut at the capacity): about half the samples fit
        capacity = max(1, int(counts.sum()) // 2)
        fixed = {}
        for skip in (True, False):
            buffers = MarchBuffers(capacity, torch.device(device))
            out = buffers.outputs()
            box = aabb.reshape(6).contiguous()
            rule_t = march_rule_tensor(step, cone, rule["max_step_size"], torch.device(device))
            got = march_fixed_triton(origins, directions, box, rule_t, jitter, grid, out, cone_angle=cone,
                                     max_steps=rule["max_steps"], skip_empty=skip)
            used = int(got[0].sum())
            fixed[skip] = (got, [o[:used] for o in out])
        fixed_same = all(torch.equal(a, b) for a, b in zip(fixed[True][0], fixed[False][0])) and all(
            torch.equal(a, b) for a, b in zip(fixed[True][1], fixed[False][1]))
        record["fixed_identical"] = fixed_same
    return seen


def _check(seen: list[dict]) -> None:
    assert [r["case"] for r in seen] == [c[0] for c in CASES]
    for r in seen:
        where = f"case {r['case']} (seed {r['seed']})"
        assert r["n_samples"] > 0 and r["rays_with_samples"] > 0, f"{where}: marches nothing: {r}"
        assert r["identical"], f"{where}: skipping changed the packed march: {r}"
    blocks = seen[-1]
    assert blocks["fixed_identical"], f"seed {blocks['seed']}: skipping changed the fixed-capacity march: {blocks}"


def test_skipping_keeps_the_samples_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="full-size check needs CUDA")
def test_skipping_keeps_the_samples_on_cuda():
    _check(observe("cuda", random_seed()))


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))
