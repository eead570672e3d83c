"""A coloured point cloud from a trained model: points at the expected depth of training rays.

``n_points`` is the number of points written (nerfstudio's ``ns-export pointcloud
--num-points`` counts the same way). Training rays are drawn without replacement, uniformly over
the pixels of every training image (a seeded generator), and cast in batches with the evaluation
renderer (:func:`trainer.train.evaluate.render_ray_buffers`, black background); a ray whose
accumulated opacity reaches ``min_opacity`` gives a point at ``o + d · Σ w_i t_i / Σ w_i``
coloured ``Σ w_i c_i / Σ w_i`` (the colour without background). Batches go on until
``n_points`` points are collected or the ray cap is reached: ``MAX_RAYS_PER_POINT · n_points``
rays (:data:`trainer.contract.commandline.MAX_RAYS_PER_POINT`), and never more than the training images have pixels;
then the points found so far are written and the result says it fell short.

With ``min_views`` > 0, a point counts only when it lies on the rendered surface of at least
``min_views`` training views (:mod:`trainer.inference.support`, a lattice over the occupied box);
the others (floaters seen by one or two views, haze) are left out and more rays are cast.

Memory: the ray order is ``8 B`` per ray of the cap, the points ``36 B`` each (at most one per
ray), and one batch of at most :data:`MAX_RAY_BATCH` rays is rendered at a time; so
``--n-points 10**12`` costs what casting every training pixel once costs.

Points are written in the capture's world frame (:mod:`trainer.inference.worldframe`) as a PLY
file through trimesh, to a temporary name renamed at the end.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.data.rays import IntrinsicsTensors, generate_rays
from trainer.contract.errors import ConfigError
from trainer.contract.commandline import DEFAULT_MIN_VIEWS, MAX_RAYS_PER_POINT
from trainer.inference.loading import LoadedModel
from trainer.inference.progress import Progress
from trainer.inference.worldframe import cube_to_world
from trainer.contract.rundir import atomic_write, prepare_output_file
from trainer.contract.textlines import counted

__all__ = ["MAX_RAYS_PER_POINT", "PointsInterrupted", "check_pointcloud_request", "extract_pointcloud", "rays_foreseen",
           "shortfall_note", "write_pointcloud"]

MIN_RAY_BATCH = 2**10  # rays of the smallest batch
MAX_RAY_BATCH = 2**18  # rays of the largest batch (its rays, buffers and render)
BATCH_MARGIN = 1.2  # a batch after the first casts this much more than the hit rate so far asks for


class PointsInterrupted(KeyboardInterrupt):
    """Ctrl-C while the point cloud's rays were cast; the message says how far it got: ``after
    N rays cast, with P of M points``."""


def rays_foreseen(n_points: int, have: int, cast: int, batch: int, max_rays: int) -> int:
    """The rays the cloud is foreseen to cast in all, for its time left: those cast, the batch
    about to be, and what the hit rate so far needs for the points still missing after it (one
    hit per ray before any batch is done), within the ray cap."""
    rate = have / cast if cast else 1.0
    after = max(n_points - have - batch * rate, 0.0)
    need = after / max(rate, 1.0 / MAX_RAYS_PER_POINT)
    return int(min(cast + batch + math.ceil(need), max_rays))


def check_pointcloud_request(n_points: int, min_opacity: float, out: Path, min_views: int = DEFAULT_MIN_VIEWS) -> None:
    """Refuse a bad request before any work.

    Raises:
        ConfigError: ``n_points`` < 1, ``min_opacity`` outside [0, 1], a negative ``min_views``,
            an extension other than ``.ply``, an output folder that cannot be made (each names
            the flag).
    """
    from trainer.inference.mesh import check_min_views

    check_min_views(min_views)
    if n_points < 1:
        raise ConfigError(f"--n-points {n_points}: expected an integer >= 1")
    if not 0.0 <= min_opacity <= 1.0:
        raise ConfigError(f"--min-opacity {min_opacity:g}: expected a number in [0, 1]")
    if Path(out).suffix.lower() != ".ply":
        raise ConfigError(f"--out {out}: unknown point-cloud extension {Path(out).suffix or '(none)'!r} (known: .ply)")
    prepare_output_file(Path(out), "--out")


LONG_CAST_S = 30.0
"""Seconds from which the first batch's estimated time is said before it is cast."""


def _announce_long_cast(model: LoadedModel, frame: Any, rays: int) -> None:
    """A warning on stderr when the first batch of ``rays`` rays (one per point asked: a point is
    kept where a ray meets a surface) is estimated to take :data:`LONG_CAST_S` or more, timed on
    rays of ``frame`` (:func:`trainer.inference.estimate.first_camera_seconds`); none for a subgrid
    model, whose boxes' fields render through its segment compositing, not the one-field probe."""
    import sys

    from trainer.contract.runstatus import fitted_warning
    from trainer.contract.textlines import estimate_text
    from trainer.inference.estimate import model_camera_seconds

    first_s = model_camera_seconds(model, frame)
    if first_s is None:
        return
    pixels = frame.intrinsics.width * frame.intrinsics.height
    estimate_s = first_s * rays / max(pixels, 1)
    if estimate_s >= LONG_CAST_S:
        print("warning: " + fitted_warning(f"the first {rays:,} rays (one per point asked; a point is kept where a "
                                           f"ray meets a surface) take about {estimate_text(estimate_s)}, and more "
                                           "follow where rays miss; a smaller --n-points is faster"),
              file=sys.stderr, flush=True)


def _next_batch(n_points: int, have: int, cast: int, max_rays: int) -> int:
    """Rays of the next batch: ``n_points`` at first, then what the hit rate so far needs for the
    rest (with :data:`BATCH_MARGIN`, assuming at worst one hit per ``MAX_RAYS_PER_POINT`` rays),
    within [:data:`MIN_RAY_BATCH`, :data:`MAX_RAY_BATCH`] and the rays left under the cap."""
    if cast == 0:
        want = n_points
    else:
        rate = max(have / cast, 1.0 / MAX_RAYS_PER_POINT)
        want = math.ceil((n_points - have) / rate * BATCH_MARGIN)
    return int(min(max(want, MIN_RAY_BATCH), MAX_RAY_BATCH, max_rays - cast))


@torch.no_grad()
def extract_pointcloud(model: LoadedModel, n_points: int = 200_000, min_opacity: float = 0.5,
                       seed: int = 0, quiet: bool = True, min_views: int = DEFAULT_MIN_VIEWS) -> dict[str, Any]:
    """Points and colours (module docstring).

    Returns:
        ``{"points": [P, 3] float64 source world, "colours": [P, 3] float32, "rays": rays cast,
        "max_rays": the ray cap, "pixels": training pixels in all, "unsupported": points left
        out by ``min_views``}``; ``P == n_points`` unless the cap was reached first (then
        ``rays == max_rays``).
    """
    from trainer.inference.render_views import subgrid_sample_renderer
    from trainer.train.evaluate import render_ray_buffers

    trainer = model.trainer
    device = trainer.device
    frames = trainer.scene.frames("train")
    widths = np.array([f.intrinsics.width for f in frames], dtype=np.int64)
    pixels = widths * np.array([f.intrinsics.height for f in frames], dtype=np.int64)
    starts = np.cumsum(pixels) - pixels
    total = int(pixels.sum())
    max_rays = int(min(MAX_RAYS_PER_POINT * n_points, total))
    order = np.random.default_rng(seed).choice(total, size=max_rays, replace=False)  # distinct, random order
    c2w = torch.as_tensor(np.stack([np.asarray(f.c2w, dtype=np.float32)[:3, :4] for f in frames]), device=device)
    cameras = IntrinsicsTensors.from_intrinsics([f.intrinsics for f in frames], device)
    background = torch.zeros(3, device=device)
    renderer = subgrid_sample_renderer(trainer, True) if model.mode == "subgrid" else None
    support = None
    if min_views > 0:
        from trainer.inference.mesh import occupied_box
        from trainer.inference.support import build_support

        support = build_support(model, occupied_box(trainer), min_views, quiet=quiet)
    _announce_long_cast(model, frames[0], _next_batch(n_points, 0, 0, max_rays))
    points, colours = [], []
    have = cast = unsupported = 0
    progress = Progress("points", n_points, quiet=quiet, rate_name="rays")
    try:
        while have < n_points and cast < max_rays:
            batch = order[cast : cast + _next_batch(n_points, have, cast, max_rays)]
            progress.expect_items(rays_foreseen(n_points, have, cast, batch.size, max_rays))
            cast += batch.size
            frame_ids = np.searchsorted(starts, batch, side="right") - 1
            local = batch - starts[frame_ids]
            rows = torch.as_tensor(frame_ids, device=device)
            u = torch.as_tensor(local % widths[frame_ids], device=device)
            v = torch.as_tensor(local // widths[frame_ids], device=device)
            o, d = generate_rays(c2w[rows], cameras[rows], u, v)
            with trainer.inference_weights():  # progress by chunks of rays: a batch may take minutes on a CPU
                out = render_ray_buffers(trainer, o, d, background, render_samples=renderer,
                                         on_rays=lambda rays: progress.advance(0, rays))
            keep = (out.opacity >= max(min_opacity, 1e-6)).nonzero().squeeze(-1)
            opacity = out.opacity[keep].unsqueeze(-1)
            found = (o[keep] + d[keep] * (out.depth[keep].unsqueeze(-1) / opacity)).cpu().numpy()
            rgb = (out.rgb[keep] / opacity).clamp(0, 1).cpu().numpy()
            if support is not None:
                on_surface = support.supported(found)
                unsupported += int(np.count_nonzero(~on_surface))
                found, rgb = found[on_surface], rgb[on_surface]
            found, rgb = found[: n_points - have], rgb[: n_points - have]
            points.append(found)
            colours.append(rgb)
            have += len(found)
            progress.advance(len(found))
    except KeyboardInterrupt:
        raise PointsInterrupted(f"after {counted(progress.items, 'ray')} cast, with {have:,} of "
                                f"{counted(n_points, 'point')}") from None
    finally:
        progress.close()
    cube = np.concatenate(points) if points else np.zeros((0, 3))
    return {"points": cube_to_world(cube, model.scene),
            "colours": np.concatenate(colours) if colours else np.zeros((0, 3), dtype=np.float32),
            "rays": cast, "max_rays": max_rays, "pixels": total, "unsupported": unsupported}


def shortfall_note(cloud: dict[str, Any], n_points: int, min_opacity: float) -> str | None:
    """One line when ``cloud`` holds fewer than ``n_points`` points (the ray cap was reached),
    else None."""
    found = len(cloud["points"])
    if found >= n_points:
        return None
    cap = ("every pixel of the training images" if cloud["max_rays"] == cloud["pixels"]
           else f"{MAX_RAYS_PER_POINT} rays per point asked for")
    left_out = cloud.get("unsupported", 0)
    supported = f" on the surface of --min-views training views ({left_out:,} others left out)" if left_out else ""
    return (f"--n-points {n_points}: only {found:,} rays of {cloud['rays']:,} cast reached opacity {min_opacity:g}"
            f"{supported} before the ray cap ({cap}); the cloud has {counted(found, 'point')}")


def write_pointcloud(cloud: dict[str, Any], out: Path) -> Path:
    """Write ``cloud`` as a PLY (vertex colours RGBA uint8) through a temporary name.

    Raises:
        ConfigError: no ray reached the opacity threshold (nothing to write).
    """
    import trimesh

    out = Path(out)
    if len(cloud["points"]) == 0:
        raise ConfigError(f"--min-opacity: no ray reached it, {out} was not written; lower it or train longer")
    rgba = np.concatenate([np.round(np.asarray(cloud["colours"]) * 255), np.full((len(cloud["points"]), 1), 255)], axis=1)
    shape = trimesh.PointCloud(vertices=cloud["points"], colors=rgba.astype(np.uint8))
    return atomic_write(out, lambda f: shape.export(file_obj=f, file_type="ply"))
