"""Ray marching into packed samples, skipping empty space with the occupancy grid.

Reference: Müller et al. 2022, *Instant Neural Graphics Primitives*, §5.4 and Appendix E.1
(exponential stepping); instant-ngp ``src/testbed_nerf.cu`` (``calc_dt``, ``advance_n_steps``,
``generate_training_samples_nerf``); nerfacc ``pack.py`` for the packed layout.

Step rule
---------
A ray's steps start at ``t_0 = t_near + u·dt(t_near)`` (``u ~ U[0, 1)`` per ray with jitter, else 0)
and follow ``t_{k+1} = t_k + dt(t_k)`` with ``dt(t) = clamp(t·cone_angle, step_size, max_step_size)``
(instant-ngp ``calc_dt``). The recurrence has a closed form with three regions:

* linear: ``t_k = t_0 + k·step_size`` while ``t_k < t1 = step_size / cone_angle``,
* geometric: ``t_k = a·(1 + cone_angle)^(k − n_a)`` while ``t_k < t2 = max_step_size / cone_angle``,
  where ``n_a`` is the number of linear steps and ``a = t_{n_a}``,
* clamped: ``t_k = b + (k − n_a − n_b)·max_step_size``, ``b = t_{n_a + n_b}``,

so the candidate steps of every ray are computed at once, and the number of steps that start
before ``t_far`` is known per ray before marching. Each step ``k`` is the interval
``[t_k, t_{k+1}]``; its sample sits at the midpoint ``t = t_k + dt/2`` with step length ``dt``.
This lattice is what instant-ngp's ``advance_to_next_voxel`` keeps to when skipping empty space.

A candidate is kept when its midpoint is before ``t_far`` and lies in an occupied cell; each ray
keeps at most ``max_steps`` samples, the first ones (instant-ngp counts only occupied samples
against ``NERF_STEPS``).

Background shell (the unbounded scene model)
--------------------------------------------
With ``background_steps`` N > 0 a ray goes on past the box, from the end of its last box step
``t_s`` (the start of the first step whose midpoint is not before ``t_far``, at least
``step_size``; ``max(t_near, step_size)`` for a ray that misses the box), in N steps uniform in
disparity (Mip-NeRF 360 §2: spacing uniform in 1/t beyond the region of interest):

    t_j = t_s·(N + 1) / (N + 1 − j),   j = 0 .. N,

step ``j`` being ``[t_j, t_{j+1}]`` with its sample at the midpoint, so the last step ends at
``(N + 1)·t_s``; seen from the box centre, the steps cross the contracted shell of
:mod:`trainer.render.contraction` evenly. These samples are not jittered (the box's jitter moves
``t_s``). They are looked up in the grid's background shell and count against ``max_steps`` after
the box's samples. A ray that starts outside the box is marched from its box entry (the shell in
front of the box is not marched): the unbounded model expects the cameras inside the scene box.

Memory and work
---------------
Work is linear in the number of candidate steps Σ_r K_r, where ``K_r`` ≈ the ray's steps through
the box (up to 1024 for aabb_scale 1; about 1.7k for aabb_scale 16 with cone_angle 1/256; up to
131k for aabb_scale 128 without cone stepping). Rays are processed in chunks whose candidates
total at most about ``max_candidates_per_chunk`` (default 2^24; a single ray is never split), which
bounds the temporary memory at roughly 100-130 bytes per candidate (measured on CPU: about 2 GiB
at 2^24). The output holds only the kept samples (40 bytes each in float32).

Evaluation
----------
Early termination (transmittance < 1e-4) is left to compositing
(:func:`trainer.render.volrend.render_weights` gives zero weight after it); evaluation renders an
image in chunks of rays through :func:`march_rays` with ``jitter=False``. This evaluates the field
on some samples behind opaque surfaces, which costs time but not correctness.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import torch
from torch import Tensor

from trainer.render.aabb import ray_aabb_intersect
from trainer.render.occupancy import MIN_STEP_SIZE, OccupancyGrid


@dataclasses.dataclass
class PackedSamples:
    """Samples of many rays stored back to back (nerfacc's packed layout).

    Attributes:
        positions: [S, 3] float, world positions of the samples (interval midpoints).
        directions: [S, 3] float, the direction of each sample's ray (as given, unit length in
            training).
        t: [S] float, distance of the sample along its ray (midpoint of its interval).
        dt: [S] float, length of the sample's interval (the step), world units.
        ray_indices: [S] int64, ray of each sample, sorted ascending; a ray's samples are
            contiguous and ordered front to back.
        packed_info: [n_rays, 2] int64, (start, count) of each ray's samples in the arrays above.
        n_rays: number of rays marched (rays with no sample included).
    """

    positions: Tensor
    directions: Tensor
    t: Tensor
    dt: Tensor
    ray_indices: Tensor
    packed_info: Tensor
    n_rays: int

    @property
    def n_samples(self) -> int:
        """S, the number of samples."""
        return int(self.t.shape[0])

    def rays(self, first: int, end: int) -> "PackedSamples":
        """The samples of rays ``first .. end - 1`` as packed samples of ``end - first`` rays
        (ray indices and starts renumbered from 0; the tensors are views where they can be).

        Raises:
            ValueError: unless ``0 <= first <= end <= n_rays``.
        """
        if not 0 <= first <= end <= self.n_rays:
            raise ValueError(f"PackedSamples.rays: expected 0 <= first <= end <= {self.n_rays}, got {first}, {end}")
        if first == 0 and end == self.n_rays:
            return self
        info = self.packed_info[first:end]
        begin = int(info[0, 0]) if end > first else 0
        stop = int(info[-1, 0] + info[-1, 1]) if end > first else 0
        shift = torch.tensor([begin, 0], dtype=info.dtype, device=info.device)
        return PackedSamples(self.positions[begin:stop], self.directions[begin:stop], self.t[begin:stop],
                             self.dt[begin:stop], self.ray_indices[begin:stop] - first, info - shift, end - first)


def ray_batches(samples: PackedSamples, max_samples: int) -> list[tuple[int, int]]:
    """Consecutive ray ranges ``(first, end)`` covering every ray of ``samples``, each holding at
    most ``max_samples`` samples, or one ray's samples when that ray alone holds more (a ray is
    never split, so compositing a range is compositing its rays). Rendering in such batches bounds
    the temporary memory of one field evaluation and makes its cost per sample the same whatever
    the rays' lengths (docs/benchmarks.md, "Evaluation on a CPU").

    Raises:
        ValueError: ``max_samples`` below 1.
    """
    if max_samples < 1:
        raise ValueError(f"ray_batches: max_samples must be >= 1, got {max_samples}")
    if samples.n_samples <= max_samples or samples.n_rays <= 1:
        return [(0, samples.n_rays)] if samples.n_rays else []
    counts = samples.packed_info[:, 1].cpu()
    ends = torch.cumsum(counts, 0).tolist()
    batches, first, start_sample = [], 0, 0
    for ray, end_sample in enumerate(ends):
        if end_sample - start_sample > max_samples and ray > first:
            batches.append((first, ray))
            first, start_sample = ray, ends[ray - 1]
    batches.append((first, samples.n_rays))
    return batches


@dataclasses.dataclass(frozen=True)
class _StepRule:
    """``dt(t) = clamp(t·cone_angle, step_size, max_step_size)`` in the box, then
    ``background_steps`` steps uniform in disparity (0: none)."""

    step_size: float
    cone_angle: float
    max_step_size: float
    background_steps: int = 0


@dataclasses.dataclass(frozen=True)
class _Steps:
    """Per-ray anchors of the closed-form step rule (see the module docstring), float64 [n]."""

    t0: Tensor  # first step start
    n_a: Tensor  # number of linear steps (2^52 when cone_angle == 0)
    a: Tensor  # start of the geometric region
    n_b: Tensor  # number of geometric steps
    b: Tensor  # start of the clamped region


def _step_anchors(t0: Tensor, rule: _StepRule) -> _Steps:
    t0 = t0.double()
    if rule.cone_angle == 0.0:
        huge = torch.full_like(t0, 2.0**52)
        return _Steps(t0, huge, t0, torch.zeros_like(t0), t0)
    t1 = rule.step_size / rule.cone_angle
    t2 = rule.max_step_size / rule.cone_angle
    n_a = torch.ceil((t1 - t0) / rule.step_size).clamp_min(0)
    a = t0 + n_a * rule.step_size
    n_b = torch.ceil(torch.log(t2 / a) / math.log1p(rule.cone_angle)).clamp_min(0)
    b = a * (1.0 + rule.cone_angle) ** n_b
    return _Steps(t0, n_a, a, n_b, b)


def _count_steps_before(t_far: Tensor, s: _Steps, rule: _StepRule) -> Tensor:
    """[n] float64: the number of steps k ≥ 0 with t_k < t_far, plus one for rounding slack."""
    t_far = t_far.double()
    linear = torch.ceil((t_far - s.t0) / rule.step_size)
    if rule.cone_angle == 0.0:
        return linear.clamp_min(0) + 1
    geometric = s.n_a + torch.ceil(torch.log(t_far / s.a) / math.log1p(rule.cone_angle))
    clamped = s.n_a + s.n_b + torch.ceil((t_far - s.b) / rule.max_step_size)
    count = torch.where(t_far <= s.a, linear, torch.where(t_far <= s.b, geometric, clamped))
    return count.clamp_min(0) + 1


def shell_steps_at(j: Tensor, t_s: Tensor, n_steps: int) -> tuple[Tensor, Tensor]:
    """Start ``t_j`` and length ``dt_j`` of background step ``j`` (float, [m]) of rays whose
    shell starts at ``t_s`` [m] (module docstring): ``t_j = (t_s·(N+1)) / (N+1 − j)`` in the
    dtype of ``t_s``, ``dt_j = t_{j+1} − t_j`` (the Triton marcher rounds the same operations)."""
    a = float(n_steps + 1)
    scaled = t_s * a
    t = scaled / (a - j)
    return t, scaled / (a - (j + 1.0)) - t


def _steps_at(k: Tensor, ray: Tensor, s: _Steps, rule: _StepRule, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Start ``t_k`` and length ``dt_k`` of step ``k`` of ray ``ray`` (both [m], ``dtype``).

    ``dt_k`` comes from the region's formula rather than ``t_{k+1} − t_k``, which would cancel.
    """
    kf = k.to(dtype)
    t_linear = s.t0.to(dtype)[ray] + kf * rule.step_size
    if rule.cone_angle == 0.0:
        return t_linear, torch.full_like(t_linear, rule.step_size)
    n_a, n_b = s.n_a.to(dtype)[ray], s.n_b.to(dtype)[ray]
    a, b = s.a.to(dtype)[ray], s.b.to(dtype)[ray]
    t_geometric = a * torch.exp((kf - n_a) * math.log1p(rule.cone_angle))
    t_clamped = b + (kf - n_a - n_b) * rule.max_step_size
    in_linear = kf < n_a
    in_geometric = kf < n_a + n_b
    t = torch.where(in_linear, t_linear, torch.where(in_geometric, t_geometric, t_clamped))
    dt = torch.where(
        in_linear,
        torch.full_like(t, rule.step_size),
        torch.where(in_geometric, t_geometric * rule.cone_angle, torch.full_like(t, rule.max_step_size)),
    )
    return t, dt


@torch.no_grad()
def march_rays(
    rays_o: Tensor,
    rays_d: Tensor,
    aabb: Tensor,
    grid: OccupancyGrid | None,
    *,
    step_size: float = MIN_STEP_SIZE,
    cone_angle: float = 0.0,
    max_steps: int = 1024,
    max_step_size: float | None = None,
    jitter: bool = False,
    generator: torch.Generator | None = None,
    near: float = 0.0,
    max_candidates_per_chunk: int = 2**24,
    backend: str = "torch",
    background_steps: int = 0,
) -> PackedSamples:
    """March rays through the box and return the samples in occupied cells, packed per ray.

    See the module docstring for the step rule, the sample placement and the memory bound.
    Not differentiable (positions carry no gradient).

    Args:
        rays_o: [n_rays, 3] float32 (or float64) ray origins, world units.
        rays_d: [n_rays, 3] ray directions (unit length, so that distances are world units).
        aabb: [2, 3] the box to march in (usually the scene box).
        grid: occupancy grid used to skip empty cells; None keeps every step. With
            ``background_steps`` it must have the background shell.
        step_size: the smallest step (instant-ngp ``MIN_CONE_STEPSIZE`` = √3/1024).
        cone_angle: steps grow as ``t·cone_angle`` (the caller passes 1/256 when aabb_scale > 1,
            instant-ngp's default, and 0 otherwise).
        max_steps: most samples kept per ray (instant-ngp ``NERF_STEPS`` = 1024).
        max_step_size: the largest step; default ``step_size·2^(C−1)`` with ``2^(C−1)`` the largest
            side of ``aabb`` rounded up to a power of two (instant-ngp clamps at
            ``√3/1024·2^7·1024/128`` instead, which rarely binds).
        jitter: start each ray at a random fraction of its first step (training).
        generator: random generator on the rays' device for the jitter.
        near: smallest distance along a ray (≥ 0).
        max_candidates_per_chunk: bound on the candidate steps held at once (torch backend).
        backend: ``"torch"`` (this module, the reference), ``"triton"`` (box, jitter and steps
            in two kernel launches, :mod:`trainer.render.triton_march`; float32 rays) or ``"auto"``
            (triton for float32 rays on CUDA when Triton imports, else torch).
        background_steps: N > 0 marches on past the box in N steps uniform in disparity (the
            unbounded scene model, module docstring); 0 stops at the box.

    Returns:
        :class:`PackedSamples` with tensors on the rays' device, positions/t/dt in the rays' dtype.

    Raises:
        ValueError: if the shapes do not match, a step parameter is out of range or the backend
            is unknown or unusable for these rays.

    Example:
        >>> o = torch.tensor([[-1.0, 0.5, 0.5]]); d = torch.tensor([[1.0, 0.0, 0.0]])
        >>> box = torch.tensor([[0.0] * 3, [1.0] * 3])
        >>> s = march_rays(o, d, box, None, step_size=0.25)
        >>> s.t, s.packed_info
        (tensor([1.1250, 1.3750, 1.6250, 1.8750]), tensor([[0, 4]]))
    """
    if rays_o.ndim != 2 or rays_o.shape[-1] != 3 or rays_d.shape != rays_o.shape:
        raise ValueError(
            "march_rays: rays_o and rays_d must both be [n_rays, 3], "
            f"got {tuple(rays_o.shape)} and {tuple(rays_d.shape)}"
        )
    if max_step_size is None:
        side = float((aabb[1] - aabb[0]).max())
        max_step_size = step_size * 2.0 ** max(0, math.ceil(math.log2(max(side, 1.0))))
    if not step_size > 0:
        raise ValueError(f"march_rays: step_size must be > 0, got {step_size!r}")
    if not cone_angle >= 0:
        raise ValueError(f"march_rays: cone_angle must be >= 0, got {cone_angle!r}")
    if not max_step_size >= step_size:
        raise ValueError(f"march_rays: max_step_size must be >= step_size ({step_size}), got {max_step_size!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"march_rays: max_steps must be an integer >= 1, got {max_steps!r}")
    if max_candidates_per_chunk < 1:
        raise ValueError(f"march_rays: max_candidates_per_chunk must be >= 1, got {max_candidates_per_chunk!r}")
    check_background_steps(background_steps, grid)

    use_triton = _use_triton(backend, rays_o, rays_d)
    rule = _StepRule(float(step_size), float(cone_angle), float(max_step_size), int(background_steps))
    device, dtype = rays_o.device, rays_o.dtype
    n_rays = rays_o.shape[0]
    if use_triton:
        from trainer.render.triton_march import march_packed_triton

        u = torch.rand(n_rays, device=device, dtype=dtype, generator=generator) if jitter else None
        ray_indices, t, dt, positions, directions, counts, first = march_packed_triton(
            rays_o, rays_d, aabb, near, u, grid, step_size=rule.step_size, cone_angle=rule.cone_angle,
            max_step_size=rule.max_step_size, max_steps=max_steps, background_steps=rule.background_steps,
        )
        packed_info = torch.stack((first, counts), dim=-1)
        return PackedSamples(positions, directions, t, dt, ray_indices, packed_info, n_rays)
    t_near, t_far, hit = ray_aabb_intersect(rays_o, rays_d, aabb, near=near)
    if jitter:
        first_dt = (t_near * rule.cone_angle).clamp(rule.step_size, rule.max_step_size)
        t_near = t_near + torch.rand(n_rays, device=device, dtype=dtype, generator=generator) * first_dt
    steps = _step_anchors(t_near, rule)
    n_candidates = torch.where(hit, _count_steps_before(t_far, steps, rule), 0).long()
    if grid is None and not rule.background_steps:  # every step is kept: steps past max_steps need not be made
        n_candidates = n_candidates.clamp_max(max_steps + 1)
    if rule.background_steps:  # every ray, hit or miss, marches the shell; one with a NaN component none
        no_nan = ((rays_o == rays_o) & (rays_d == rays_d)).all(dim=-1)
        n_candidates = n_candidates + rule.background_steps * no_nan.long()

    # Chunks of consecutive rays, a new chunk where the running candidate count crosses a
    # multiple of the budget: a chunk holds at most the budget plus one ray's candidates.
    first_candidate = torch.cumsum(n_candidates, 0) - n_candidates
    _, rays_per_chunk = torch.unique_consecutive(first_candidate // max_candidates_per_chunk, return_counts=True)
    pieces: list[tuple[Tensor, Tensor, Tensor]] = []
    ray_begin = 0
    for chunk_rays in rays_per_chunk.tolist():
        rays = slice(ray_begin, ray_begin + chunk_rays)
        pieces.append(_march_chunk(rays, rays_o, rays_d, t_far, n_candidates, steps, rule, grid, max_steps))
        ray_begin += chunk_rays

    if pieces:
        ray_indices = torch.cat([p[0] for p in pieces])
        t = torch.cat([p[1] for p in pieces])
        dt = torch.cat([p[2] for p in pieces])
    else:  # no rays at all
        ray_indices = torch.zeros(0, dtype=torch.long, device=device)
        t = dt = torch.zeros(0, dtype=dtype, device=device)
    directions = rays_d[ray_indices]
    positions = rays_o[ray_indices] + directions * t.unsqueeze(-1)
    counts = torch.bincount(ray_indices, minlength=n_rays)
    packed_info = torch.stack((torch.cumsum(counts, 0) - counts, counts), dim=-1)
    return PackedSamples(positions, directions, t, dt, ray_indices, packed_info, n_rays)


def triton_march_available(device: torch.device) -> bool:
    """Whether the Triton marcher can run on ``device``: Triton imports, and the device is CUDA
    (or the CPU with Triton's interpreter on, ``TRITON_INTERPRET=1`` before the first import).
    Off CUDA, with Triton not yet imported and ``TRITON_INTERPRET`` unset or off, False without
    importing Triton (a second of a CPU rank's start-up)."""
    if device.type != "cuda" and "triton" not in sys.modules and not _interpreter_requested():
        return False
    try:
        from trainer.render import triton_march
    except ImportError:
        return False
    return device.type == "cuda" or triton_march.INTERPRET


def _interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET`` may turn Triton's interpreter on when Triton is imported: set
    and not one of the values that say off (Triton itself decides whether the rest say on)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() not in ("", "0", "false", "off", "no", "n")


def check_background_steps(background_steps: int, grid: OccupancyGrid | None) -> None:
    """Raise ValueError unless ``background_steps`` is an integer >= 0 and, when > 0, ``grid`` is
    None or has the background shell (a grid without it would leave out every step beyond the box)."""
    if isinstance(background_steps, bool) or not isinstance(background_steps, int) or background_steps < 0:
        raise ValueError(f"march: background_steps must be an integer >= 0, got {background_steps!r}")
    if background_steps and grid is not None and not grid.shell:
        raise ValueError("march: background_steps > 0 needs an occupancy grid with the background shell "
                         "(OccupancyGrid(background_shell=True))")


def _use_triton(backend: str, rays_o: Tensor, rays_d: Tensor) -> bool:
    """Resolve ``backend`` for these rays (see :func:`march_rays`)."""
    if backend == "torch":
        return False
    float32 = rays_o.dtype == torch.float32 and rays_d.dtype == torch.float32
    if backend == "auto":
        return float32 and rays_o.is_cuda and triton_march_available(rays_o.device)
    if backend != "triton":
        raise ValueError(f"march_rays: backend must be 'auto', 'torch' or 'triton', got {backend!r}")
    if not float32:
        raise ValueError(f"march_rays: the triton backend takes float32 rays, got {rays_o.dtype}/{rays_d.dtype}")
    if not triton_march_available(rays_o.device):
        raise ValueError(
            f"march_rays: backend 'triton' cannot run on {rays_o.device} (it needs Triton and a CUDA "
            "device, or TRITON_INTERPRET=1 on the CPU)"
        )
    return True


def _march_chunk(
    rays: slice,
    rays_o: Tensor,
    rays_d: Tensor,
    t_far: Tensor,
    n_candidates: Tensor,
    steps: _Steps,
    rule: _StepRule,
    grid: OccupancyGrid | None,
    max_steps: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Kept samples (ray index [s], midpoint t [s], dt [s]) of the rays ``rays``, front to back.

    A ray's candidates are its box steps ``k = 0 ..`` and then, with background steps, its N shell
    steps (the last N candidates of the ray)."""
    device = rays_o.device
    counts = n_candidates[rays]
    total = int(counts.sum())
    local_ray = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts, output_size=total)
    ray = local_ray + rays.start
    first = torch.cumsum(counts, 0) - counts  # chunk-local index of each ray's first candidate
    k = torch.arange(total, device=device) - first[local_ray]
    t_start, dt = _steps_at(k, ray, steps, rule, rays_o.dtype)
    t_mid = t_start + 0.5 * dt
    keep = t_mid < t_far[ray]
    if rule.background_steps:
        n_shell = rule.background_steps
        n_box = (counts - n_shell).clamp_min(0)  # a ray with a NaN component has no candidate at all
        in_box = k < n_box[local_ray]
        keep &= in_box
        # t_s: the start of the first box step whose midpoint is not before t_far (steps are in order)
        k_exit = torch.zeros(counts.numel(), dtype=torch.long, device=device).index_add_(0, local_ray, keep.long())
        exit_ray = torch.arange(counts.numel(), device=device) + rays.start
        t_exit, _ = _steps_at(k_exit, exit_ray, steps, rule, rays_o.dtype)
        t_s = t_exit.clamp_min(rule.step_size)
        j = (k - n_box[local_ray]).to(rays_o.dtype)
        t_shell, dt_shell = shell_steps_at(j, t_s[local_ray], n_shell)
        t_mid = torch.where(in_box, t_mid, t_shell + 0.5 * dt_shell)
        dt = torch.where(in_box, dt, dt_shell)
        keep |= ~in_box
    if grid is not None:
        keep &= grid.occupied(rays_o[ray] + rays_d[ray] * t_mid.unsqueeze(-1))
    # Keep each ray's first max_steps samples: rank = running count of kept samples in the ray.
    kept = keep.long()
    running = torch.cumsum(kept, 0)
    rank = running - (running - kept)[first[local_ray]]
    keep &= rank <= max_steps
    return ray[keep], t_mid[keep], dt[keep]
