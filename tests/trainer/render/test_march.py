"""Ray marching: step placement (constant and cone steps), empty-space skipping, packing."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.render.aabb import scene_aabb
from trainer.render.march import PackedSamples, march_rays
from trainer.render.occupancy import MIN_STEP_SIZE, OccupancyGrid

UNIT_BOX = scene_aabb(1)


def assert_packed_consistent(samples: PackedSamples, rays_o, rays_d):
    ray_indices = samples.ray_indices
    assert ray_indices.dtype == torch.int64 and samples.packed_info.dtype == torch.int64
    assert samples.packed_info.shape == (samples.n_rays, 2)
    assert (ray_indices[1:] >= ray_indices[:-1]).all(), "ray_indices not sorted"
    counts = torch.bincount(ray_indices, minlength=samples.n_rays)
    assert torch.equal(samples.packed_info[:, 1], counts)
    assert torch.equal(samples.packed_info[:, 0], torch.cumsum(counts, 0) - counts)
    for ray, (start, count) in enumerate(samples.packed_info.tolist()):
        assert (ray_indices[start : start + count] == ray).all()
        t = samples.t[start : start + count]
        assert (t[1:] > t[:-1]).all(), f"ray {ray}: samples not front to back"
    torch.testing.assert_close(samples.directions, rays_d[ray_indices])
    torch.testing.assert_close(samples.positions, rays_o[ray_indices] + rays_d[ray_indices] * samples.t[:, None])


def test_constant_steps_are_evenly_spaced_inside_the_box():
    rays_o = torch.tensor([[-1.0, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 2.0, 0.5]])
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # last one misses
    samples = march_rays(rays_o, rays_d, UNIT_BOX, None, step_size=0.1)
    assert_packed_consistent(samples, rays_o, rays_d)
    # Ray 0 crosses t ∈ [1, 2]: midpoints 1.05 … 1.95. Ray 1 starts inside: t ∈ [0, 0.5].
    assert samples.packed_info.tolist() == [[0, 10], [10, 5], [15, 0]]
    torch.testing.assert_close(samples.t[:10], 1.05 + 0.1 * torch.arange(10.0))
    torch.testing.assert_close(samples.t[10:], 0.05 + 0.1 * torch.arange(5.0))
    torch.testing.assert_close(samples.dt, torch.full((15,), 0.1))


def test_default_step_gives_1024_samples_along_the_unit_cube_diagonal():
    rays_o = torch.tensor([[-1.0, -1.0, -1.0]])
    rays_d = torch.tensor([[1.0, 1.0, 1.0]]) / math.sqrt(3.0)
    samples = march_rays(rays_o, rays_d, UNIT_BOX, None)
    assert samples.n_samples == 1024  # √3 / (√3/1024)
    expected = math.sqrt(3.0) + (torch.arange(1024, dtype=torch.float64) + 0.5) * MIN_STEP_SIZE
    torch.testing.assert_close(samples.t.double(), expected, atol=2e-6, rtol=0)
    assert (samples.positions >= 0).all() and (samples.positions <= 1).all()
    # max_steps keeps the first samples only.
    capped = march_rays(rays_o, rays_d, UNIT_BOX, None, max_steps=100)
    torch.testing.assert_close(capped.t, samples.t[:100])


def test_jitter_shifts_each_ray_by_less_than_one_step():
    n = 64
    rays_o = torch.tensor([[-1.0, 0.5, 0.5]]).expand(n, 3)
    rays_d = torch.tensor([[1.0, 0.0, 0.0]]).expand(n, 3)
    samples = march_rays(rays_o, rays_d, UNIT_BOX, None, step_size=0.1, jitter=True,
                         generator=torch.Generator().manual_seed(0))
    assert_packed_consistent(samples, rays_o, rays_d)
    first = samples.t[samples.packed_info[:, 0]]
    offset = first - 1.05  # the unjittered first midpoint
    assert (offset >= 0).all() and (offset < 0.1).all()
    assert offset.std() > 0.02  # differs from ray to ray
    # Still evenly spaced, and no midpoint beyond t_far = 2.
    assert (samples.t < 2.0).all()
    same_ray = samples.ray_indices[1:] == samples.ray_indices[:-1]
    torch.testing.assert_close((samples.t[1:] - samples.t[:-1])[same_ray], torch.full((int(same_ray.sum()),), 0.1))
    again = march_rays(rays_o, rays_d, UNIT_BOX, None, step_size=0.1, jitter=True,
                       generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.t, samples.t)


def sequential_steps(t_start, t_far, step, cone, max_step):
    """Slow twin: t_{k+1} = t_k + clamp(t_k·cone, step, max_step), as instant-ngp iterates."""
    starts, steps = [], []
    t = t_start
    while True:
        dt = min(max(t * cone, step), max_step)
        if t + 0.5 * dt >= t_far:
            return starts, steps
        starts.append(t)
        steps.append(dt)
        t += dt


def test_cone_steps_grow_with_distance_within_the_clamps():
    aabb_scale = 16
    box = scene_aabb(aabb_scale)
    cone, max_step = 1 / 256, MIN_STEP_SIZE * aabb_scale
    rays_o = torch.tensor([[0.5, 0.5, 0.5], [-8.0, 0.5, 0.5]], dtype=torch.float64)
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    samples = march_rays(rays_o, rays_d, box.double(), None, cone_angle=cone, max_steps=4096)
    assert_packed_consistent(samples, rays_o, rays_d)
    for ray, (t_near, t_far) in enumerate([(0.0, 8.0), (0.5, 16.5)]):
        start, count = samples.packed_info[ray].tolist()
        t, dt = samples.t[start : start + count], samples.dt[start : start + count]
        t_starts = t - 0.5 * dt
        # The rule itself: dt = clamp(t_start·cone, step, max_step).
        torch.testing.assert_close(dt, (t_starts * cone).clamp(MIN_STEP_SIZE, max_step), rtol=1e-9, atol=1e-12)
        # Steps tile the ray: each starts where the previous one ends.
        torch.testing.assert_close(t_starts[1:], t_starts[:-1] + dt[:-1], rtol=1e-9, atol=1e-12)
        assert t_starts[0].item() == pytest.approx(t_near)
        assert dt[0].item() == pytest.approx(MIN_STEP_SIZE if ray == 0 else max(MIN_STEP_SIZE, 0.5 * cone))
        assert dt[-1].item() == pytest.approx(max_step)
        assert (dt[1:] >= dt[:-1] - 1e-12).all()
        assert (t < t_far).all() and (t + 0.5 * dt).max() > t_far - max_step
        # Same steps as the sequential recurrence.
        ref_starts, ref_steps = sequential_steps(t_near, t_far, MIN_STEP_SIZE, cone, max_step)
        assert count == len(ref_starts)
        torch.testing.assert_close(t_starts, torch.tensor(ref_starts, dtype=torch.float64), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(dt, torch.tensor(ref_steps, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    # Ray 0 walks all three regions: linear up to t = step/cone, geometric to max_step/cone, clamped.
    first_ray_dt = samples.dt[: samples.packed_info[0, 1]]
    # Steps starting at t_k = k·step ≤ step/cone = 256·step have dt = step: k = 0 … 256.
    assert (first_ray_dt == MIN_STEP_SIZE).sum() == 257
    assert ((first_ray_dt > MIN_STEP_SIZE) & (first_ray_dt < max_step)).sum() > 500


def test_cone_steps_in_float32_stay_contiguous():
    box = scene_aabb(8)
    rays_o = torch.tensor([[0.5, 0.5, 0.5]])
    rays_d = torch.tensor([[0.0, 0.6, 0.8]])
    samples = march_rays(rays_o, rays_d, box, None, cone_angle=1 / 256, max_steps=4096)
    t_starts = samples.t - 0.5 * samples.dt
    torch.testing.assert_close(t_starts[1:], t_starts[:-1] + samples.dt[:-1], rtol=0, atol=2e-5)
    assert samples.t.dtype == torch.float32


def sphere_grid(center, radius):
    grid = OccupancyGrid(aabb_scale=2, resolution=16)
    c = torch.tensor(center)
    grid.update(0, lambda p: torch.where((p - c).norm(dim=-1) < radius, 100.0, 0.0),
                generator=torch.Generator().manual_seed(0))
    return grid


def test_samples_lie_in_occupied_cells_and_rays_missing_the_sphere_get_none():
    center, radius = (0.5, 0.5, 0.5), 0.15
    grid = sphere_grid(center, radius)
    box = grid.aabb
    n = 200
    g = torch.Generator().manual_seed(1)
    targets = torch.rand(n, 3, generator=g) * 0.8 + 0.1
    rays_o = torch.tensor([0.5, 0.5, -1.4]) + torch.randn(n, 3, generator=g) * 0.1
    rays_d = torch.nn.functional.normalize(targets - rays_o, dim=-1)
    samples = march_rays(rays_o, rays_d, box, grid, jitter=True, generator=g)
    assert_packed_consistent(samples, rays_o, rays_d)
    assert samples.n_samples > 0
    assert grid.occupied(samples.positions).all()

    # Distance of each ray's line to the sphere centre.
    to_center = torch.tensor(center) - rays_o
    along = (to_center * rays_d).sum(-1, keepdim=True)
    miss_distance = (to_center - along * rays_d).norm(dim=-1)
    counts = samples.packed_info[:, 1]
    cell_diagonal = math.sqrt(3) / 16
    assert (counts[miss_distance > radius + cell_diagonal] == 0).all()
    assert (counts[miss_distance < radius - cell_diagonal] > 0).all()
    assert (counts == 0).any() and (counts > 0).any()

    # Parity with the slow path: march without the grid, then keep the occupied samples.
    plain = march_rays(rays_o, rays_d, box, None, jitter=True, generator=torch.Generator().manual_seed(1),
                       max_steps=10_000)
    kept = grid.occupied(plain.positions)
    skipping = march_rays(rays_o, rays_d, box, grid, jitter=True, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(skipping.t, plain.t[kept])
    assert torch.equal(skipping.ray_indices, plain.ray_indices[kept])


def test_chunked_marching_equals_one_chunk():
    grid = sphere_grid((0.6, 0.45, 0.5), 0.3)
    g = torch.Generator().manual_seed(2)
    rays_o = torch.randn(300, 3, generator=g) * 0.3 + torch.tensor([0.5, 0.5, -1.0])
    aim = torch.rand(300, 3, generator=g) * 0.6 + torch.tensor([-0.3, -0.3, 0.5])
    rays_d = torch.nn.functional.normalize(aim, dim=-1)
    whole = march_rays(rays_o, rays_d, grid.aabb, grid, cone_angle=1 / 256, max_steps=40)
    chunked = march_rays(rays_o, rays_d, grid.aabb, grid, cone_angle=1 / 256, max_steps=40,
                         max_candidates_per_chunk=500)
    assert whole.n_samples > 1000
    assert (whole.packed_info[:, 1] == 40).any()  # the cap binds on some rays
    assert (whole.packed_info[:, 1] <= 40).all()
    for name in ("positions", "directions", "t", "dt", "ray_indices", "packed_info"):
        assert torch.equal(getattr(chunked, name), getattr(whole, name)), name


def test_no_rays_and_bad_arguments():
    empty = march_rays(torch.zeros(0, 3), torch.zeros(0, 3), UNIT_BOX, None)
    assert empty.n_samples == 0 and empty.packed_info.shape == (0, 2)
    o, d = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"rays_o and rays_d must both be \[n_rays, 3\]"):
        march_rays(o, torch.ones(3, 3), UNIT_BOX, None)
    with pytest.raises(ValueError, match="step_size must be > 0, got 0.0"):
        march_rays(o, d, UNIT_BOX, None, step_size=0.0)
    with pytest.raises(ValueError, match="max_step_size must be >= step_size"):
        march_rays(o, d, UNIT_BOX, None, step_size=0.1, max_step_size=0.01)
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1, got 0"):
        march_rays(o, d, UNIT_BOX, None, max_steps=0)


# ------------------------------------------------------------------ past the box (the unbounded model)


def test_background_steps_continue_past_the_box_uniform_in_disparity():
    from trainer.render.contraction import SceneContraction

    rays_o = torch.tensor([[0.5, 0.5, 0.5], [0.5, 2.0, 0.5]], dtype=torch.float64)
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)  # the second misses the box
    samples = march_rays(rays_o, rays_d, UNIT_BOX.double(), None, step_size=0.1, background_steps=4)
    assert_packed_consistent(samples, rays_o, rays_d)
    assert samples.packed_info.tolist() == [[0, 9], [9, 4]]
    # ray 0: box midpoints 0.05 … 0.45, then from t_s = 0.5 the steps t_j = 0.5·5/(5 − j), j = 0 … 4
    bounds = 0.5 * 5 / (5 - torch.arange(5, dtype=torch.float64))
    torch.testing.assert_close(samples.t[:5], 0.05 + 0.1 * torch.arange(5, dtype=torch.float64))
    torch.testing.assert_close(samples.t[5:9], 0.5 * (bounds[:-1] + bounds[1:]))
    torch.testing.assert_close(samples.dt[5:9], bounds[1:] - bounds[:-1])
    assert float(bounds[-1]) == 2.5  # the far end: (N + 1)·t_s
    # seen from the box centre, the step boundaries cross the contracted shell evenly
    contracted = SceneContraction.of_box(1).contract(rays_o[0] + rays_d[0] * bounds[:, None])
    torch.testing.assert_close(contracted[:, 0] - 0.5, 0.5 * (1 + torch.arange(5, dtype=torch.float64) / 5))
    # ray 1 misses the box: its shell starts at max(near, step_size) = 0.1
    miss = 0.1 * 5 / (5 - torch.arange(5, dtype=torch.float64))
    torch.testing.assert_close(samples.t[9:], 0.5 * (miss[:-1] + miss[1:]))
    # max_steps counts the shell's samples after the box's
    capped = march_rays(rays_o, rays_d, UNIT_BOX.double(), None, step_size=0.1, background_steps=4, max_steps=7)
    assert capped.packed_info[:, 1].tolist() == [7, 4]
    torch.testing.assert_close(capped.t[:7], samples.t[:7])


def test_background_samples_need_occupied_shell_cells_and_a_grid_with_the_shell():
    grid = OccupancyGrid(aabb_scale=2, resolution=8, background_shell=True)
    mask = torch.zeros(grid.levels, grid.cells_per_cascade, dtype=torch.bool)
    mask[-1] = True  # only the shell's level is occupied
    from trainer.render.occupancy import pack_bits

    grid.bitfield.copy_(pack_bits(mask))
    generator = torch.Generator().manual_seed(8)
    rays_o = 0.5 + (torch.rand(50, 3, generator=generator) - 0.5) * 1.5  # inside the box (half side 1)
    rays_d = torch.nn.functional.normalize(torch.randn(50, 3, generator=generator), dim=-1)
    samples = march_rays(rays_o, rays_d, grid.aabb, grid, cone_angle=1 / 256, background_steps=16)
    assert_packed_consistent(samples, rays_o, rays_d)
    assert samples.packed_info[:, 1].tolist() == [16] * 50  # every step past the box, none inside it
    assert bool(((samples.positions - 0.5).abs().amax(dim=-1) > 1.0).all())
    chunked = march_rays(rays_o, rays_d, grid.aabb, grid, cone_angle=1 / 256, background_steps=16,
                         max_candidates_per_chunk=100)
    assert torch.equal(chunked.t, samples.t) and torch.equal(chunked.packed_info, samples.packed_info)
    with pytest.raises(ValueError, match="background shell"):
        march_rays(rays_o, rays_d, grid.aabb, OccupancyGrid(aabb_scale=2, resolution=8), background_steps=16)
    with pytest.raises(ValueError, match="background_steps must be an integer >= 0"):
        march_rays(rays_o, rays_d, grid.aabb, grid, background_steps=-1)


def test_a_ray_with_a_nan_component_gets_no_background_sample():
    rays_o = torch.tensor([[0.5, 0.5, 0.5], [float("nan"), 0.5, 0.5]])
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    samples = march_rays(rays_o, rays_d, UNIT_BOX, None, step_size=0.1, background_steps=8)
    assert samples.packed_info[:, 1].tolist() == [5 + 8, 0]
