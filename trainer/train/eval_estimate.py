"""How long the final evaluation will take, measured before it starts.

:func:`measure_eval_seconds` renders a few hundred rays (a CPU; thousands on a GPU) drawn
uniformly from every pixel of the views to be evaluated, with the field and occupancy grid as they are at the end of training (an
occupancy grid still full after a short run makes each ray march many samples: the probe pays
that cost too), and scales the time to all of their pixels; it adds the work besides rendering
(decoding the images, scoring, encoding the PNGs), timed on one view. :func:`eval_seconds_estimate` is the
fallback where no probe can run (a distributed trainer's collective renderer): the training rate
of the last metrics record.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

__all__ = ["EVAL_SPEEDUP_OVER_TRAINING", "PROBE_RAYS", "PROBE_RAYS_CUDA", "eval_seconds_estimate",
           "fitted_render_seconds", "measure_eval_seconds", "probe_ray_count", "view_overhead_seconds"]

PROBE_RAYS = 512
"""Rays the probe renders on a CPU (a few per cent of one 100×100 view)."""

PROBE_RAYS_CUDA = 2**18
"""Rays the probe renders at least on a GPU: one chunk of the evaluation's rendering
(:func:`~trainer.train.evaluate.eval_chunk_rays`). Fewer time the kernel launches rather than the
rays: from 512 rays a full-resolution fox evaluation (14.5 M pixels) was estimated at 104 s and
took 6.3 s; at 2^14 rays and 2^11 (the smaller probe) a GPU is far from busy, so their difference,
the per-ray cost, is mostly noise."""

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


def probe_ray_count(probe_rays: int, device: torch.device) -> int:
    """Rays a probe renders on ``device``: ``probe_rays`` on a CPU, at least
    :data:`PROBE_RAYS_CUDA` on a GPU (a few hundred rays there time the launches, not the rays)."""
    return probe_rays if device.type == "cpu" else max(probe_rays, PROBE_RAYS_CUDA)


def fitted_render_seconds(trainer: Any, rays_o: torch.Tensor, rays_d: torch.Tensor, sizes: list[int],
                          repeats: int = 1) -> float:
    """Seconds to render every pixel of views of ``sizes`` pixels once, fitted on probe rays.

    The probe renders 1/8 of the rays and all of them, once each as a warm-up (first-call costs,
    such as a GPU compiling kernels for a new size, are no part of the rate), then ``repeats``
    times each, and fits ``time = per_call + per_ray × rays`` to the means (a load spike during
    the probe is as likely during the render). A render call's fixed cost counts once per chunk of
    rays a view is rendered in (:func:`~trainer.train.evaluate.eval_chunk_rays`), the per-ray cost
    for every pixel.

    Args:
        trainer: a single-process trainer (field, occupancy grid, device, ``inference_weights``).
        rays_o, rays_d: [n, 3] float32 probe rays on the trainer's device, drawn from the pixels.
        sizes: pixels of each view.
        repeats: timed calls of each size (>= 1).

    Returns:
        Estimated wall-clock seconds for ``sum(sizes)`` rays.
    """
    from trainer.train.evaluate import eval_chunk_rays, render_rays

    n = rays_o.shape[0]
    total = sum(sizes)
    if total == 0 or n == 0:
        return 0.0
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
            timed(small), timed(n)  # warm-up of both sizes
            t_small = sum(timed(small) for _ in range(repeats)) / repeats
            t_big = sum(timed(n) for _ in range(repeats)) / repeats
    finally:
        trainer.field.train(was_training)
    per_ray = (t_big - t_small) / max(n - small, 1)
    if per_ray <= 0:  # noise on a loaded machine: the larger probe's mean cost per ray
        return t_big * total / n
    per_call = max(0.0, t_small - small * per_ray)
    chunk = eval_chunk_rays(trainer.device)
    return sum(math.ceil(size / chunk) for size in sizes) * per_call + total * per_ray


def view_overhead_seconds(trainer: Any, frame: Any, save_render: bool) -> float:
    """Seconds of the evaluation's work on one view besides rendering it, timed on ``frame``:
    decoding its image and compositing the ground truth, its camera rays, the scores
    (:func:`~trainer.train.evaluate.view_scores`: PSNR, affine PSNR, SSIM, on the ground truth
    standing in for the render, which costs the same) and, with ``save_render``, the PNG encoding
    of :func:`~trainer.train.evaluate.render_bgr` (in memory; nothing is written). On a GPU with
    full-resolution views these are most of an evaluation (fox: 1.0 of its 1.3 s per view)."""
    import cv2

    from trainer.data.images import load_pixel_table
    from trainer.data.rays import camera_rays_for_image
    from trainer.train.evaluate import ground_truth, render_bgr, view_scores

    t0 = time.perf_counter()
    table = load_pixel_table([frame], downscale=trainer.scene.downscale)
    background = torch.full((3,), 1.0 if trainer.scene.white_background else 0.0, device=trainer.device)
    _, gt = ground_truth(table, 0, background)
    gt_img = gt.reshape(frame.intrinsics.height, frame.intrinsics.width, 3)
    camera_rays_for_image(frame, trainer.device)
    view_scores(gt_img, gt_img, background)
    if save_render:
        cv2.imencode(".png", render_bgr(gt_img))
    if trainer.device.type == "cuda":
        torch.cuda.synchronize(trainer.device)
    return time.perf_counter() - t0


def measure_eval_seconds(trainer: Any, frames: list, spp: int, probe_rays: int = PROBE_RAYS, seed: int = 0) -> float:
    """Seconds the evaluation of ``frames`` (scene frames) at ``spp`` renders per pixel will take:
    :func:`fitted_render_seconds` on rays drawn uniformly over all their pixels, twice each size,
    times ``spp``, plus the work besides rendering (:func:`view_overhead_seconds` on the largest
    view, twice: the first time once, the second scaled to the other views by pixels; the PNG
    encoding when the trainer has a run folder, where the evaluation saves its renders). The probe renders through the same chunks and field batches
    as the evaluation.

    Args:
        trainer: a single-process :class:`~trainer.train.loop.Trainer` (field, occupancy grid, device).
        frames: the views to be evaluated (each with ``intrinsics.width`` × ``height`` pixels).
        spp: renders per pixel (``training.eval_spp``).
        probe_rays: the larger probe's rays on a CPU (>= 8; :func:`probe_ray_count` on a GPU).

    Returns:
        Estimated seconds (wall clock) for all pixels × ``spp``.
    """
    from trainer.data.rays import camera_rays_for_image

    sizes = [f.intrinsics.width * f.intrinsics.height for f in frames]
    total = sum(sizes)
    if total == 0:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, total, (min(probe_ray_count(probe_rays, trainer.device), total),), generator=gen)
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
    largest = max(range(len(frames)), key=lambda k: sizes[k])
    save = getattr(trainer, "run_dir", None) is not None
    # the first view pays once for what is set up on first use (decoders, the scores' kernels, the
    # PNG encoder); every view after it costs what a second one does (lego_400: the first call's
    # cost times 200 views overestimated 3.4 s of evaluation as 39 s)
    first = view_overhead_seconds(trainer, frames[largest], save)
    then = view_overhead_seconds(trainer, frames[largest], save) if len(frames) > 1 else 0.0
    overhead = first + then * (total / sizes[largest] - 1)
    return fitted_render_seconds(trainer, rays_o, rays_d, sizes, repeats=2) * spp + overhead
