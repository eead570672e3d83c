"""The occupancy grid: cascaded density grids, their EMA update and the occupancy bitfield.

Reference: Müller et al. 2022, *Instant Neural Graphics Primitives*, §5.4 ("Accelerated ray
marching"), and instant-ngp ``src/testbed_nerf.cu`` (``generate_grid_samples_nerf_nonuniform``,
``splat_grid_samples_nerf_max_nearest_neighbor``, ``ema_grid_samples_nerf``,
``update_density_grid_mean_and_bitfield``, ``grid_to_bitfield``, ``mark_untrained_density_grid``).

Layout
------
* Cascade ``c`` (0 ≤ c < C, ``C = log2(aabb_scale) + 1``) covers the cube of side ``2^c`` centred at
  (0.5, 0.5, 0.5); cascade 0 is the unit cube, cascade C−1 the whole scene box.
* Each cascade is a grid of ``R³`` cells (R = ``resolution``, 128 in instant-ngp). Cell
  ``(x, y, z)`` of cascade ``c`` covers ``0.5 + ([x, x+1]/R − 0.5)·2^c`` along the first axis (and
  likewise for y, z); its linear index is ``i = x + y·R + z·R²`` (instant-ngp uses Morton order
  instead; the order only matters inside this module and to readers of the bitfield).
* ``density[c, i]`` holds the cell's *optical thickness* ``σ·Δt_c`` with ``Δt_c = √3/1024·2^c``, the
  ray-marching step of that cascade's scale (instant-ngp stores the same, so the threshold
  ``NERF_MIN_OPTICAL_THICKNESS = 0.01`` is an opacity-like quantity independent of the cascade).
  A value of −1 marks a cell no training camera sees (:meth:`OccupancyGrid.mark_invisible`); such
  cells are never updated and never occupied.
* ``bitfield[c, i >> 3]`` bit ``i & 7`` is 1 when cell ``i`` of cascade ``c`` is occupied, i.e.
  ``(bitfield[c, i >> 3] >> (i & 7)) & 1``.

Background shell (the unbounded scene model)
--------------------------------------------
With ``background_shell`` the grid has one level more, ``levels = C + 1``: level C is laid out as a
cascade of side ``2^C`` (twice the scene box) over *contracted* positions
(:class:`trainer.render.contraction.SceneContraction`): a point beyond the scene box is contracted
into the shell between the box and that cube's face, and looked up there; points inside the box
are unchanged and find their cascade as before, so the box's cascades behave exactly as without
the shell. Level C's cells hold ``σ·Δt`` with ``Δt = √3/1024·2^C·ρ²`` at the evaluated point
(``ρ = ‖(x − c)/r‖∞``, r the box's half side): the step of a cascade of level C's scale, stretched
as the contraction stretches space there (its radial Jacobian is ``1/ρ²``). Without the shell every
point outside the scene box is unoccupied.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from trainer.contract.errors import ConfigError
from trainer.render.contraction import SceneContraction

#: instant-ngp ``MIN_CONE_STEPSIZE() = √3 / NERF_STEPS()``, NERF_STEPS = 1024: the finest step (world units).
MIN_STEP_SIZE = math.sqrt(3.0) / 1024.0
#: instant-ngp ``NERF_MIN_OPTICAL_THICKNESS``: the largest occupancy threshold on σ·Δt.
MIN_OPTICAL_THICKNESS = 0.01

DensityFn = Callable[[Tensor], Tensor]


class OccupancyGrid(nn.Module):
    """Cascaded occupancy grid of instant-ngp (see the module docstring for the layout).

    Args:
        aabb_scale: side of the scene box (power of two, 1..128); sets ``cascades = log2 + 1``.
        resolution: cells per axis of each cascade (an even number ≥ 2; instant-ngp: 128).
        decay: EMA decay of the stored optical thickness per update, in (0, 1] (instant-ngp: 0.95).
        threshold: upper bound of the occupancy threshold on optical thickness σ·Δt (instant-ngp:
            ``NERF_MIN_OPTICAL_THICKNESS`` = 0.01); the threshold used is
            ``min(threshold, mean_density)``.
        background_shell: add level C over the contracted space beyond the scene box (module
            docstring; the unbounded scene model).

    Attributes:
        cascades: C, the scene box's cascades; levels: C, or C + 1 with the background shell.

    Buffers (saved with ``state_dict``):
        density: [levels, R³] float32, EMA of the optical thickness σ·Δt_c per cell (−1: unseen).
        bitfield: [levels, R³/8] uint8, one occupancy bit per cell. Until the first
            :meth:`update` every cell is occupied, so an untrained grid does not cull anything.

    Raises:
        ConfigError: if an argument is out of range (the message names it and its value).
    """

    density: Tensor
    bitfield: Tensor

    def __init__(
        self,
        aabb_scale: int,
        resolution: int = 128,
        decay: float = 0.95,
        threshold: float = MIN_OPTICAL_THICKNESS,
        background_shell: bool = False,
    ) -> None:
        super().__init__()
        if (
            isinstance(aabb_scale, bool)
            or not isinstance(aabb_scale, int)
            or not 1 <= aabb_scale <= 128
            or aabb_scale & (aabb_scale - 1)
        ):
            raise ConfigError(f"occupancy_grid.aabb_scale: expected a power of two in 1..128, got {aabb_scale!r}")
        if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 2 or resolution % 2:
            raise ConfigError(f"occupancy_grid.resolution: expected an even integer >= 2, got {resolution!r}")
        if not 0.0 < decay <= 1.0:
            raise ConfigError(f"occupancy_grid.decay: expected a number in (0, 1], got {decay!r}")
        if not threshold >= 0.0:
            raise ConfigError(f"occupancy_grid.threshold: expected a number >= 0, got {threshold!r}")
        self.aabb_scale = aabb_scale
        self.resolution = resolution
        self.cascades = int(math.log2(aabb_scale)) + 1
        self.shell = bool(background_shell)
        self.levels = self.cascades + int(self.shell)
        self.contraction = SceneContraction.of_box(aabb_scale) if self.shell else None
        self.decay = float(decay)
        self.threshold = float(threshold)
        n_cells = resolution**3
        self.register_buffer("density", torch.zeros(self.levels, n_cells, dtype=torch.float32))
        self.register_buffer("bitfield", torch.full((self.levels, n_cells // 8), 255, dtype=torch.uint8))

    # ---------------------------------------------------------------- geometry

    @property
    def cells_per_cascade(self) -> int:
        """R³."""
        return self.resolution**3

    @property
    def aabb(self) -> Tensor:
        """[2, 3] float32: the scene box (min corner, max corner), on the grid's device."""
        half = 0.5 * self.aabb_scale  # filled on the device: no copy from the host inside a graph capture
        corners = torch.empty(2, 3, dtype=torch.float32, device=self.density.device)
        corners[0], corners[1] = 0.5 - half, 0.5 + half
        return corners

    def step_sizes(self) -> Tensor:
        """[levels] float32: Δt_c = √3/1024·2^c, the step by which σ is scaled when stored (the
        background shell's level scales it further by ρ² at each point, :meth:`thickness_steps`)."""
        return MIN_STEP_SIZE * torch.exp2(
            torch.arange(self.levels, device=self.density.device, dtype=torch.float32)
        )

    def thickness_steps(self, level: Tensor, points: Tensor) -> Tensor:
        """[m] float32: the step Δt that σ is multiplied by when stored, for points [m, 3] (world)
        of cells of ``level`` [m] int64: Δt_c, times ρ² on the background shell's level."""
        steps = self.step_sizes()[level]
        if self.contraction is None:
            return steps
        rho = self.contraction.shell_norm(points.float()).clamp_min(1.0)  # (the level's inner half: the box)
        return torch.where(level == self.cascades, steps * rho * rho, steps)

    def cell_points(self, cascade: Tensor, cell: Tensor, offset: Tensor | float = 0.5) -> Tensor:
        """Positions inside cells, in the level's own space (world positions for the box's
        cascades, contracted positions for the background shell's level: :meth:`cell_world_points`
        gives world positions for every level).

        Args:
            cascade: [m] int64 level index of each cell.
            cell: [m] int64 linear cell index ``x + y·R + z·R²``.
            offset: [m, 3] in [0, 1) or a scalar: position inside the cell in cell units
                (0.5 = the cell centre, 0 = its min corner).

        Returns:
            points: [m, 3] float32 positions ``0.5 + ((xyz + offset)/R − 0.5)·2^c``.
        """
        res = self.resolution
        xyz = torch.stack((cell % res, (cell // res) % res, cell // (res * res)), dim=-1).float()
        scale = torch.exp2(cascade.float()).unsqueeze(-1)
        return ((xyz + offset) / res - 0.5) * scale + 0.5

    def cell_world_points(self, cascade: Tensor, cell: Tensor, offset: Tensor | float = 0.5) -> Tensor:
        """World positions inside cells of any level: :meth:`cell_points`, uncontracted on the
        background shell's level (finite: the contracted cube's face is taken just inside it)."""
        points = self.cell_points(cascade, cell, offset)
        if self.contraction is None:
            return points
        return torch.where((cascade == self.cascades).unsqueeze(-1), self.contraction.uncontract(points), points)

    def locate(self, points: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The cell of the finest level that contains each point.

        The level is ``max(0, e + 1)`` for ``max|p − 0.5| = m·2^e``, ``m ∈ [0.5, 1)`` (instant-ngp
        ``mip_from_pos``), clamped to the coarsest level; with the background shell, points are
        contracted first, so a point beyond the scene box falls in the shell's level.

        Args:
            points: [n, 3] float world positions.

        Returns:
            cascade: [n] int64 level; cell: [n] int64 linear index; inside: [n] bool, False for
            points outside the scene box (every finite point is inside a grid with the background
            shell) or not finite, whose level/cell are clamped and meaningless.
        """
        p = points.float()
        if self.contraction is not None:
            p = self.contraction.contract(p)
        offset = (p - 0.5).abs().amax(dim=-1)
        inside = offset <= 0.5 * self.aabb_scale * (2 if self.shell else 1)  # False for NaN
        _, exponent = torch.frexp(offset)
        cascade = torch.where(offset < 0.5, 0, exponent.long() + 1).clamp(0, self.levels - 1)
        unit = (p - 0.5) / torch.exp2(cascade.float()).unsqueeze(-1) + 0.5
        res = self.resolution
        xyz = torch.nan_to_num(unit * res).floor().long().clamp(0, res - 1)
        cell = xyz[:, 0] + xyz[:, 1] * res + xyz[:, 2] * (res * res)
        return cascade, cell, inside

    # ---------------------------------------------------------------- queries

    def occupancy_mask(self) -> Tensor:
        """[levels, R³] bool: the bitfield unpacked (cell order ``x + y·R + z·R²``); rows
        ``0 .. cascades − 1`` are the scene box's cascades, a last row the background shell's."""
        shifts = torch.arange(8, device=self.bitfield.device, dtype=torch.uint8)
        bits = (self.bitfield.unsqueeze(-1) >> shifts) & 1
        return bits.reshape(self.levels, -1).bool()

    def occupied(self, points: Tensor) -> Tensor:
        """Whether each point lies in an occupied cell.

        Looks the point up in the finest cascade containing it (see :meth:`locate`) and reads bit
        ``i & 7`` of byte ``i >> 3`` of the bitfield, ``i = c·R³ + x + y·R + z·R²``.

        Args:
            points: [n, 3] float world positions.

        Returns:
            [n] bool; False for points outside the scene box (without the background shell).

        Raises:
            ValueError: if ``points`` is not [n, 3].
        """
        if points.ndim != 2 or points.shape[-1] != 3:
            raise ValueError(f"OccupancyGrid.occupied: points must be [n, 3], got {tuple(points.shape)}")
        cascade, cell, inside = self.locate(points)
        index = cascade * self.cells_per_cascade + cell
        byte = self.bitfield.reshape(-1)[index >> 3].long()
        return ((byte >> (index & 7)) & 1).bool() & inside

    @property
    def mean_density(self) -> float:
        """Mean of ``max(density, 0)`` over the cells of cascade 0 (instant-ngp averages the
        first ``NERF_GRID_N_CELLS`` cells only), in optical-thickness units σ·Δt_0."""
        return float(self.density[0].clamp_min(0).mean())

    def occupancy_fraction(self) -> float:
        """Share of all cells (every level) whose occupancy bit is set, in [0, 1]."""
        return float(self.occupancy_mask().float().mean())

    # ---------------------------------------------------------------- update

    @torch.no_grad()
    def update(
        self,
        step: int,
        density_fn: DensityFn,
        *,
        warmup_steps: int = 256,
        generator: torch.Generator | None = None,
        chunk: int = 2**18,
    ) -> None:
        """One EMA update of the density grid followed by a new bitfield.

        1. Choose cells: while ``step < warmup_steps`` every cell of every level; afterwards,
           per level, R³/4 cells drawn uniformly (with replacement), plus L·R³/4 slots for
           occupied cells (L levels) — all of them when there are at most L·R³/4 (the spare slots
           are left out), otherwise L·R³/4 drawn from them with replacement (instant-ngp draws
           R³/4 uniform and R³/4 occupied cells per cascade). Cells marked unseen (density < 0)
           are left out.
        2. Evaluate ``σ = density_fn(p)`` at one uniformly random point ``p`` inside each chosen
           cell (uniform in the level's own space: contracted on the background shell's level,
           evaluated at the world point it stands for), in chunks of ``chunk`` points, and take
           ``new = σ·Δt`` (:meth:`thickness_steps`; the maximum when a cell is drawn twice; 0 for
           cells not drawn).
        3. EMA: ``density ← max(density·decay, new)`` for every seen cell (unseen cells keep −1).
        4. Bitfield: occupied ⇔ ``density > min(threshold, mean_density)``.

        Every shape is fixed by the grid (the occupied cells are found by a prefix sum over the
        bitfield and a sorted search, cells left out are masked rather than removed) and nothing
        is read on the host, so the update queues on the device without waiting for it and can
        be captured in a CUDA graph.

        Args:
            step: the training step (decides warm-up).
            density_fn: maps [m, 3] float32 world positions to [m] densities σ ≥ 0 (1/world units);
                called under ``torch.no_grad``.
            warmup_steps: steps during which every cell is evaluated (instant-ngp: 256).
            generator: random generator on the grid's device, for reproducible updates.
            chunk: points per ``density_fn`` call.

        Raises:
            ValueError: if ``density_fn`` returns a tensor of the wrong shape.
        """
        device = self.density.device
        n_cells = self.cells_per_cascade
        n_total = self.levels * n_cells
        flat_density = self.density.reshape(-1)
        if step < warmup_steps:
            chosen = torch.arange(n_total, device=device)
            keep = flat_density >= 0
        else:
            quarter = max(1, n_cells // 4)
            uniform = torch.randint(
                0, n_cells, (self.levels, quarter), device=device, generator=generator
            ) + n_cells * torch.arange(self.levels, device=device).unsqueeze(-1)
            budget = self.levels * quarter
            occupied, occupied_ok = self._occupied_draw(budget, generator)
            chosen = torch.cat((uniform.reshape(-1), occupied))
            keep = torch.cat((torch.ones(budget, dtype=torch.bool, device=device), occupied_ok))
            keep &= flat_density[chosen] >= 0

        new = torch.zeros(n_total, device=device, dtype=torch.float32)
        for begin in range(0, chosen.numel(), chunk):
            index = chosen[begin : begin + chunk]
            cascade = index // n_cells
            jitter = torch.rand(index.numel(), 3, device=device, generator=generator)
            points = self.cell_world_points(cascade, index % n_cells, jitter)
            sigmas = density_fn(points)
            if sigmas.shape != (index.numel(),) and sigmas.shape != (index.numel(), 1):
                raise ValueError(
                    f"OccupancyGrid.update: density_fn must return [{index.numel()}] densities, "
                    f"got shape {tuple(sigmas.shape)}"
                )
            thickness = sigmas.reshape(-1).float().clamp_min(0) * self.thickness_steps(cascade, points)
            thickness = torch.where(keep[begin : begin + chunk], thickness, 0.0)  # 0 never wins the max
            new.scatter_reduce_(0, index, thickness, reduce="amax", include_self=True)

        decayed = torch.maximum(flat_density * self.decay, new)
        flat_density.copy_(torch.where(flat_density < 0, flat_density, decayed))
        self._refresh_bitfield()

    def _occupied_draw(self, budget: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """``budget`` occupied cells (flat indices) and which slots hold one: every occupied cell
        once when there are at most ``budget``, else ``budget`` drawn uniformly with replacement.
        Shapes are fixed; the count stays on the device."""
        device = self.density.device
        rank_end = self.occupancy_mask().reshape(-1).cumsum(0)  # [C·R³]: occupied cells up to each one
        n_occupied = rank_end[-1]
        slot = torch.arange(budget, device=device)
        drawn = (torch.rand(budget, device=device, generator=generator) * n_occupied).long()
        rank = torch.where(n_occupied > budget, drawn.clamp(max=n_occupied - 1), slot)
        ok = (slot < n_occupied) | (n_occupied > budget)
        index = torch.searchsorted(rank_end, rank, right=True).clamp(max=rank_end.numel() - 1)
        return index, ok

    def _refresh_bitfield(self) -> None:
        mean = self.density[0].clamp_min(0).mean()
        threshold = torch.clamp(mean, max=self.threshold)  # min(threshold, mean), on the device
        self.bitfield.copy_(pack_bits(self.density > threshold))

    # ---------------------------------------------------------------- visibility

    @torch.no_grad()
    def mark_invisible(
        self,
        c2w: Tensor,
        focal_px: Tensor,
        principal_px: Tensor,
        size_px: Tensor,
    ) -> int:
        """Mark the cells no camera sees as unseen (density −1, never occupied).

        A cell is seen when at least one of its 8 corners lies in front of at least one camera
        and projects inside that camera's image (pinhole, distortion ignored), as instant-ngp's
        ``mark_untrained_density_grid`` does. Seen cells that were marked unseen get density 0;
        other seen cells keep their value. Work: one projection of the (R+1)³·L cell corners per
        camera (L levels; a loop over cameras, vectorised over corners). The background shell's
        corners are projected where they stand in the world (uncontracted).

        Args:
            c2w: [n_cameras, 3 or 4, 4] camera-to-world, OpenGL axes (the camera looks down −z,
                y up), unit-cube world — as :class:`trainer.data.scene.Frame` gives.
            focal_px: [n_cameras, 2] (fx, fy) in pixels.
            principal_px: [n_cameras, 2] (cx, cy) in pixels; pixel v grows downwards.
            size_px: [n_cameras, 2] (width, height) in pixels.

        Returns:
            The number of cells (over all levels) marked unseen.

        Raises:
            ValueError: if the shapes do not match.
        """
        n_cam = c2w.shape[0]
        if c2w.ndim != 3 or c2w.shape[1:] not in ((3, 4), (4, 4)):
            raise ValueError(f"OccupancyGrid.mark_invisible: c2w must be [n, 4, 4], got {tuple(c2w.shape)}")
        for name, value in (("focal_px", focal_px), ("principal_px", principal_px), ("size_px", size_px)):
            if value.shape != (n_cam, 2):
                raise ValueError(
                    f"OccupancyGrid.mark_invisible: {name} must be [{n_cam}, 2], got {tuple(value.shape)}"
                )
        device = self.density.device
        res = self.resolution
        corners_1d = torch.arange(res + 1, device=device, dtype=torch.float32) / res - 0.5
        gz, gy, gx = torch.meshgrid(corners_1d, corners_1d, corners_1d, indexing="ij")
        unit_corners = torch.stack((gx, gy, gz), dim=-1).reshape(-1, 3)  # x fastest
        scales = torch.exp2(torch.arange(self.levels, device=device, dtype=torch.float32))
        corners = unit_corners.unsqueeze(0) * scales.view(-1, 1, 1) + 0.5  # [levels, (R+1)³, 3]
        if self.contraction is not None:  # the shell's corners stand for the world points they contract from
            corners[-1] = self.contraction.uncontract(corners[-1])
        corners = corners.reshape(-1, 3)

        seen = torch.zeros(corners.shape[0], dtype=torch.bool, device=device)
        c2w = c2w.to(device=device, dtype=torch.float32)
        focal_px, principal_px, size_px = (
            value.to(device=device, dtype=torch.float32) for value in (focal_px, principal_px, size_px)
        )
        for cam in range(n_cam):
            rotation, origin = c2w[cam, :3, :3], c2w[cam, :3, 3]
            local = (corners - origin) @ rotation  # camera coordinates (x right, y up, −z forward)
            depth = -local[:, 2]
            direction_cos = depth / local.norm(dim=-1).clamp_min(1e-12)
            u = principal_px[cam, 0] + focal_px[cam, 0] * local[:, 0] / depth.clamp_min(1e-12)
            v = principal_px[cam, 1] - focal_px[cam, 1] * local[:, 1] / depth.clamp_min(1e-12)
            seen |= (
                (direction_cos > 1e-4)
                & (u > 0)
                & (u < size_px[cam, 0])
                & (v > 0)
                & (v < size_px[cam, 1])
            )

        # A cell is seen when any of its 8 corners is: a 2×2×2 max-pool over the corner lattice.
        lattice = seen.view(self.levels, 1, res + 1, res + 1, res + 1).float()
        cell_seen = torch.nn.functional.max_pool3d(lattice, kernel_size=2, stride=1)
        cell_seen = cell_seen.reshape(self.levels, -1).bool()
        self.density.copy_(
            torch.where(cell_seen, torch.where(self.density < 0, 0.0, self.density), -1.0)
        )
        self.bitfield.copy_(self.bitfield & pack_bits(cell_seen))
        return int((~cell_seen).sum())


def pack_bits(mask: Tensor) -> Tensor:
    """Pack booleans eight to a byte, least significant bit first.

    Args:
        mask: [..., n] bool with n divisible by 8.

    Returns:
        [..., n/8] uint8 where bit ``j`` of byte ``k`` is ``mask[..., 8k + j]``.
    """
    assert mask.shape[-1] % 8 == 0, "pack_bits needs a multiple of 8 booleans"
    weights = (1 << torch.arange(8, device=mask.device, dtype=torch.int32)).to(torch.uint8)
    grouped = mask.reshape(*mask.shape[:-1], -1, 8).to(torch.uint8)
    return (grouped * weights).sum(dim=-1, dtype=torch.uint8)
