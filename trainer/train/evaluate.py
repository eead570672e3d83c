"""Evaluation: render held-out views and score them (PSNR, SSIM).

Ground truth with alpha is composited against the evaluation background: white for scenes whose
benchmarks use white (NeRF-synthetic), black otherwise.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Protocol

import numpy as np
import torch

from trainer.contract.config import TrainConfig
from trainer.data import Scene
from trainer.data.images import PixelTable, load_pixel_table
from trainer.data.rays import camera_rays_for_image, composite_background
from trainer.metrics_image import SSIM_WINDOW, affine_colour_psnr, mse_to_psnr, psnr, ssim
from trainer.metrics_tensorboard import write_evaluation
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE, RenderedRays, composite
from trainer.render.march import PackedSamples, ray_batches
from trainer.contract.rundir import NULL_REASONS_KEY, RunDir
from trainer.contract.evaluation import collapse_cures, collapse_message
from trainer.train.precision import autocast


class Evaluated(Protocol):
    """What evaluation reads of a trainer (:class:`trainer.train.loop.Trainer` and the distributed
    trainers): its config, device, field, scene, run directory, step and marcher."""

    cfg: TrainConfig
    device: torch.device
    field: torch.nn.Module
    scene: Scene
    run_dir: RunDir | None
    step: int
    eval_progress: Callable[[int, int, dict[str, Any]], None] | None
    eval_rays_progress: Callable[[int, int], None] | None

    def march(self, rays_o: torch.Tensor, rays_d: torch.Tensor, jitter: bool,
              generator: torch.Generator | None = None) -> PackedSamples: ...


PSNR_CAP_DB = 100.0  #: a view's PSNR counts at most this much in ``mean_psnr_db`` (a perfect view is inf)
METRICS_NOTE = (
    "mean_psnr_db: mean over views of each view's PSNR capped at psnr_cap_db; "
    "psnr_of_mean_mse_db: PSNR of the mean over views of the per-view MSE; "
    "mean_ssim: mean over the views SSIM is available for (views of at least "
    f"{SSIM_WINDOW}x{SSIM_WINDOW} pixels; smaller views have ssim null); "
    "background_psnr_db: mean_psnr_db of a prediction of the background colour at every pixel; "
    "mean_psnr_affine_db: mean over views of the PSNR after each view's least-squares affine colour "
    "map (3x3 matrix and offset fitted on the view's pixels), the held-out score of a model with a "
    "per-image appearance (training.appearance)"
)


def view_ssim(pred: torch.Tensor, target: torch.Tensor) -> float | None:
    """SSIM of one [H, W, 3] view (:func:`trainer.metrics_image.ssim`), or None when the view is
    smaller than the 11 × 11 window (the benchmark definition has no value there)."""
    if pred.shape[0] < SSIM_WINDOW or pred.shape[1] < SSIM_WINDOW:
        return None
    return ssim(pred, target)


AFFINE_MIN_PIXELS = 4
"""The fewest pixels a view needs for its best affine colour map (4 unknowns per channel)."""


def view_affine_psnr(pred: torch.Tensor, target: torch.Tensor) -> float | None:
    """PSNR after the best affine colour map of one [H, W, 3] view
    (:func:`trainer.metrics_image.affine_colour_psnr`), in dB, or None when the view holds fewer
    than :data:`AFFINE_MIN_PIXELS` pixels (the map is not determined there)."""
    if pred.shape[0] * pred.shape[1] < AFFINE_MIN_PIXELS:
        return None
    return affine_colour_psnr(pred, target)


def summary_metrics(images: list[dict[str, Any]]) -> dict[str, Any]:
    """The means of the per-view records (``mse``, ``psnr_db``, ``ssim`` or None) for ``eval.json``.

    Returns:
        ``mean_psnr_db`` (mean of per-view PSNRs, each capped at :data:`PSNR_CAP_DB`; a perfect
        view counts as the cap, never NaN, never dropped), ``psnr_cap_db``, ``psnr_of_mean_mse_db``
        (PSNR of the mean MSE; inf when every view is perfect), ``mean_ssim`` (over the views that
        have one; NaN when none has), ``ssim_views``, ``background_psnr_db`` (the mean of the
        views' ``background_psnr_db``, capped likewise; NaN when a record lacks it),
        ``mean_psnr_affine_db`` (the mean of the views' ``psnr_affine_db``, likewise) and
        ``metrics_note`` saying which is which. NaN means for no views. ``null_reasons``
        (:data:`trainer.contract.rundir.NULL_REASONS_KEY`) says why a mean is NaN (``eval.json``
        writes ``null``).
    """
    capped = [min(im["psnr_db"], PSNR_CAP_DB) for im in images]
    affine = [min(im.get("psnr_affine_db", float("nan")), PSNR_CAP_DB) for im in images
              if im.get("psnr_affine_db", 0.0) is not None]
    background = [min(im.get("background_psnr_db", float("nan")), PSNR_CAP_DB) for im in images]
    ssims = [im["ssim"] for im in images if im["ssim"] is not None]
    mean_mse = float(np.mean([im["mse"] for im in images])) if images else float("nan")
    summary = {
        "mean_psnr_db": float(np.mean(capped)) if capped else float("nan"),
        "psnr_cap_db": PSNR_CAP_DB,
        "psnr_of_mean_mse_db": float(mse_to_psnr(mean_mse)) if images else float("nan"),
        "mean_ssim": float(np.mean(ssims)) if ssims else float("nan"),
        "ssim_views": len(ssims),
        "background_psnr_db": float(np.mean(background)) if background else float("nan"),
        "mean_psnr_affine_db": float(np.mean(affine)) if affine else float("nan"),
        "metrics_note": METRICS_NOTE,
    }
    reasons = {}  # why a mean has no number (eval.json writes it as null with this reason)
    if not images:
        reasons.update(dict.fromkeys(("mean_psnr_db", "psnr_of_mean_mse_db", "background_psnr_db"), "no view was scored"))
    if not ssims:
        reasons["mean_ssim"] = (f"no view of at least {SSIM_WINDOW}x{SSIM_WINDOW} pixels, SSIM's window"
                                if images else "no view was scored")
    if not affine:
        reasons["mean_psnr_affine_db"] = (f"no view of at least {AFFINE_MIN_PIXELS} pixels, the affine colour map's "
                                          "fewest" if images else "no view was scored")
    if reasons:
        summary[NULL_REASONS_KEY] = reasons
    return summary


BACKDROP_TOLERANCE = 8 / 255  # border pixels within this of white (black) make a white (black) backdrop


def uniform_backdrop(table: PixelTable) -> str | None:
    """``"white"`` or ``"black"`` when every border pixel (first and last row and column) of every
    image of ``table`` lies within :data:`BACKDROP_TOLERANCE` of that colour in each channel (a
    studio backdrop), else None."""
    borders = []
    for index in range(table.n_images):
        image = table.image(index)[..., :3].float()
        image = image / 255.0 if table.pixels.dtype == torch.uint8 else image
        borders += [image[0], image[-1], image[:, 0], image[:, -1]]
    if not borders:
        return None
    edge = torch.cat(borders)
    if bool((edge >= 1.0 - BACKDROP_TOLERANCE).all()):
        return "white"
    if bool((edge <= BACKDROP_TOLERANCE).all()):
        return "black"
    return None


def split_origin(scene: Scene, split: str) -> str:
    """Where the scored views come from, for ``eval.json``: the scene's own split, frames held out
    by the loader (every n-th), or the training views themselves (then the score is no test)."""
    if split == "train":
        return "training views (the scene has no held-out frames: this score is not a test)"
    if split == "test" and scene.held_out_every:
        return f"every {scene.held_out_every}th frame held out from training (data.holdout_every)"
    return f"the scene's own {split} split"


def eval_split_name(trainer: Evaluated) -> str:
    """``test`` if the scene has test frames, else ``val``, else ``train``."""
    for split in ("test", "val", "train"):
        if trainer.scene.frames(split):
            return split
    return "train"


SampleRenderer = Callable[[PackedSamples, torch.Tensor, int], RenderedRays]


def field_sample_renderer(trainer: Evaluated) -> SampleRenderer:
    """``render(samples, background [3], n_rays) -> RenderedRays``: the trainer's field at the
    samples, composited with :func:`trainer.render.volrend.composite` (depth included), or its
    one-launch twin :func:`trainer.render.triton_volrend.composite_buffers_triton` where the
    trainer composites with Triton (``training.render_backend``)."""
    fast = bool(getattr(trainer, "triton_render", False))

    def render(samples: PackedSamples, background: torch.Tensor, n_rays: int) -> RenderedRays:
        with autocast(trainer.device, trainer.cfg.training.precision):
            sigmas, rgbs = trainer.field(samples.positions, samples.directions)
        if fast:
            from trainer.render.triton_volrend import composite_buffers_triton

            return RenderedRays(*composite_buffers_triton(sigmas.float(), rgbs.float(), samples.dt, samples.t,
                                                          samples.packed_info, background, EARLY_STOP_TRANSMITTANCE))
        return composite(sigmas.float(), rgbs.float(), samples.dt, samples.ray_indices, n_rays, background,
                         t=samples.t)

    return render


@torch.no_grad()
def render_ray_buffers(
    trainer: Evaluated,
    rays_o: torch.Tensor,
    rays_d: torch.Tensor,
    background: torch.Tensor,
    chunk_rays: int | None = None,
    spp: int = 1,
    generator: torch.Generator | None = None,
    render_samples: SampleRenderer | None = None,
    batch_samples: int | None = None,
    on_rays: Callable[[int], None] | None = None,
) -> RenderedRays:
    """Render rays with the current field and occupancy grid, in chunks: colour, opacity and depth.

    Each chunk of rays is marched at once; its samples go through the field in batches of whole
    rays of at most ``batch_samples`` samples (:func:`trainer.render.march.ray_batches`).

    Args:
        rays_o, rays_d: [n, 3] float32 on the trainer's device (``rays_d`` unit length).
        background: [3] float32 colour composited behind the rays.
        chunk_rays: rays per chunk (default 2^18 on CUDA, 2^11 on CPU).
        batch_samples: samples per field evaluation (default :func:`eval_batch_samples`).
        on_rays: called with the number of rays of a chunk each time one of its ``spp`` renders is
            done (progress: ``n × spp`` calls' worth in all).
        spp: renders averaged per ray (>= 1); with more than one, each marches with random
            first-sample offsets drawn from ``generator`` (instant-ngp's test-view ``spp``).
        generator: where the offsets come from (on the trainer's device); required when spp > 1.
        render_samples: ``(samples, background, n_rays) -> RenderedRays`` for one chunk's
            marched samples (default :func:`field_sample_renderer`; subgrid runs composite their
            boxes' segments).

    Returns:
        :class:`~trainer.render.volrend.RenderedRays` averaged over the ``spp`` renders: rgb [n, 3]
        in [0, 1], opacity [n], depth [n] (``Σ w_i t_i``, ray-length units, not divided by the
        opacity), transmittance [n]; all float32.

    Raises:
        ValueError: for ``spp < 1``, or ``spp > 1`` without a generator.
    """
    if spp < 1 or (spp > 1 and generator is None):
        raise ValueError(f"render_rays: spp must be >= 1 and needs a generator when > 1, got spp={spp}")
    render_samples = render_samples or field_sample_renderer(trainer)
    if chunk_rays is None:
        chunk_rays = eval_chunk_rays(trainer.device)
    batch_samples = batch_samples or eval_batch_samples(trainer.device)
    n_all, device = rays_o.shape[0], rays_o.device
    out = RenderedRays(torch.empty(n_all, 3, device=device), torch.empty(n_all, device=device),
                       torch.empty(n_all, device=device), torch.empty(n_all, device=device))
    for start in range(0, n_all, chunk_rays):
        o = rays_o[start : start + chunk_rays]
        d = rays_d[start : start + chunk_rays]
        n = o.shape[0]
        total = [torch.zeros(n, 3, device=device)] + [torch.zeros(n, device=device) for _ in range(3)]
        for _ in range(spp):
            samples = trainer.march(o, d, jitter=spp > 1, generator=generator)
            if samples.ray_indices.shape[0] == 0:
                total[0] += background
                total[3] += 1.0
            for first, end in ray_batches(samples, batch_samples) if samples.ray_indices.shape[0] else ():
                rendered = render_samples(samples.rays(first, end), background, end - first)
                for acc, value in zip(total, rendered):
                    acc[first:end] += value.float()
            if on_rays is not None:
                on_rays(n)  # each of the spp renders of the chunk: progress within a long chunk
        for buffer, acc in zip(out, total):
            buffer[start : start + n] = acc / spp
    return out


EVAL_BATCH_SAMPLES = {"cpu": 2**16, "cuda": 2**24}
"""Samples per field evaluation when rendering (:func:`render_ray_buffers`): on a CPU small enough
that the estimate's probe evaluates the field as the evaluation does (a whole chunk of 2^11 rays
of 512 samples, 2^20, made the fox CPU line's estimate 3× too low and the evaluation slower:
docs/benchmarks.md, "Evaluation on a CPU"); on a GPU 2^24: a chunk of 2^18 rays of a synthetic
scene (≈ 7 samples per ray) is composited in one launch, while a real capture's chunk (hundreds of
samples per ray, ~10^8 samples) goes in batches whose features (2^24 × 32 float32, 2 GiB) and
hidden activations stay far from the memory's size."""


def eval_chunk_rays(device: torch.device) -> int:
    """Rays marched at once when rendering (:func:`render_ray_buffers`): 2^18 on CUDA, 2^11 elsewhere."""
    return 2**18 if device.type == "cuda" else 2**11


def eval_batch_samples(device: torch.device) -> int:
    """Samples per field evaluation on ``device`` (:data:`EVAL_BATCH_SAMPLES`; other device
    types take the GPU's)."""
    return EVAL_BATCH_SAMPLES.get(device.type, EVAL_BATCH_SAMPLES["cuda"])


def render_rays(
    trainer: Evaluated,
    rays_o: torch.Tensor,
    rays_d: torch.Tensor,
    background: torch.Tensor,
    chunk_rays: int | None = None,
    spp: int = 1,
    generator: torch.Generator | None = None,
    on_rays: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """The colour of :func:`render_ray_buffers` (same arguments): rgb [n, 3] float32 in [0, 1].

    Raises:
        ValueError: for ``spp < 1``, or ``spp > 1`` without a generator.
    """
    return render_ray_buffers(trainer, rays_o, rays_d, background, chunk_rays, spp, generator, on_rays=on_rays).rgb


def ground_truth(table: PixelTable, position: int, background: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Image ``position`` of ``table`` as a test render is scored against it.

    Args:
        table: decoded images (uint8 or float16 RGBA, straight alpha).
        position: the image's index in ``table``.
        background: [3] float32, the colour behind the image; its device is the output's.

    Returns:
        ``rgba`` [h·w, 4] float32 in [0, 1] (row-major) and ``gt`` [h·w, 3], its colour composited
        over ``background`` (:func:`trainer.data.rays.composite_background`).
    """
    rgba = table.image(position).reshape(-1, 4).to(background.device)
    rgba = rgba.float() / (255.0 if rgba.dtype == torch.uint8 else 1.0)
    return rgba, composite_background(rgba[:, :3], rgba[:, 3:4], background)


def view_scores(pred_img: torch.Tensor, gt_img: torch.Tensor, background: torch.Tensor) -> dict[str, Any]:
    """The scores of one rendered view ``pred_img`` [H, W, 3] (in [0, 1]) against ``gt_img``
    [H, W, 3] composited over ``background`` [3]: ``mse``, ``psnr_db``, ``psnr_affine_db``,
    ``ssim`` (None below SSIM's window) and ``background_psnr_db`` (painting it ``background``)."""
    mse = float(torch.mean((pred_img.double() - gt_img.double()) ** 2))
    background_mse = float(torch.mean((background.double() - gt_img.double()) ** 2))
    return {"mse": mse, "psnr_db": psnr(pred_img, gt_img), "psnr_affine_db": view_affine_psnr(pred_img, gt_img),
            "ssim": view_ssim(pred_img, gt_img), "background_psnr_db": float(mse_to_psnr(background_mse))}


def render_bgr(pred_img: torch.Tensor) -> np.ndarray:
    """A rendered view [H, W, 3] in [0, 1] as the [H, W, 3] uint8 BGR array its PNG holds."""
    return (pred_img.cpu().numpy()[..., ::-1] * 255.0 + 0.5).astype(np.uint8)


def evaluation_frames(frames: list, max_images: int | None) -> list[tuple[int, Any]]:
    """``(index in split, frame)`` pairs to evaluate: all frames, or ``max_images`` of them evenly
    spaced over the split (the first views of a split are often not representative: on lego the
    first 20 test views score ~4 dB below the mean of all 200)."""
    indexed = list(enumerate(frames))
    if max_images is None or max_images >= len(indexed):
        return indexed
    stride = len(indexed) / max_images
    return [indexed[int(i * stride)] for i in range(max_images)]


def evaluate(
    trainer: Evaluated,
    split: str | None = None,
    max_images: int | None = None,
    save_renders: bool = True,
    render: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    score: bool = True,
    spp: int | None = None,
) -> dict[str, Any] | None:
    """Render the images of ``split`` (default: test, else val) and score them.

    Args:
        trainer: the trainer whose field, grid and scene are used.
        split: split name; default :func:`eval_split_name`.
        max_images: evaluate this many views, evenly spaced over the split (None: all).
        save_renders: write PNGs under ``renders/`` (named by the view's index in the split).
        render: ``render(rays_o [n,3], rays_d [n,3], background [3]) -> rgb [n,3]``; default
            :func:`render_rays` with ``training.eval_spp`` renders per view (subgrid training
            passes its collective renderer, which renders once).
        score: False on ranks that only help render (no scoring, no files; returns None).
        spp: renders averaged per view for the default renderer (None: ``training.eval_spp``);
            ignored when ``render`` is given.

    After each scored view, ``trainer.eval_progress(done, total, image_record)`` is called when
    it is set (the CLI prints progress lines with it); with the default renderer,
    ``trainer.eval_rays_progress(rays_done, rays_total)`` after each chunk of rays too (rays × spp
    of all chosen views).

    Raises:
        ValueError: ``spp`` outside [1, 64].

    Returns:
        ``{"split", "step", "background", "mean_psnr_db", "mean_psnr_affine_db", "mean_ssim",
        "background_psnr_db", "occupancy_warmup_steps", "background_collapse", "collapse_cures",
        "images": [{"index", "name", "psnr_db", "psnr_affine_db", "ssim", "background_psnr_db"}]}``
        (the keys of :func:`summary_metrics` too), also written to ``eval.json`` when the trainer
        has a run directory. ``background_collapse`` is the warning of
        :func:`trainer.contract.evaluation.collapse_message` (also issued as a ``UserWarning``) or
        None; ``collapse_cures`` the cures that apply to this capture and run
        (:func:`trainer.contract.evaluation.collapse_cures`: whether its images have alpha,
        :func:`uniform_backdrop`, ``training.background``).
    """
    import cv2

    split = split or eval_split_name(trainer)
    chosen = evaluation_frames(trainer.scene.frames(split), max_images)
    table = load_pixel_table([f for _, f in chosen], downscale=trainer.scene.downscale) if score else None
    white = trainer.scene.white_background
    background = torch.full((3,), 1.0 if white else 0.0, device=trainer.device)
    if render is None:
        spp = trainer.cfg.training.eval_spp if spp is None else int(spp)
        if not 1 <= spp <= 64:
            raise ValueError(f"evaluate: spp must be in [1, 64] (as training.eval_spp), got {spp}")
        generator = None
        if spp > 1:  # its own draws: repeatable, and training's generator is left as it was
            generator = torch.Generator(device=trainer.device)
            generator.manual_seed(trainer.cfg.training.seed)

        rays_total = spp * sum(f.intrinsics.width * f.intrinsics.height for _, f in chosen)
        rays_done = 0

        def rays_rendered(n: int) -> None:
            nonlocal rays_done
            rays_done += n
            report = getattr(trainer, "eval_rays_progress", None)
            if report is not None:
                report(rays_done, rays_total)

        def render(o: torch.Tensor, d: torch.Tensor, bg: torch.Tensor) -> torch.Tensor:
            return render_rays(trainer, o, d, bg, spp=spp, generator=generator, on_rays=rays_rendered)

    images = []
    was_training = trainer.field.training
    trainer.field.eval()
    try:
        for position, (index, frame) in enumerate(chosen):
            rays_o, rays_d = camera_rays_for_image(frame, trainer.device)
            rgb = render(rays_o, rays_d, background)
            if not score:
                continue
            h, w = frame.intrinsics.height, frame.intrinsics.width
            _, gt = ground_truth(table, position, background)
            pred_img = rgb.reshape(h, w, 3).clamp(0.0, 1.0)
            gt_img = gt.reshape(h, w, 3)
            images.append({"index": index, "name": frame.name, **view_scores(pred_img, gt_img, background)})
            if trainer.eval_progress is not None:
                trainer.eval_progress(position + 1, len(chosen), images[-1])
            if save_renders and trainer.run_dir is not None:
                path = trainer.run_dir.render_path(split, index)
                path.parent.mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(path), render_bgr(pred_img))
    finally:
        trainer.field.train(was_training)
    if not score:
        return None
    result = {
        "split": split,
        "split_origin": split_origin(trainer.scene, split),
        "step": trainer.step,
        "background": "white" if white else "black",
        **summary_metrics(images),
        "occupancy_warmup_steps": trainer.cfg.training.occupancy_warmup_steps,
        "images": images,
    }
    cures = collapse_cures(has_alpha=table.has_alpha, background=trainer.cfg.training.background,
                           backdrop=None if table.has_alpha else uniform_backdrop(table))
    collapse = collapse_message(result["mean_psnr_db"], result["background_psnr_db"], trainer.step,
                                trainer.cfg.training.occupancy_warmup_steps, cures)
    result["background_collapse"] = collapse
    result["collapse_cures"] = cures
    if collapse is not None:
        warnings.warn(collapse, stacklevel=2)
    if trainer.run_dir is not None:
        trainer.run_dir.write_json(trainer.run_dir.eval_path, result)
        write_evaluation(trainer.cfg, trainer.run_dir, result)
    return result
