"""OccupancyGrid: cell layout, warm-up and later updates, EMA decay, threshold, visibility."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from trainer.contract.errors import ConfigError
from trainer.render.occupancy import MIN_STEP_SIZE, OccupancyGrid, pack_bits


def sphere_density(center, radius, sigma):
    center = torch.tensor(center)

    def density_fn(points):
        return torch.where((points - center).norm(dim=-1) < radius, sigma, 0.0)

    return density_fn


def cell_boxes(grid: OccupancyGrid, cascade: int):
    """[R³, 2, 3] min/max corners of every cell of one cascade, in linear order x + y·R + z·R²."""
    cells = torch.arange(grid.cells_per_cascade)
    c = torch.full_like(cells, cascade)
    return torch.stack((grid.cell_points(c, cells, 0.0), grid.cell_points(c, cells, 1.0)), dim=1)


def sphere_cell_relation(boxes, center, radius):
    """(intersects [m], inside [m]) of axis-aligned cells and a ball."""
    center = torch.tensor(center)
    closest = torch.maximum(boxes[:, 0], torch.minimum(center, boxes[:, 1]))
    farthest = torch.where((center - boxes[:, 0]).abs() > (center - boxes[:, 1]).abs(), boxes[:, 0], boxes[:, 1])
    return (closest - center).norm(dim=-1) < radius, (farthest - center).norm(dim=-1) < radius


def test_constructor_shapes_and_validation():
    grid = OccupancyGrid(aabb_scale=4, resolution=8)
    assert grid.cascades == 3
    assert grid.density.shape == (3, 512) and grid.density.dtype == torch.float32
    assert grid.bitfield.shape == (3, 64) and grid.bitfield.dtype == torch.uint8
    assert grid.occupancy_fraction() == 1.0  # nothing is culled before the first update
    torch.testing.assert_close(grid.aabb, torch.tensor([[-1.5] * 3, [2.5] * 3]))
    torch.testing.assert_close(grid.step_sizes(), MIN_STEP_SIZE * torch.tensor([1.0, 2.0, 4.0]))
    with pytest.raises(ConfigError, match=r"occupancy_grid.aabb_scale: .* got 3"):
        OccupancyGrid(aabb_scale=3)
    with pytest.raises(ConfigError, match=r"occupancy_grid.resolution: .* got 7"):
        OccupancyGrid(aabb_scale=1, resolution=7)
    with pytest.raises(ConfigError, match=r"occupancy_grid.decay: .* got 1.5"):
        OccupancyGrid(aabb_scale=1, decay=1.5)


def test_locate_picks_the_finest_cascade_and_the_linear_cell_index():
    grid = OccupancyGrid(aabb_scale=4, resolution=8)
    points = torch.tensor(
        [
            [0.5, 0.5, 0.5],  # centre: cascade 0, cell (4, 4, 4)
            [1.2, 0.5, 0.5],  # |p-0.5| = 0.7: cascade 1 (side 2), u = 0.35+0.5 → x = 6
            [2.4, 0.5, -0.9],  # 1.9: cascade 2 (side 4): x = floor((1.9/4+0.5)·8) = 7, z = floor((-1.4/4+0.5)·8) = 1
            [2.6, 0.5, 0.5],  # outside the box (half side 2)
        ]
    )
    cascade, cell, inside = grid.locate(points)
    assert cascade[:3].tolist() == [0, 1, 2]
    assert cell[:3].tolist() == [4 + 4 * 8 + 4 * 64, 6 + 4 * 8 + 4 * 64, 7 + 4 * 8 + 1 * 64]
    assert inside.tolist() == [True, True, True, False]


def test_single_occupied_cell_sets_exactly_one_bit():
    grid = OccupancyGrid(aabb_scale=1, resolution=8)
    lo = torch.tensor([3, 5, 7]) / 8.0

    def density_fn(points):
        inside = ((points >= lo) & (points < lo + 1 / 8)).all(dim=-1)
        return torch.where(inside, 50.0, 0.0)

    grid.update(0, density_fn, generator=torch.Generator().manual_seed(0))
    index = 3 + 5 * 8 + 7 * 64  # 491 → byte 61, bit 3
    expected = torch.zeros(1, 64, dtype=torch.uint8)
    expected[0, index >> 3] = 1 << (index & 7)
    assert torch.equal(grid.bitfield, expected)
    torch.testing.assert_close(grid.density[0, index], torch.tensor(50.0 * MIN_STEP_SIZE))
    centre = lo + 1 / 16
    probes = torch.stack((centre, centre + torch.tensor([1 / 8, 0, 0]), torch.tensor([1.5, 0.5, 0.5])))
    assert grid.occupied(probes).tolist() == [True, False, False]
    assert grid.occupancy_fraction() == 1 / 512


def test_pack_bits_is_least_significant_bit_first():
    mask = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert pack_bits(mask).tolist() == [[129, 2]]


def test_warmup_update_occupies_only_cells_intersecting_the_sphere():
    center, radius = (0.55, 0.45, 0.5), 0.2
    grid = OccupancyGrid(aabb_scale=2, resolution=16)
    grid.update(0, sphere_density(center, radius, 100.0), generator=torch.Generator().manual_seed(1))
    occupied = grid.occupancy_mask()
    for cascade in range(grid.cascades):
        intersects, inside = sphere_cell_relation(cell_boxes(grid, cascade), center, radius)
        assert not (occupied[cascade] & ~intersects).any(), f"cascade {cascade}: occupied cell off the sphere"
        assert occupied[cascade][inside].all(), f"cascade {cascade}: cell inside the sphere not occupied"
        assert inside.any()
    # Stored values are optical thickness σ·Δt_c.
    torch.testing.assert_close(grid.density.amax(dim=1), 100.0 * grid.step_sizes())

    # Point lookups agree: occupied points are within a cell diagonal of the sphere.
    points = torch.rand(4000, 3, generator=torch.Generator().manual_seed(2)) * 2.4 - 0.7
    hits = grid.occupied(points)
    distance = (points - torch.tensor(center)).norm(dim=-1)
    assert hits.any() and (~hits).any()
    assert (distance[hits] < radius + math.sqrt(3) / 16).all()
    assert hits[distance < radius - math.sqrt(3) / 16].all()
    assert not hits[(points - 0.5).abs().amax(dim=-1) > 1.0].any()  # outside the box


def test_later_update_draws_a_quarter_of_the_cells_plus_the_occupied_ones():
    grid = OccupancyGrid(aabb_scale=1, resolution=16)
    density_fn = sphere_density((0.5, 0.5, 0.5), 0.15, 100.0)
    grid.update(0, density_fn, generator=torch.Generator().manual_seed(3))
    n_occupied = int(grid.occupancy_mask().sum())
    assert 0 < n_occupied < 16**3 // 4
    occupied_before = grid.occupancy_mask()[0]
    seen = []

    def recording_fn(points):
        seen.append(points.clone())
        return density_fn(points)

    grid.update(300, recording_fn, generator=torch.Generator().manual_seed(4), chunk=1000)
    points = torch.cat(seen)
    # fixed shapes: a quarter drawn uniformly plus a quarter of slots for the occupied cells
    assert points.shape[0] == 2 * (16**3 // 4)
    assert len(seen) == math.ceil(points.shape[0] / 1000)
    _, cells, _ = grid.locate(points)
    visited = torch.zeros(16**3, dtype=torch.bool)
    visited[cells[16**3 // 4:][: n_occupied]] = True
    assert visited[occupied_before].all()  # every occupied cell once, in the first slots
    assert int(visited.sum()) == n_occupied


def test_ema_decays_when_the_density_vanishes():
    grid = OccupancyGrid(aabb_scale=2, resolution=8, decay=0.95)
    grid.update(0, sphere_density((0.5, 0.5, 0.5), 0.3, 40.0), generator=torch.Generator().manual_seed(5))
    expected = grid.density.clone()
    bits = grid.bitfield.clone()
    assert grid.mean_density < 0.01
    zero = lambda points: torch.zeros(points.shape[0])  # noqa: E731
    for step in range(256, 259):
        grid.update(step, zero, generator=torch.Generator().manual_seed(step))
        expected = expected * 0.95
        torch.testing.assert_close(grid.density, expected, rtol=0, atol=0)
    # The threshold min(0.01, mean) decays with the densities, so the occupied set is unchanged
    # (instant-ngp behaves the same way).
    assert torch.equal(grid.bitfield, bits)

    # A new, larger value replaces the decayed one at once: max(old·decay, new).
    grid.update(0, sphere_density((0.5, 0.5, 0.5), 0.3, 80.0), generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(grid.density.amax(dim=1), 80.0 * grid.step_sizes())


def test_threshold_is_the_smaller_of_the_limit_and_the_mean():
    step = MIN_STEP_SIZE
    # Dense everywhere (σ·Δt = 0.02): mean 0.02 > 0.01, threshold 0.01, every cell occupied.
    grid = OccupancyGrid(aabb_scale=1, resolution=8)
    grid.update(0, lambda p: torch.full((p.shape[0],), 0.02 / step), generator=torch.Generator().manual_seed(0))
    assert grid.mean_density == pytest.approx(0.02, rel=1e-5)
    assert grid.occupancy_fraction() == 1.0

    # Thin everywhere: x < 0.5 has σ·Δt = 0.004, x ≥ 0.5 has 0.002. Mean 0.003 < 0.01 becomes
    # the threshold, so exactly the thicker half is occupied.
    grid = OccupancyGrid(aabb_scale=1, resolution=8)
    grid.update(
        0,
        lambda p: torch.where(p[:, 0] < 0.5, 0.004 / step, 0.002 / step),
        generator=torch.Generator().manual_seed(0),
    )
    assert grid.mean_density == pytest.approx(0.003, rel=1e-5)
    x_of_cell = torch.arange(512) % 8
    assert torch.equal(grid.occupancy_mask()[0], x_of_cell < 4)

    # With the limit lowered below both values, both halves are occupied.
    grid = OccupancyGrid(aabb_scale=1, resolution=8, threshold=0.001)
    grid.update(0, lambda p: torch.where(p[:, 0] < 0.5, 0.004 / step, 0.002 / step))
    assert grid.occupancy_fraction() == 1.0


def _corner_seen_brute_force(grid, c2w, focal, principal, size):
    """Slow twin of mark_invisible for one camera: Python loops over cells and corners."""
    res = grid.resolution
    rotation, origin = c2w[:3, :3], c2w[:3, 3]
    seen = torch.zeros(grid.cascades, res**3, dtype=torch.bool)
    for cascade, z, y, x in itertools.product(range(grid.cascades), range(res), range(res), range(res)):
        for dx, dy, dz in itertools.product((0, 1), repeat=3):
            corner = (torch.tensor([x + dx, y + dy, z + dz]) / res - 0.5) * 2.0**cascade + 0.5
            local = rotation.T @ (corner - origin)
            depth = -local[2]
            if depth / local.norm() <= 1e-4:
                continue
            u = principal[0] + focal[0] * local[0] / depth
            v = principal[1] - focal[1] * local[1] / depth
            if 0 < u < size[0] and 0 < v < size[1]:
                seen[cascade, x + y * res + z * res * res] = True
                break
    return seen


def test_mark_invisible_matches_a_brute_force_projection_and_stays_unoccupied():
    grid = OccupancyGrid(aabb_scale=2, resolution=4)
    # A camera at (0.5, 0.8, 3) looking down −z with a narrow field of view (tan = 0.1).
    c2w = torch.eye(4)
    c2w[:3, 3] = torch.tensor([0.5, 0.8, 3.0])
    focal, principal, size = torch.tensor([100.0, 100.0]), torch.tensor([10.0, 10.0]), torch.tensor([20.0, 20.0])
    n_unseen = grid.mark_invisible(c2w[None], focal[None], principal[None], size[None])
    expected_seen = _corner_seen_brute_force(grid, c2w, focal, principal, size)
    assert 0 < n_unseen < grid.cascades * 64
    assert n_unseen == int((~expected_seen).sum())
    assert torch.equal(grid.density >= 0, expected_seen)
    assert torch.equal(grid.occupancy_mask(), expected_seen)

    grid.update(0, lambda p: torch.full((p.shape[0],), 100.0))
    assert torch.equal(grid.occupancy_mask(), expected_seen)
    assert (grid.density[~expected_seen] == -1).all()
    # The mean ignores unseen cells' −1 (they count as 0).
    seen0 = expected_seen[0].float().mean().item()
    assert grid.mean_density == pytest.approx(100.0 * MIN_STEP_SIZE * seen0, rel=1e-5)

    # A second camera looking the other way from below makes everything visible again.
    c2w_back = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0]))
    c2w_back[:3, 3] = torch.tensor([0.5, 0.5, -20.0])
    wide = torch.tensor([[10.0, 10.0]])
    assert grid.mark_invisible(c2w_back[None], wide, principal[None], size[None]) == 0
    assert (grid.density >= 0).all()


def test_state_dict_round_trip_keeps_the_occupancy():
    grid = OccupancyGrid(aabb_scale=2, resolution=8)
    grid.update(0, sphere_density((0.4, 0.6, 0.5), 0.25, 30.0), generator=torch.Generator().manual_seed(0))
    copy = OccupancyGrid(aabb_scale=2, resolution=8)
    copy.load_state_dict(grid.state_dict())
    points = torch.rand(500, 3, generator=torch.Generator().manual_seed(1)) * 2 - 0.5
    assert torch.equal(copy.occupied(points), grid.occupied(points))


def test_later_update_with_more_occupied_cells_than_slots_draws_occupied_cells_only():
    grid = OccupancyGrid(aabb_scale=2, resolution=8)  # 2 cascades of 512 cells, 2·128 slots
    grid.update(0, lambda p: torch.full((p.shape[0],), 100.0), generator=torch.Generator().manual_seed(1))
    assert int(grid.occupancy_mask().sum()) == 2 * 8**3  # every cell occupied: more than the slots
    seen = []

    def recording_fn(points):
        seen.append(points.clone())
        return torch.full((points.shape[0],), 100.0)

    grid.update(300, recording_fn, generator=torch.Generator().manual_seed(2))
    points = torch.cat(seen)
    assert points.shape[0] == 2 * (2 * 8**3 // 4)
    cascade, _, inside = grid.locate(points[2 * 8**3 // 4:])
    assert inside.all()
    assert set(cascade.tolist()) == {0, 1}  # drawn from both cascades' occupied cells


def test_update_reads_nothing_on_the_host():
    grid = OccupancyGrid(aabb_scale=1, resolution=8)
    density_fn = sphere_density((0.5, 0.5, 0.5), 0.2, 100.0)
    grid.update(0, density_fn)
    original_item, original_bool = torch.Tensor.item, torch.Tensor.__bool__

    def refuse(*args):
        raise AssertionError("the update read a device value on the host")

    torch.Tensor.item, torch.Tensor.__bool__ = refuse, refuse
    try:
        grid.update(300, density_fn)
    finally:
        torch.Tensor.item, torch.Tensor.__bool__ = original_item, original_bool


# ------------------------------------------------------------------ the background shell (unbounded model)


def test_the_background_shell_adds_one_level_and_leaves_the_box_lookups_alone():
    plain = OccupancyGrid(aabb_scale=4, resolution=8)
    shell = OccupancyGrid(aabb_scale=4, resolution=8, background_shell=True)
    assert (shell.cascades, shell.levels) == (3, 4) and (plain.cascades, plain.levels) == (3, 3)
    assert shell.density.shape == (4, 512) and shell.bitfield.shape == (4, 64)
    torch.testing.assert_close(shell.aabb, plain.aabb)  # the scene box is the same
    inside = (torch.rand(2000, 3, generator=torch.Generator().manual_seed(5)) * 2 - 1) * 2.0 + 0.5
    for a, b in zip(shell.locate(inside), plain.locate(inside)):
        assert torch.equal(a, b)
    # beyond the box (half side 2): contracted into level 3, (2 - 1/rho)·2 from the centre
    far = torch.tensor([[0.5 + 4.0, 0.5, 0.5], [0.5, 0.5, 0.5 - 1e6], [float("nan"), 0.5, 0.5]])
    level, cell, found = shell.locate(far)
    assert level[:2].tolist() == [3, 3] and found.tolist() == [True, True, False]
    # x = 4 from the centre: rho = 2, contracted to 3 of the level's half side 4 → cell floor((3/8 + 0.5)·8) = 7
    assert int(cell[0] % 8) == 7 and int((cell[0] // 8) % 8) == 4
    assert plain.locate(far)[2].tolist() == [False, False, False]


def test_an_update_evaluates_the_shell_at_world_points_beyond_the_box_scaled_by_rho_squared():
    grid = OccupancyGrid(aabb_scale=2, resolution=8, background_shell=True)
    seen = []

    def constant(points):
        seen.append(points.clone())
        return torch.full((points.shape[0],), 3.0)

    grid.update(0, constant, generator=torch.Generator().manual_seed(6))
    points = torch.cat(seen)
    assert points.shape[0] == 3 * 512  # warm-up: every cell of the two cascades and the shell
    rho = (points[2 * 512:] - 0.5).abs().amax(dim=-1)  # the box's half side is 1
    # the level's outer half (8³ − 4³ cells) stands for world points beyond the box, far out; its
    # inner half lies in the box, where finer cascades answer every lookup
    assert int((rho > 1.0).sum()) == 512 - 64 and float(rho.max()) > 4.0
    assert bool(torch.isfinite(points).all())
    # the shell's value is σ·Δt with Δt = √3/1024·2^C·ρ² at the evaluated point (ρ >= 1)
    shell_values = grid.density[2]
    expected = 3.0 * MIN_STEP_SIZE * 4 * rho.clamp_min(1.0) ** 2
    torch.testing.assert_close(shell_values.sort().values, expected.sort().values)
    torch.testing.assert_close(grid.density[:2].amax(dim=1), 3.0 * MIN_STEP_SIZE * torch.tensor([1.0, 2.0]))


def test_the_shell_occupies_where_the_background_has_density():
    grid = OccupancyGrid(aabb_scale=1, resolution=16, background_shell=True)

    def far_wall(points):  # density only beyond x = 2 (the box spans [0, 1])
        return torch.where(points[:, 0] > 2.0, 50.0, 0.0)

    grid.update(0, far_wall, generator=torch.Generator().manual_seed(7))
    # x = 8 lies in the shell's last cell along +x (x from 2.5 to infinity); x = 1.2 in one that
    # spans x from 1.17 to 1.5
    probes = torch.tensor([[8.0, 0.5, 0.5], [-8.0, 0.5, 0.5], [0.5, 0.5, 0.5], [1.2, 0.5, 0.5]])
    assert grid.occupied(probes).tolist() == [True, False, False, False]
    assert not grid.occupancy_mask()[0].any()  # nothing inside the box
