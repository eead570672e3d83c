"""Render cameras with a loaded model: colour (spp jittered renders averaged), depth, opacity.

The rays of a camera go through :func:`trainer.train.evaluate.render_ray_buffers`, the code the
trainer's evaluation renders with, so a test camera rendered here is the image ``evaluate``
scores. Subgrid runs composite their boxes' segments front to back
(:func:`trainer.parallel.subgrid.render_subgrid`), as in training.

With several ranks (``--nproc-per-node``), rank r renders frames r, r + W, r + 2W, ... and writes
them as PNGs; rank 0 encodes the video from them after a barrier. Frame i's jitter is seeded with
``seed + i``, so the frames do not depend on how many ranks rendered them.

Frames of a split's views are named after the views (``test_007.png``, as the evaluation's
renders); with ``score`` each is compared with its ground-truth image (PSNR, SSIM, as evaluation
scores it, over the job's background) into ``scores.json`` beside the frames, and with ``compare``
a ``<name>_compare.png`` holds the render and the ground truth side by side, captioned.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.contract.errors import SnapshotError
from trainer.data.rays import camera_rays_for_image
from trainer.data.scene import Frame
from trainer.inference.loading import LoadedModel, precision_autocast
from trainer.inference.outputs import (
    DEPTH_MAX_COUNT, VideoFile, VideoUnavailable, side_by_side, to_uint8, write_depth_pngs, write_depth_scale,
    write_png,
)
from trainer.inference.progress import Progress
from trainer.inference.worldframe import units_per_cube_unit
from trainer.render.volrend import RenderedRays, composite_segment
from trainer.train.evaluate import render_ray_buffers

__all__ = ["RenderInterrupted", "RenderJob", "RenderedView", "SCORES_FILE", "render_camera", "render_job", "scores_summary",
           "subgrid_sample_renderer", "write_scores"]

MIN_DEPTH_OPACITY = 0.01  # pixels less opaque than this have no depth (0 in the PNG)


class RenderInterrupted(KeyboardInterrupt):
    """Ctrl-C during a render; the message says after how many frames, that no video was written
    (its temporary file is removed) and which PNG frames were kept."""


def interrupted_message(done: list[int], n_frames: int, frames_dir: Path | None, video: Path | None,
                        names: list[str] | None = None) -> str:
    """``render stopped after N of M frames; ...`` for :class:`RenderInterrupted` (``done``: the
    indices of the frames whose files were written; ``names``: the frames' file stems, default
    ``00000``, ``00001``, ...)."""
    parts = [f"render stopped after {len(done)} of {n_frames} frames"]
    if video is not None:
        parts.append("no video written")
    if frames_dir is not None and done:
        name = (lambda i: names[i]) if names is not None else _frame_name
        first, last = name(min(done)), name(max(done))
        names = f"frame {first}.png" if len(done) == 1 else f"{len(done)} frames ({first}.png to {last}.png)"
        parts.append(f"the {names} kept in {frames_dir}")
    elif frames_dir is not None:
        parts.append(f"no PNG frame was written to {frames_dir}")
    return "; ".join(parts)


class RenderedView:
    """One rendered camera, kept on the device; each host copy is made when first asked for (a
    frame written only as a PNG or video frame moves its 8-bit colour alone, 1 byte per channel).

    Args:
        rgb: [h, w, 3] float32 in [0, 1] on the model's device.
        opacity: [h, w] float32 accumulated opacity, same device.
        depth: [h, w] float32 expected termination distance (below), same device.

    Attributes (host NumPy arrays, computed once):
        rgb: [h, w, 3] float32 in [0, 1].
        rgb8: [h, w, 3] uint8, ``rgb`` rounded as :func:`trainer.inference.outputs.to_uint8` does
            (computed on the device: the same float32 arithmetic, so the same bytes).
        opacity: [h, w] float32 accumulated opacity.
        depth: [h, w] float32 expected termination distance of the rays that terminate
            (``Σ w_i t_i / Σ w_i``) in the scene's source units; 0 where the opacity is below
            :data:`MIN_DEPTH_OPACITY`.
    """

    def __init__(self, rgb: torch.Tensor, opacity: torch.Tensor, depth: torch.Tensor) -> None:
        self._device = {"rgb": rgb, "opacity": opacity, "depth": depth}

    @functools.cached_property
    def rgb(self) -> np.ndarray:
        return self._device["rgb"].cpu().numpy()

    def non_finite_pixels(self) -> int:
        """Pixels with a NaN or infinite colour channel (counted on the device)."""
        return int((~torch.isfinite(self._device["rgb"]).all(dim=-1)).sum())

    @functools.cached_property
    def rgb8(self) -> np.ndarray:
        rgb = self._device["rgb"]
        return (rgb.clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8).cpu().numpy()

    @functools.cached_property
    def opacity(self) -> np.ndarray:
        return self._device["opacity"].cpu().numpy()

    @functools.cached_property
    def depth(self) -> np.ndarray:
        return self._device["depth"].cpu().numpy()


def subgrid_sample_renderer(trainer: Any, with_depth: bool) -> Callable[[Any, torch.Tensor, int], RenderedRays]:
    """``render(samples, background, n_rays) -> RenderedRays`` for a one-rank subgrid model
    holding every box: colour by :func:`~trainer.parallel.subgrid.render_subgrid`; depth (when
    asked for) by compositing each box's sample distances as a segment and the segments in each
    ray's box order, the same NeRF-XL compositing as the colour."""
    from trainer.parallel.subgrid import composite_boxes_in_order, render_subgrid, segment_order

    model = trainer.field

    def render(samples: Any, background: torch.Tensor, n_rays: int) -> RenderedRays:
        with precision_autocast(trainer):
            rgb, transmittance = render_subgrid(model, samples, background, loss_replicated=True)
        rgb, transmittance = rgb.float(), transmittance.float()
        depth = torch.zeros(n_rays, device=rgb.device)
        if with_depth:
            boxes = model.sample_boxes(samples.positions)
            segments, through = [], []
            for k in range(model.n_boxes):
                mine = (boxes == k).nonzero().squeeze(-1)
                with precision_autocast(trainer):
                    sigma = model.fields[str(k)].density(samples.positions[mine]).float()
                t = samples.t[mine].float().unsqueeze(-1).expand(-1, 3)
                d_k, a_k = composite_segment(sigma, t, samples.dt[mine].float(), samples.ray_indices[mine], n_rays)
                segments.append(d_k)
                through.append(a_k)
            order = segment_order(samples.t, samples.ray_indices, boxes, n_rays, model.n_boxes)
            depth = composite_boxes_in_order(torch.stack(segments), torch.stack(through), order, None)[0][:, 0]
        return RenderedRays(rgb, 1.0 - transmittance, depth, transmittance)

    return render


def render_camera(model: LoadedModel, frame: Frame, background: torch.Tensor, spp: int = 1,
                  generator: torch.Generator | None = None, with_depth: bool = False,
                  on_rays: Callable[[int], None] | None = None) -> RenderedView:
    """Render one camera (module docstring).

    Args:
        model: the loaded model.
        frame: the camera (its c2w and intrinsics).
        background: [3] float32 on the model's device.
        spp: jittered renders averaged per pixel (>= 1).
        generator: the jitter's source, required for spp > 1.
        with_depth: subgrid runs compute depth only when asked (others always do).
        on_rays: called with the rays (× spp) of each chunk rendered (a frame's progress).

    Raises:
        ValueError: spp < 1, or spp > 1 without a generator.
    """
    trainer = model.trainer
    rays_o, rays_d = camera_rays_for_image(frame, trainer.device)
    renderer = subgrid_sample_renderer(trainer, with_depth) if model.mode == "subgrid" else None
    with trainer.inference_weights():
        out = render_ray_buffers(trainer, rays_o, rays_d, background, spp=spp, generator=generator,
                                 render_samples=renderer, on_rays=on_rays)
    h, w = frame.intrinsics.height, frame.intrinsics.width
    opacity = out.opacity.reshape(h, w)
    depth = torch.where(opacity >= MIN_DEPTH_OPACITY, out.depth.reshape(h, w) / opacity.clamp_min(1e-12),
                        torch.zeros_like(opacity))
    return RenderedView(rgb=out.rgb.reshape(h, w, 3).clamp(0.0, 1.0), opacity=opacity,
                        depth=depth * units_per_cube_unit(model.scene))


@dataclasses.dataclass
class RenderJob:
    """What to render and where it goes.

    Attributes:
        cameras: the frames, in output order.
        spp: jittered renders per pixel.
        background: RGB in [0, 1].
        depth: also write ``<name>_depth.png`` and ``<name>_depth_preview.png``.
        out_dir: folder for PNG frames, or None (video only).
        video: the video file, or None.
        fps: frames per second of the video.
        seed: frame i's jitter generator is seeded with ``seed + i``.
        quiet: no progress display.
        names: each frame's file stem (default ``00000``, ``00001``, ...; a split's views:
            :func:`trainer.rundir.view_name`).
        score: compare each frame with its camera's ground-truth image (the cameras are scene
            frames at their own size) and write ``scores.json`` beside the frames.
        compare: also write ``<name>_compare.png``, the render beside the ground truth (needs
            ``score``).
        label: what the cameras are, for what a command says of the render (``orbit (a 92°
            arc)``); empty: the command's own words.
    """

    cameras: list[Frame]
    spp: int = 1
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    depth: bool = False
    out_dir: Path | None = None
    video: Path | None = None
    fps: float = 30.0
    seed: int = 1337
    quiet: bool = False
    names: list[str] | None = None
    score: bool = False
    compare: bool = False
    label: str = ""

    def name(self, index: int) -> str:
        """The file stem of frame ``index``."""
        return self.names[index] if self.names is not None else _frame_name(index)


SCORES_FILE = "scores.json"
"""Per-view PSNR/SSIM of ``render`` of a split, beside the frames."""


def depth_scale_for(model: LoadedModel, cameras: list[Frame]) -> float:
    """Source units per uint16 count: the farthest corner of the scene box from any camera maps
    to :data:`~trainer.inference.outputs.DEPTH_MAX_COUNT`."""
    aabb = np.asarray(model.scene.aabb)
    corners = np.array([[aabb[i, 0], aabb[j, 1], aabb[k, 2]] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
    positions = np.stack([np.asarray(f.c2w)[:3, 3] for f in cameras])
    far = float(np.linalg.norm(positions[:, None, :] - corners[None], axis=-1).max())
    return far * units_per_cube_unit(model.scene) / DEPTH_MAX_COUNT


def _frame_name(index: int) -> str:
    return f"{index:05d}"


def render_job(model: LoadedModel, job: RenderJob, rank: int = 0, world_size: int = 1,
               barrier: Callable[[], None] | None = None) -> dict[str, Any]:
    """Render ``job``'s cameras of this rank and write its files (module docstring).

    Returns:
        ``{"frames", "rendered_here", "seconds", "frames_per_s", "rays_per_s", "out_dir",
        "video", "video_codec", "notes", "scores"}`` (``video`` None when none was written;
        ``scores``: this rank's per-view records ``{"index", "name", "file", "mse", "psnr_db",
        "ssim"}``, empty without ``job.score``).

    Raises:
        RenderInterrupted: Ctrl-C; the video's temporary file is removed, finished PNGs stay.
        ConfigError: the finished video holds no playable frames (removed; names ``--video``).
    """
    device = model.device
    background = torch.tensor(job.background, dtype=torch.float32, device=device)
    mine = list(range(rank, len(job.cameras), world_size))
    notes: list[str] = []
    video: VideoFile | None = None
    frames_dir = job.out_dir
    staging: Path | None = None
    if job.video is not None and world_size == 1:
        try:
            video = VideoFile(job.video, job.fps)
        except VideoUnavailable as exc:
            if frames_dir is None:
                frames_dir = job.video.with_name(job.video.stem + "_frames")
            notes.append(f"--video {job.video}: {exc}; PNG frames are written to {frames_dir} instead")
    elif job.video is not None and frames_dir is None:  # ranks hand their frames to rank 0 as PNGs
        frames_dir = staging = job.video.with_name(f".{job.video.stem}.frames")
    if frames_dir is not None:
        frames_dir.mkdir(parents=True, exist_ok=True)
        if job.depth and rank == 0:
            write_depth_scale(frames_dir, depth_scale_for(model, job.cameras), "source world units per count")
    depth_scale = depth_scale_for(model, job.cameras)
    truth = _GroundTruth(model, [job.cameras[i] for i in mine], background) if job.score else None
    scores: list[dict[str, Any]] = []
    rays = sum(job.cameras[i].intrinsics.width * job.cameras[i].intrinsics.height for i in mine) * job.spp
    progress = Progress("render", len(mine), quiet=job.quiet or rank != 0, total_items=rays)
    t0 = time.perf_counter()
    done: list[int] = []
    try:
        for position, index in enumerate(mine):
            camera = job.cameras[index]
            generator = None
            if job.spp > 1:
                generator = torch.Generator(device=device)
                generator.manual_seed(job.seed + index)
            view = render_camera(model, camera, background, job.spp, generator, with_depth=job.depth,
                                 on_rays=lambda n: progress.advance(0, n))
            name = job.name(index)
            broken = view.non_finite_pixels()
            if broken:  # nothing is written from it (a diverged model, or a precision that overflowed)
                raise SnapshotError(f"{model.source}: {camera.name or name} rendered {broken} pixel(s) of "
                                    "NaN or infinite colour: the model's values are not usable (was its training "
                                    "diverging, or does it render at a precision that overflows?)")
            rgb8 = view.rgb8
            if frames_dir is not None:
                write_png(frames_dir / f"{name}.png", rgb8)
                if job.depth:
                    write_depth_pngs(frames_dir, name, view.depth, depth_scale)
            if truth is not None:
                record, gt = truth.score(position, view.rgb)
                scores.append({"index": index, "name": camera.name, "file": f"{name}.png", **record})
                if job.compare and frames_dir is not None:
                    write_png(frames_dir / f"{name}_compare.png", side_by_side(rgb8, to_uint8(gt), record["psnr_db"]))
            if video is not None:
                video.append(rgb8)
            done.append(index)
            progress.advance(1)  # its rays were counted chunk by chunk
        seconds = time.perf_counter() - t0
        if truth is not None and frames_dir is not None and world_size > 1:
            _write_rank_scores(frames_dir, rank, scores)
        if barrier is not None:
            barrier()
        if job.video is not None and world_size > 1 and rank == 0:
            video = _encode_from_pngs(frames_dir, job, notes)
        written = video.close() if video is not None else None
    except KeyboardInterrupt:
        if video is not None:
            video.abort()
        kept = None if staging is not None else frames_dir  # staged frames are the ranks' hand-over
        raise RenderInterrupted(interrupted_message(done, len(mine), kept, job.video, job.names)) from None
    except BaseException:
        if video is not None:
            video.abort()
        raise
    finally:
        progress.close()
    if staging is not None and rank == 0 and written is not None:
        shutil.rmtree(staging, ignore_errors=True)
    if truth is not None and world_size > 1 and rank == 0 and frames_dir is not None:
        scores = _gather_rank_scores(frames_dir, world_size)
    rays = sum(c.intrinsics.width * c.intrinsics.height for c in (job.cameras[i] for i in mine)) * job.spp
    return {
        "frames": len(job.cameras), "rendered_here": len(mine), "seconds": seconds,
        "frames_per_s": len(mine) / max(seconds, 1e-9), "rays_per_s": rays / max(seconds, 1e-9),
        "out_dir": None if frames_dir is None or frames_dir == staging else str(frames_dir),
        "video": None if written is None else str(written),
        "video_codec": None if video is None else video.codec, "notes": notes, "scores": scores,
    }


class _GroundTruth:
    """The ground-truth images of scene cameras, composited over the job's background, scored as
    evaluation scores its views (:func:`trainer.train.evaluate.ground_truth`, PSNR, SSIM)."""

    def __init__(self, model: LoadedModel, cameras: list[Frame], background: torch.Tensor) -> None:
        from trainer.data.images import load_pixel_table

        self.table = load_pixel_table(cameras, downscale=model.scene.downscale)
        self.cameras = cameras
        self.background = background

    def score(self, position: int, rgb: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        """``({"mse", "psnr_db", "ssim"}, ground truth [h, w, 3] float32)`` of camera ``position``
        rendered as ``rgb`` [h, w, 3] in [0, 1]."""
        from trainer.metrics_image import psnr
        from trainer.train.evaluate import ground_truth, view_ssim

        k = self.cameras[position].intrinsics
        _, gt = ground_truth(self.table, position, self.background)
        gt_img = gt.reshape(k.height, k.width, 3).cpu()
        pred = torch.from_numpy(rgb).to(gt_img)
        mse = float(torch.mean((pred.double() - gt_img.double()) ** 2))
        record = {"mse": mse, "psnr_db": psnr(pred, gt_img), "ssim": view_ssim(pred, gt_img)}
        return record, gt_img.numpy()


def scores_summary(scores: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """``scores.json``: ``meta`` (split, step, spp, background), the means of
    :func:`trainer.train.evaluate.summary_metrics` and the per-view records by view index."""
    from trainer.train.evaluate import summary_metrics

    images = sorted(scores, key=lambda r: r["index"])
    means = {k: v for k, v in summary_metrics(images).items() if not k.startswith("background")}
    return {**meta, **means, "images": images}


def write_scores(frames_dir: Path, summary: dict[str, Any]) -> Path:
    """Write ``scores.json`` into ``frames_dir`` (atomically, strict JSON: a NaN or infinite value
    as null with its reason, :func:`trainer.contract.rundir.json_ready`); returns its path."""
    from trainer.contract.rundir import atomic_write_text, json_ready

    path = Path(frames_dir) / SCORES_FILE
    atomic_write_text(path, json.dumps(json_ready(summary), indent=2, allow_nan=False) + "\n")
    return path


def _rank_scores_path(frames_dir: Path, rank: int) -> Path:
    return Path(frames_dir) / f".scores.rank{rank}.json"


def _write_rank_scores(frames_dir: Path, rank: int, scores: list[dict[str, Any]]) -> None:
    from trainer.contract.rundir import atomic_write_text

    atomic_write_text(_rank_scores_path(frames_dir, rank), json.dumps(scores))


def _gather_rank_scores(frames_dir: Path, world_size: int) -> list[dict[str, Any]]:
    """Rank 0 after the barrier: every rank's score records (their hand-over files removed)."""
    scores: list[dict[str, Any]] = []
    for rank in range(world_size):
        path = _rank_scores_path(frames_dir, rank)
        scores.extend(json.loads(path.read_text(encoding="utf-8")))
        path.unlink()
    return scores


def _encode_from_pngs(folder: Path, job: RenderJob, notes: list[str]) -> VideoFile | None:
    """Rank 0 after the barrier: the video from every rank's PNG frames, in order."""
    import cv2

    path = job.video
    try:
        video = VideoFile(path, job.fps)
    except VideoUnavailable as exc:
        notes.append(f"--video {path}: {exc}; the PNG frames are in {folder}")
        return None
    try:
        for index in range(len(job.cameras)):
            frame_path = folder / f"{job.name(index)}.png"
            frame = cv2.imread(str(frame_path), cv2.IMREAD_COLOR)
            if frame is None:
                raise FileNotFoundError(f"{frame_path}: frame missing after every rank finished")
            video.append(frame[..., ::-1])
    except BaseException:
        video.abort()
        raise
    return video
