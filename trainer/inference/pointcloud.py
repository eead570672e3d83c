"""A coloured point cloud from a trained model: points at the expected depth of training rays.

``n_points`` rays are drawn uniformly over the pixels of every training image (a seeded
generator), rendered with the evaluation renderer (:func:`trainer.train.evaluate.render_ray_buffers`,
black background), and those whose accumulated opacity reaches ``min_opacity`` give a point at
``o + d · Σ w_i t_i / Σ w_i`` coloured ``Σ w_i c_i / Σ w_i`` (the colour without background).
Points are written in the capture's world frame (:mod:`trainer.inference.worldframe`) as a PLY
file through trimesh, to a temporary name renamed at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.data.rays import camera_rays_for_image
from trainer.errors import ConfigError
from trainer.inference.loading import LoadedModel
from trainer.inference.progress import Progress
from trainer.inference.worldframe import cube_to_world
from trainer.rundir import atomic_write, prepare_output_file

__all__ = ["check_pointcloud_request", "extract_pointcloud", "write_pointcloud"]


def check_pointcloud_request(n_points: int, min_opacity: float, out: Path) -> None:
    """Refuse a bad request before any work.

    Raises:
        ConfigError: ``n_points`` < 1, ``min_opacity`` outside [0, 1], an extension other than
            ``.ply``, an output folder that cannot be made (each names the flag).
    """
    if n_points < 1:
        raise ConfigError(f"--n-points {n_points}: expected an integer >= 1")
    if not 0.0 <= min_opacity <= 1.0:
        raise ConfigError(f"--min-opacity {min_opacity:g}: expected a number in [0, 1]")
    if Path(out).suffix.lower() != ".ply":
        raise ConfigError(f"--out {out}: unknown point-cloud extension {Path(out).suffix or '(none)'!r} (known: .ply)")
    prepare_output_file(Path(out), "--out")


@torch.no_grad()
def extract_pointcloud(model: LoadedModel, n_points: int = 200_000, min_opacity: float = 0.5,
                       seed: int = 0, quiet: bool = True) -> dict[str, Any]:
    """Points and colours (module docstring).

    Returns:
        ``{"points": [P, 3] float64 source world, "colours": [P, 3] float32, "rays": rays cast}``.
    """
    from trainer.inference.render_views import subgrid_sample_renderer
    from trainer.train.evaluate import render_ray_buffers

    trainer = model.trainer
    frames = trainer.scene.frames("train")
    pixels = np.array([f.intrinsics.width * f.intrinsics.height for f in frames], dtype=np.int64)
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(int(pixels.sum()), size=min(n_points, int(pixels.sum())), replace=False))
    starts = np.concatenate([[0], np.cumsum(pixels)])
    background = torch.zeros(3, device=trainer.device)
    renderer = subgrid_sample_renderer(trainer, True) if model.mode == "subgrid" else None
    points, colours = [], []
    progress = Progress("rays", len(frames), quiet=quiet)
    try:
        for i, frame in enumerate(frames):
            mine = picks[(picks >= starts[i]) & (picks < starts[i + 1])] - starts[i]
            if mine.size:
                rays_o, rays_d = camera_rays_for_image(frame, trainer.device)
                index = torch.as_tensor(mine, device=trainer.device)
                o, d = rays_o[index], rays_d[index]
                with trainer.inference_weights():
                    out = render_ray_buffers(trainer, o, d, background, render_samples=renderer)
                keep = out.opacity >= max(min_opacity, 1e-6)
                opacity = out.opacity[keep].unsqueeze(-1)
                points.append((o[keep] + d[keep] * (out.depth[keep].unsqueeze(-1) / opacity)).cpu().numpy())
                colours.append((out.rgb[keep] / opacity).clamp(0, 1).cpu().numpy())
            progress.advance(1, int(mine.size))
    finally:
        progress.close()
    cube = np.concatenate(points) if points else np.zeros((0, 3))
    return {"points": cube_to_world(cube, model.scene), "colours": np.concatenate(colours) if colours else np.zeros((0, 3)),
            "rays": int(picks.size)}


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
