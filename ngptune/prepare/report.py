"""The registration report ``ngptune prepare`` prints: how many images the reconstruction holds,
how well it fits them, which cameras it found, and what was written."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

from ngptune.prepare.frames import CaptureImages
from ngptune.prepare.transforms import TransformsFile

__all__ = ["RegistrationReport", "print_report", "registration_report"]

#: A registration below this fraction of the images gets a warning line.
LOW_REGISTRATION_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class RegistrationReport:
    """What the reconstruction kept.

    Attributes:
        registered, total: images registered in the kept model, images given to it.
        mean_reprojection_error_px: over every observation of every sparse point, pixels.
        n_points: sparse points of the kept model.
        cameras: one line per camera (model, size, focal lengths, principal point, images using it).
        unregistered: names of the images left out, in order.
        n_models: models the mapper built (the largest is kept).
        aabb_scale: the written ``aabb_scale``.
        images_note: how the images were chosen.
        stage_seconds: stage → seconds.
        scene: the scene folder.
    """

    registered: int
    total: int
    mean_reprojection_error_px: float
    n_points: int
    cameras: tuple[str, ...]
    unregistered: tuple[str, ...]
    n_models: int
    aabb_scale: int
    images_note: str
    stage_seconds: dict[str, float]
    scene: Path


def _camera_line(camera: Any, n_images: int) -> str:
    params = ", ".join(f"{name} {value:.4g}" for name, value in zip(camera.params_info.split(", "), camera.params))
    return f"{camera.model_name} {camera.width}x{camera.height}: {params} ({n_images} images)"


def registration_report(reconstruction: Any, n_models: int, images: CaptureImages, transforms: TransformsFile,
                        stage_seconds: dict[str, float], scene: Path) -> RegistrationReport:
    """The report of a kept ``reconstruction`` (pycolmap) made from ``images``."""
    registered_names = {reconstruction.image(i).name for i in reconstruction.reg_image_ids()}
    per_camera: dict[int, int] = {}
    for i in reconstruction.reg_image_ids():
        camera_id = reconstruction.image(i).camera_id
        per_camera[camera_id] = per_camera.get(camera_id, 0) + 1
    cameras = tuple(_camera_line(reconstruction.cameras[c], n) for c, n in sorted(per_camera.items()))
    return RegistrationReport(
        registered=len(registered_names),
        total=len(images.names),
        mean_reprojection_error_px=float(reconstruction.compute_mean_reprojection_error()),
        n_points=int(reconstruction.num_points3D()),
        cameras=cameras,
        unregistered=tuple(n for n in images.names if n not in registered_names),
        n_models=n_models,
        aabb_scale=transforms.placement.aabb_scale,
        images_note=images.note,
        stage_seconds=dict(stage_seconds),
        scene=scene,
    )


def print_report(report: RegistrationReport, console: Any) -> None:
    """Print ``report`` as a two-column rich table; warn (``warnings``) when less than half registered."""
    from rich.table import Table

    from ngptune.console import table_width

    table = Table(title=f"prepared {report.scene}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("images", report.images_note)
    table.add_row("registered", f"{report.registered} / {report.total} images"
                  + (f" (largest of {report.n_models} models)" if report.n_models > 1 else ""))
    table.add_row("reprojection error", f"{report.mean_reprojection_error_px:.3f} px mean, {report.n_points:,} sparse points")
    for i, line in enumerate(report.cameras):
        table.add_row("cameras" if i == 0 else "", line)
    if report.unregistered:
        shown = ", ".join(report.unregistered[:8]) + (" ..." if len(report.unregistered) > 8 else "")
        table.add_row("not registered", shown)
    table.add_row("written", f"{report.scene / 'transforms.json'} (aabb_scale {report.aabb_scale}), "
                  f"{report.scene / 'images'}, {report.scene / 'colmap' / 'sparse' / '0'}")
    table.add_row("seconds", ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in report.stage_seconds.items()))
    console.print(table, width=table_width(console))
    if report.registered < LOW_REGISTRATION_FRACTION * report.total:
        warnings.warn(f"only {report.registered} of {report.total} images registered; the scene covers part of the "
                      "capture (more overlap between views, or less motion blur, registers more)", stacklevel=2)
