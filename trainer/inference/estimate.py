"""How long a render will take, measured before its first frame on rays of its first camera.

:func:`first_camera_seconds` draws :data:`PROBE_RAYS` pixels uniformly from the first camera,
builds only their rays (not the whole image's: a 1920x1080 frame has 2 M), renders them after a
warm-up, 1/8 of them and all of them once each, and fits ``time = per_call + per_ray × rays``:
the render's fixed cost counts once per chunk of rays a frame is rendered in
(:func:`trainer.train.evaluate.eval_chunk_rays`), the per-ray cost for every pixel. Three small
render calls: well under a second on a CPU, whatever the frames' size or number.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

__all__ = ["PROBE_RAYS", "first_camera_seconds", "pixel_rays"]

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
    docstring); ``probe_rays`` >= 8."""
    from trainer.train.evaluate import eval_chunk_rays, render_rays

    pixels = frame.intrinsics.width * frame.intrinsics.height
    if pixels == 0:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    n = min(probe_rays, pixels)
    rays_o, rays_d = pixel_rays(frame, torch.randint(0, pixels, (n,), generator=gen), trainer.device)
    background = torch.zeros(3, device=trainer.device)

    def timed(count: int) -> float:
        t0 = time.perf_counter()
        render_rays(trainer, rays_o[:count], rays_d[:count], background, spp=1)
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return time.perf_counter() - t0

    small = max(1, n // 8)
    was_training = trainer.field.training
    trainer.field.eval()
    try:
        with torch.no_grad(), trainer.inference_weights():
            timed(small)  # warm-up: first-call costs are no part of the render's rate
            t_small, t_big = timed(small), timed(n)
    finally:
        trainer.field.train(was_training)
    per_ray = (t_big - t_small) / max(n - small, 1)
    if per_ray <= 0:  # noise on a loaded machine: the larger call's mean cost per ray
        return t_big * pixels / n
    per_call = max(0.0, t_small - small * per_ray)
    return math.ceil(pixels / eval_chunk_rays(trainer.device)) * per_call + pixels * per_ray
