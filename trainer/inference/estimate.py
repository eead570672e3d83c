"""How long a render will take, measured before its first frame on rays of its first camera.

:func:`first_camera_seconds` draws :data:`PROBE_RAYS` pixels uniformly from the first camera,
(more on a GPU), builds only their rays (not the whole image's: a 1920x1080 frame has 2 M) and
times them as the evaluation's estimate does (:func:`trainer.train.eval_estimate.fitted_render_seconds`:
1/8 of them and all of them, a warm-up and one timed call each). Four small render calls: well
under a second on a CPU, whatever the frames' size or number. :func:`model_camera_seconds` is the
same for a loaded model, and declines a subgrid model (its boxes' fields render through segment
compositing, not the one-field probe).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["PROBE_RAYS", "first_camera_seconds", "model_camera_seconds", "pixel_rays"]

PROBE_RAYS = 256
"""Rays of the first camera the probe renders."""


def pixel_rays(frame: Any, pixels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``rays_o``, ``rays_d`` [n, 3] float32 through pixels ``pixels`` [n] (row-major indices) of
    ``frame``, as :func:`trainer.data.rays.camera_rays_for_image` builds them."""
    from trainer.data.rays import IntrinsicsTensors, camera_dirs_to_world, pixel_to_camera_dirs

    width = frame.intrinsics.width
    pixels = pixels.to(device)
    u, v = pixels % width, pixels // width
    cameras = IntrinsicsTensors.from_intrinsics([frame.intrinsics], device)
    dirs = pixel_to_camera_dirs(u.float() + 0.5, v.float() + 0.5, cameras[torch.zeros_like(u)])
    c2w = torch.as_tensor(np.asarray(frame.c2w, dtype=np.float32), device=device)[None]
    return camera_dirs_to_world(c2w.expand(u.shape[0], -1, -1), dirs)


def first_camera_seconds(trainer: Any, frame: Any, probe_rays: int = PROBE_RAYS, seed: int = 0) -> float:
    """Seconds one render per pixel of ``frame`` (a scene frame: ``intrinsics.width`` ×
    ``height`` pixels, ``c2w``) takes with ``trainer``'s field and occupancy grid (module
    docstring); ``probe_rays`` >= 8 on a CPU (:func:`trainer.train.eval_estimate.probe_ray_count`)."""
    from trainer.train.eval_estimate import fitted_render_seconds, probe_ray_count

    pixels = frame.intrinsics.width * frame.intrinsics.height
    if pixels == 0:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    n = min(probe_ray_count(probe_rays, trainer.device), pixels)
    rays_o, rays_d = pixel_rays(frame, torch.randint(0, pixels, (n,), generator=gen), trainer.device)
    return fitted_render_seconds(trainer, rays_o, rays_d, [pixels])


def model_camera_seconds(model: Any, frame: Any) -> float | None:
    """:func:`first_camera_seconds` of a loaded model (:class:`trainer.inference.loading.LoadedModel`:
    ``mode``, ``trainer``) on ``frame``; None for a subgrid model, which the probe cannot time."""
    if model.mode == "subgrid":
        return None
    return first_camera_seconds(model.trainer, frame)
