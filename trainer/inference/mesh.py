"""Marching-cubes mesh of a trained density field, in the capture's world frame.

1. The box: ``--aabb`` (source-world corners, mapped into the unit cube), or by default the
   bounding box of the occupancy grid's occupied cells (the part of the scene the renderer
   marches through), clipped to the scene box.
2. Density σ on an N³ lattice of that box (cell corners, both ends included), evaluated in chunks
   of :data:`CHUNK_POINTS` points; points the occupancy grid marks empty get σ = 0, as the
   renderer never samples there.
3. scikit-image's ``measure.marching_cubes`` at ``level = threshold`` (σ in 1/unit-cube units,
   the field's own; instant-ngp's default mesh threshold is 2.5).
4. Faces the training views do not support are left out (``min_views``, :mod:`trainer.inference.support`):
   a face stays when its three vertices lie on the rendered surface of at least ``min_views``
   training views; density that no training view shows as a surface (floaters, haze, the inside of
   hidden parts, corners of the scene box outside the views) leaves no triangles.
5. Vertex colours: the colour network at each vertex, looking along the inward normal (the
   density gradient, pointing into the surface), i.e. the surface as a camera facing it sees it.
6. Vertices and normals back into the source world (:mod:`trainer.inference.worldframe`), written
   through trimesh (``.ply``, ``.obj``, ``.glb``) to a temporary name and renamed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.contract.errors import ConfigError
from trainer.contract.commandline import DEFAULT_MESH_THRESHOLD, DEFAULT_MIN_VIEWS
from trainer.inference.loading import LoadedModel, precision_autocast
from trainer.inference.progress import Progress
from trainer.inference.worldframe import cube_to_world, world_to_cube
from trainer.contract.rundir import atomic_write, prepare_output_file

__all__ = [
    "DEFAULT_THRESHOLD",
    "DensityInterrupted",
    "MESH_EXTENSIONS",
    "check_mesh_request",
    "check_min_views",
    "density_grid",
    "density_seconds_estimate",
    "extract_mesh",
    "mesh_memory_bytes",
    "occupied_box",
    "supported_faces",
    "write_mesh",
]

DEFAULT_THRESHOLD = DEFAULT_MESH_THRESHOLD  # σ, instant-ngp's marching-cubes default
MESH_EXTENSIONS = (".ply", ".obj", ".glb")
CHUNK_POINTS = 2**18
PROBE_POINTS = 2**14  # points :func:`density_seconds_estimate` times (a few ms on a GPU, tens on a CPU)
# Bytes per lattice point while meshing: the float32 grid, scikit-image's float64 working copy and
# its per-cell edge tables (measured peak ~22 B/point at 256³, rounded up).
BYTES_PER_GRID_POINT = 32


def mesh_memory_bytes(resolution: int) -> int:
    """Peak host memory of meshing an N³ lattice (:data:`BYTES_PER_GRID_POINT` per point)."""
    return int(resolution) ** 3 * BYTES_PER_GRID_POINT


def available_memory_bytes() -> int:
    """MemAvailable of ``/proc/meminfo`` (else physical memory)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_mesh_request(resolution: int, out: Path, aabb: list[float] | None = None,
                       threshold: float = DEFAULT_THRESHOLD, min_views: int = DEFAULT_MIN_VIEWS) -> None:
    """Refuse a mesh request before any work: resolution below 2, a lattice that would not fit in
    memory (with the estimate), an unknown extension, an output folder that cannot be made, an
    empty ``--aabb``, a threshold that is not a finite σ >= 0 (the field's density is never
    negative, so a negative level lies below every cell), a negative ``--min-views``.

    Raises:
        ConfigError: one line naming the flag.
    """
    check_min_views(min_views)
    if not (np.isfinite(threshold) and threshold >= 0):
        raise ConfigError(f"--threshold {threshold:g}: expected a finite density σ >= 0 (default {DEFAULT_THRESHOLD:g})")
    if resolution < 2:
        raise ConfigError(f"--resolution {resolution}: expected an integer >= 2 (lattice points per axis)")
    need, have = mesh_memory_bytes(resolution), available_memory_bytes()
    if need > have:
        raise ConfigError(f"--resolution {resolution}: meshing needs about {_gib(need)} of memory "
                          f"({resolution}³ points × {BYTES_PER_GRID_POINT} B), {_gib(have)} is available; "
                          "use a lower --resolution or a smaller --aabb")
    if Path(out).suffix.lower() not in MESH_EXTENSIONS:
        raise ConfigError(f"--out {out}: unknown mesh extension {Path(out).suffix or '(none)'!r} "
                          f"(known: {', '.join(MESH_EXTENSIONS)})")
    if aabb is not None:
        lo, hi = np.asarray(aabb[:3]), np.asarray(aabb[3:])
        if not (np.all(np.isfinite(aabb)) and np.all(hi > lo)):
            raise ConfigError(f"--aabb {' '.join(f'{v:g}' for v in aabb)}: expected x0 y0 z0 x1 y1 z1 with x1 > x0, "
                              "y1 > y0, z1 > z0")
    prepare_output_file(Path(out), "--out")


def check_min_views(min_views: int) -> None:
    """Raises ConfigError for a negative ``--min-views``."""
    if min_views < 0:
        raise ConfigError(f"--min-views {min_views}: expected an integer >= 0 (0 keeps everything; default {DEFAULT_MIN_VIEWS})")


def occupied_box(trainer: Any) -> np.ndarray:
    """[2, 3] float64 unit-cube bounding box of the occupied cells of every cascade of the scene
    box (not the unbounded model's background shell), clipped to the scene box (the whole scene
    box when nothing is occupied)."""
    grid = trainer.grid
    mask = grid.occupancy_mask()
    scene_box = np.asarray(trainer.scene.aabb, dtype=np.float64)
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for cascade in range(grid.cascades):
        cells = mask[cascade].nonzero().squeeze(-1)
        if cells.numel() == 0:
            continue
        c = torch.full_like(cells, cascade)
        lo = np.minimum(lo, grid.cell_points(c, cells, 0.0).min(dim=0).values.cpu().numpy())
        hi = np.maximum(hi, grid.cell_points(c, cells, 1.0).max(dim=0).values.cpu().numpy())
    if not np.all(hi > lo):
        return scene_box
    return np.stack([np.maximum(lo, scene_box[0]), np.minimum(hi, scene_box[1])])


class DensityInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`density_grid`; the message says how far it got: ``after 226 of 512
    density slices`` (slices: the lattice's planes along x whose σ was all computed)."""


def _lattice_sigma(trainer: Any, points: torch.Tensor) -> torch.Tensor:
    """[n] float32 σ at ``points`` [n, 3] (unit cube), 0 where the occupancy grid marks them empty."""
    with precision_autocast(trainer):
        sigma = trainer.field.density(points).float()
    return torch.where(trainer.grid.occupied(points), sigma, torch.zeros_like(sigma))


@torch.no_grad()
def density_grid(trainer: Any, box: np.ndarray, resolution: int, quiet: bool = True) -> np.ndarray:
    """σ on the N³ lattice of ``box`` (module docstring, step 2).

    Args:
        trainer: holds ``field`` (``density(positions [n, 3]) -> [n]``) and ``grid``.
        box: [2, 3] unit-cube corners.
        resolution: N lattice points per axis.

    Returns:
        [N, N, N] float32, indexed ``[i, j, k]`` along unit-cube x, y, z.

    Raises:
        DensityInterrupted: Ctrl-C, with the slices done of N.
    """
    device = trainer.device
    axes = [torch.linspace(float(box[0, a]), float(box[1, a]), resolution, device=device) for a in range(3)]
    out = torch.empty(resolution**3, dtype=torch.float32)
    n = resolution**3
    done = 0
    progress = Progress("density", (n + CHUNK_POINTS - 1) // CHUNK_POINTS, quiet=quiet, rate_name="points")
    try:
        for start in range(0, n, CHUNK_POINTS):
            index = torch.arange(start, min(start + CHUNK_POINTS, n), device=device)
            i, j, k = index // (resolution * resolution), (index // resolution) % resolution, index % resolution
            points = torch.stack([axes[0][i], axes[1][j], axes[2][k]], dim=-1)
            out[start : start + index.numel()] = _lattice_sigma(trainer, points).cpu()
            done = start + index.numel()
            progress.advance(1, index.numel())
    except KeyboardInterrupt:
        raise DensityInterrupted(f"after {done // resolution**2} of {resolution} density slices") from None
    finally:
        progress.close()
    return out.reshape(resolution, resolution, resolution).numpy()


@torch.no_grad()
def density_seconds_estimate(trainer: Any, resolution: int, probe_points: int = PROBE_POINTS, seed: int = 0) -> float:
    """Seconds :func:`density_grid` will take for an N³ lattice (``resolution`` N), measured on
    ``probe_points`` points drawn uniformly in the scene box: one warm-up call, then the mean of
    two timed calls, scaled to N³ points (the time per point does not depend on where they lie:
    every point is evaluated, the occupancy grid only zeroes σ). Well under a second on a CPU."""
    import time

    gen = torch.Generator().manual_seed(seed)
    aabb = torch.as_tensor(np.asarray(trainer.scene.aabb, dtype=np.float32))
    points = (aabb[0] + torch.rand(probe_points, 3, generator=gen) * (aabb[1] - aabb[0])).to(trainer.device)

    def timed() -> float:
        t0 = time.perf_counter()
        _lattice_sigma(trainer, points).cpu()
        return time.perf_counter() - t0

    timed()  # first-call costs are no part of the lattice's rate
    per_point = (timed() + timed()) / 2 / probe_points
    return per_point * resolution**3


@torch.no_grad()
def vertex_colours(trainer: Any, points: np.ndarray, inward: np.ndarray) -> np.ndarray:
    """[n, 3] float32 colours of the colour network at ``points`` [n, 3] (unit cube) seen along
    ``inward`` [n, 3] unit directions; subgrid models ask the field of each point's box."""
    device = trainer.device
    field = trainer.field
    out = np.zeros((points.shape[0], 3), dtype=np.float32)
    for start in range(0, points.shape[0], CHUNK_POINTS):
        p = torch.as_tensor(points[start : start + CHUNK_POINTS], dtype=torch.float32, device=device)
        d = torch.as_tensor(inward[start : start + CHUNK_POINTS], dtype=torch.float32, device=device)
        rgb = torch.zeros(p.shape[0], 3, device=device)
        with precision_autocast(trainer):
            if hasattr(field, "sample_boxes"):  # a subgrid model of one rank holding every box
                boxes = field.sample_boxes(p)
                for k in field.local_box_ids:
                    mine = (boxes == k).nonzero().squeeze(-1)
                    rgb[mine] = field.fields[str(k)](p[mine], d[mine])[1].float()
            else:
                rgb = field(p, d)[1].float()
        out[start : start + p.shape[0]] = rgb.clamp(0, 1).cpu().numpy()
    return out


def _world_directions(vectors: np.ndarray, scene: Any) -> np.ndarray:
    """Unit-cube direction vectors → unit vectors of the source world (no translation)."""
    moved = cube_to_world(vectors, scene) - cube_to_world(np.zeros((1, 3)), scene)
    return moved / np.maximum(np.linalg.norm(moved, axis=1, keepdims=True), 1e-12)


def supported_faces(model: LoadedModel, box: np.ndarray, verts_cube: np.ndarray, faces: np.ndarray,
                    min_views: int, resolution: int, quiet: bool = True) -> np.ndarray:
    """[F] bool: faces whose three vertices (unit cube) lie on the rendered surface of at least
    ``min_views`` training views, on a support lattice of at most ``resolution`` cells per axis
    (its depth maps' progress unless ``quiet``)."""
    from trainer.inference.support import SUPPORT_RESOLUTION, build_support

    support = build_support(model, box, min_views, resolution=min(SUPPORT_RESOLUTION, resolution), quiet=quiet)
    return support.supported(verts_cube)[faces].all(axis=1)


def extract_mesh(model: LoadedModel, resolution: int = 256, threshold: float = DEFAULT_THRESHOLD,
                 aabb_world: list[float] | None = None, quiet: bool = True,
                 min_views: int = DEFAULT_MIN_VIEWS) -> dict[str, Any]:
    """The mesh (module docstring, steps 1-6 without the file).

    Returns:
        ``{"vertices": [V, 3] float64 source world, "faces": [F, 3] int64, "normals": [V, 3]
        outward unit normals (source world), "colours": [V, 3] float32 in [0, 1],
        "box_cube": [2, 3] the unit-cube box meshed, "faces_unsupported": faces left out by
        ``min_views`` (0 when it is 0), "density_s", "marching_s", "support_s": the stages' seconds,
        "seconds": the whole extraction's}``.

    Raises:
        ConfigError: nothing in the box reaches ``threshold``, or every lattice point exceeds
            it (both name ``--threshold``), an ``--aabb`` outside the scene box, or no face lies on
            the surface of ``min_views`` training views (names ``--min-views``).
    """
    import time

    from skimage import measure

    trainer, scene = model.trainer, model.scene
    if aabb_world is not None:
        corners = world_to_cube(np.array([[aabb_world[i], aabb_world[j], aabb_world[k]] for i in (0, 3)
                                          for j in (1, 4) for k in (2, 5)]), scene)
        scene_box = np.asarray(scene.aabb)
        box = np.stack([np.maximum(corners.min(0), scene_box[0]), np.minimum(corners.max(0), scene_box[1])])
        if not np.all(box[1] > box[0]):
            raise ConfigError(f"--aabb {' '.join(f'{v:g}' for v in aabb_world)}: the box lies outside the scene box")
    else:
        box = occupied_box(trainer)
    t0 = started = time.perf_counter()
    sigma = density_grid(trainer, box, resolution, quiet=quiet)
    density_s = time.perf_counter() - t0
    peak = float(sigma.max()) if sigma.size else 0.0
    if not peak > threshold:
        raise ConfigError(f"--threshold {threshold:g}: no density in the box reaches it (highest σ {peak:.3g}); "
                          "lower it or train longer")
    lowest = float(sigma.min())
    if threshold < lowest:  # scikit-image needs the level within the lattice's range
        raise ConfigError(f"--threshold {threshold:g}: every cell of the box is denser than it (lowest σ "
                          f"{lowest:.3g}); raise it or widen --aabb")
    spacing = tuple(float((box[1, a] - box[0, a]) / (resolution - 1)) for a in range(3))
    t1 = time.perf_counter()
    verts, faces, normals, _ = measure.marching_cubes(sigma, level=threshold, spacing=spacing,
                                                      gradient_direction="descent")
    marching_s = time.perf_counter() - t1
    verts_cube = verts + box[0]
    t2 = time.perf_counter()
    n_unsupported = 0
    if min_views > 0:
        keep = supported_faces(model, box, verts_cube, faces, min_views, resolution, quiet)
        n_unsupported = int(np.count_nonzero(~keep))
        if not keep.any():
            raise ConfigError(f"--min-views {min_views}: none of the {len(faces)} triangles lies on the surface of "
                              f"{min_views} training views; lower it (0 keeps everything) or train longer")
        used, faces = np.unique(faces[keep], return_inverse=True)
        faces = faces.reshape(-1, 3)
        verts_cube, normals = verts_cube[used], normals[used]
    support_s = time.perf_counter() - t2
    # with gradient_direction="descent" the object is σ > level and the normals point out of it
    outward = normals / np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    colours = vertex_colours(trainer, verts_cube, -outward)
    return {"vertices": cube_to_world(verts_cube, scene), "faces": faces.astype(np.int64),
            "normals": _world_directions(outward, scene), "colours": colours, "box_cube": box,
            "faces_unsupported": n_unsupported, "density_s": density_s, "marching_s": marching_s,
            "support_s": support_s, "seconds": time.perf_counter() - started}


def write_mesh(mesh: dict[str, Any], out: Path) -> Path:
    """Write ``mesh`` (from :func:`extract_mesh`) with trimesh to ``out`` (``.ply``, ``.obj``,
    ``.glb``), vertex colours as RGBA uint8, through a temporary name renamed at the end."""
    import trimesh

    out = Path(out)
    rgba = np.concatenate([np.round(mesh["colours"] * 255), np.full((len(mesh["colours"]), 1), 255)], axis=1)
    shape = trimesh.Trimesh(vertices=mesh["vertices"], faces=mesh["faces"], vertex_normals=mesh["normals"],
                            vertex_colors=rgba.astype(np.uint8), process=False)
    return atomic_write(out, lambda f: shape.export(file_obj=f, file_type=out.suffix.lower().lstrip(".")))
