"""How long the final evaluation will take, measured before it starts.

:func:`measure_eval_seconds` renders a few hundred rays drawn uniformly from every pixel of the
views to be evaluated, with the field and occupancy grid as they are at the end of training (an
occupancy grid still full after a short run makes each ray march many samples: the probe pays
that cost too), and scales the time to all of their pixels. :func:`eval_seconds_estimate` is the
fallback where no probe can run (a distributed trainer's collective renderer): the training rate
of the last metrics record.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

__all__ = ["EVAL_SPEEDUP_OVER_TRAINING", "PROBE_RAYS", "eval_seconds_estimate", "measure_eval_seconds"]

PROBE_RAYS = 512
"""Rays the probe renders (a few per cent of one 100×100 view)."""

EVAL_SPEEDUP_OVER_TRAINING = 3.0
"""Rendering a sample costs about a third of training on it (no backward pass, no optimiser step)."""


def eval_seconds_estimate(pixels: int, spp: int, last: dict[str, Any] | None) -> float | None:
    """Rough seconds to render ``pixels`` × ``spp`` rays at the samples per ray and the throughput of
    the last training interval (``last``: a metrics record), or None without one.

    A ray costs about as many samples as in training, each at ~:data:`EVAL_SPEEDUP_OVER_TRAINING`×
    the training rate. An order of magnitude, to decide whether to wait; not a measurement.
    """
    if not last:
        return None
    rays, samples, rate = (last.get(k) for k in ("rays_per_step", "samples_per_step", "throughput_samples_per_s"))
    if not all(isinstance(v, (int, float)) and v > 0 for v in (rays, samples, rate)):
        return None
    return pixels * spp * (samples / rays) / (rate * EVAL_SPEEDUP_OVER_TRAINING)


def measure_eval_seconds(trainer: Any, frames: list, spp: int, probe_rays: int = PROBE_RAYS, seed: int = 0) -> float:
    """Seconds the evaluation of ``frames`` (scene frames) at ``spp`` renders per pixel will take.

    Rays drawn uniformly over all their pixels are rendered after a warm-up: 1/8 of
    ``probe_rays`` and ``probe_rays`` rays, twice each, fitting ``time = per_call + per_ray × rays``
    to the mean of each pair (a load spike during the probe is as likely during the evaluation);
    a render call's fixed cost counts once per chunk of rays the evaluation renders
    (:func:`~trainer.train.evaluate.render_ray_buffers`' chunks, several per view on large views),
    the per-ray cost for every pixel. The probe renders through the same field batches.

    Args:
        trainer: a single-process :class:`~trainer.train.loop.Trainer` (field, occupancy grid, device).
        frames: the views to be evaluated (each with ``intrinsics.width`` × ``height`` pixels).
        spp: renders per pixel (``training.eval_spp``).
        probe_rays: the larger probe's rays (>= 8).

    Returns:
        Estimated seconds (wall clock) for all pixels × ``spp``.
    """
    from trainer.data.rays import camera_rays_for_image
    from trainer.train.evaluate import eval_chunk_rays, render_rays

    sizes = [f.intrinsics.width * f.intrinsics.height for f in frames]
    total = sum(sizes)
    if total == 0:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, total, (min(probe_rays, total),), generator=gen)
    starts = torch.tensor([0] + sizes[:-1]).cumsum(0)
    which = torch.searchsorted(starts, picks, right=True) - 1
    origins, directions = [], []
    for k in which.unique().tolist():
        o, d = camera_rays_for_image(frames[k], trainer.device)
        idx = (picks[which == k] - starts[k]).to(o.device)
        origins.append(o[idx])
        directions.append(d[idx])
    perm = torch.randperm(len(picks), generator=gen).to(trainer.device)
    rays_o, rays_d = torch.cat(origins)[perm], torch.cat(directions)[perm]
    background = torch.zeros(3, device=trainer.device)

    def timed(n: int) -> float:
        t0 = time.perf_counter()
        render_rays(trainer, rays_o[:n], rays_d[:n], background, spp=1)
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return time.perf_counter() - t0

    was_training = trainer.field.training
    trainer.field.eval()
    try:
        with torch.no_grad(), trainer.inference_weights():
            small = max(1, len(picks) // 8)
            timed(small)  # warm-up: first-call costs are no part of the evaluation's rate
            t_small = (timed(small) + timed(small)) / 2
            t_big = (timed(len(picks)) + timed(len(picks))) / 2
    finally:
        trainer.field.train(was_training)
    per_ray = (t_big - t_small) / max(len(picks) - small, 1)
    if per_ray <= 0:  # noise on a loaded machine: the larger probe's mean cost per ray
        return t_big * total * spp / len(picks)
    per_call = max(0.0, t_small - small * per_ray)
    chunk = eval_chunk_rays(trainer.device)
    calls = sum(math.ceil(size / chunk) for size in sizes)
    return (calls * per_call + total * per_ray) * spp
