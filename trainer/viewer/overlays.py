"""What the viewer draws around the rendered model: the training cameras as frusta with their
images, the scene box, and the occupied cells of the occupancy grid.

All in the trainer's unit-cube world, the frame the model renders in (viser's scene up direction
is the training cameras' mean up vector, so orbiting feels level).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from trainer.data.scene import Frame, Scene
from trainer.contract.errors import SceneError
from trainer.viewer.camera import view_camera_of_frame

__all__ = ["MAX_FRUSTA", "MAX_GRID_POINTS", "SceneOverlays", "camera_thumbnail", "occupied_cell_centres"]

MAX_FRUSTA = 300  # more training cameras than this are drawn evenly thinned out
THUMBNAIL_SIDE = 96  # longest side of the image drawn in a frustum, pixels (at most)
MAX_GRID_POINTS = 200_000  # occupied cells drawn, at most (a fixed random subset beyond)
FRUSTUM_SCALE = 0.06  # frustum depth as a share of the cameras' mean distance to their centre
BOX_COLOUR = (230, 160, 40)
FRUSTUM_COLOUR = (60, 120, 230)
GRID_COLOUR = (240, 90, 60)


def camera_thumbnail(frame: Frame, background: tuple[float, float, float]) -> np.ndarray | None:
    """The frame's image shrunk to at most :data:`THUMBNAIL_SIDE` pixels on its longest side,
    straight alpha composited over ``background``: [h, w, 3] uint8; None when the image cannot be
    read (a moved scene), since frusta are drawn without images then."""
    from trainer.data.images import decode_image

    longest = max(frame.intrinsics.width, frame.intrinsics.height)
    try:
        rgba, _ = decode_image(frame.image_path, downscale=max(1, longest // THUMBNAIL_SIDE))
    except SceneError:
        return None
    peak = 65535.0 if rgba.dtype == np.uint16 else 255.0
    rgba = rgba.astype(np.float32) / peak
    rgb = rgba[..., :3] * rgba[..., 3:] + np.asarray(background, dtype=np.float32) * (1.0 - rgba[..., 3:])
    return (np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def occupied_cell_centres(grid: Any, max_points: int = MAX_GRID_POINTS,
                          seed: int = 0) -> list[tuple[int, np.ndarray, float]]:
    """The centres of the occupied cells, per cascade of the scene box that has any (not the
    unbounded model's background shell): ``[(cascade, points [m, 3] float32, cell side)]``.

    A cell of cascade c > 0 whose centre lies inside cascade c − 1 is left out: the marcher looks
    points up in the finest cascade that holds them
    (:meth:`trainer.render.occupancy.OccupancyGrid.locate`), so that cell is never read there.
    Beyond ``max_points`` cells in all, a fixed random subset of each cascade (in proportion).
    """
    mask = grid.occupancy_mask()
    per_cascade = []
    for cascade in range(grid.cascades):
        cells = mask[cascade].nonzero().squeeze(-1)
        if cells.numel() == 0:
            continue
        points = grid.cell_points(torch.full_like(cells, cascade), cells)
        if cascade > 0:
            points = points[(points - 0.5).abs().amax(dim=-1) >= 0.5 * 2.0 ** (cascade - 1)]
        if points.shape[0]:
            per_cascade.append((cascade, points.cpu().numpy().astype(np.float32), 2.0**cascade / grid.resolution))
    total = sum(p.shape[0] for _, p, _ in per_cascade)
    if total > max_points:
        rng = np.random.default_rng(seed)
        per_cascade = [(c, p[rng.choice(p.shape[0], max(1, p.shape[0] * max_points // total), replace=False)], size)
                       for c, p, size in per_cascade]
    return per_cascade


@dataclasses.dataclass
class SceneOverlays:
    """The overlays of one model on one viser server; each group can be shown or hidden.

    Args:
        server: the ``viser.ViserServer``.
        scene: the model's scene (its training cameras and box).
        background: RGB in [0, 1] behind the thumbnails' transparent pixels.
    """

    server: Any
    scene: Scene
    background: tuple[float, float, float]

    def __post_init__(self) -> None:
        self._frusta: list[Any] = []
        self._box: Any = None
        self._grid: list[Any] = []
        self.frustum_scale = 1.0

    def drawn_cameras(self) -> list[int]:
        """Indices into the training split of the cameras drawn (all, or :data:`MAX_FRUSTA`
        evenly spaced)."""
        n = len(self.scene.frames("train"))
        return list(range(n)) if n <= MAX_FRUSTA else [int(i * n / MAX_FRUSTA) for i in range(MAX_FRUSTA)]

    @staticmethod
    def frustum_name(index: int) -> str:
        """The scene-tree name of training camera ``index``'s frustum."""
        return f"/training_cameras/{index:05d}"

    def add_cameras(self, visible: bool = True) -> None:
        """One frustum per drawn training camera, with its image (read in a thread pool)."""
        train = self.scene.frames("train")
        indices = self.drawn_cameras()
        frames = [train[i] for i in indices]
        positions = np.stack([np.asarray(f.c2w)[:3, 3] for f in frames])
        spread = float(np.linalg.norm(positions - positions.mean(axis=0), axis=1).mean()) or 1.0
        self.frustum_scale = FRUSTUM_SCALE * spread
        with ThreadPoolExecutor(max_workers=4) as pool:
            thumbnails = list(pool.map(lambda f: camera_thumbnail(f, self.background), frames))
        for index, frame, image in zip(indices, frames, thumbnails):
            wxyz, position, fov_y = view_camera_of_frame(frame)
            k = frame.intrinsics
            self._frusta.append(self.server.scene.add_camera_frustum(
                self.frustum_name(index), fov=fov_y, aspect=k.width / k.height, scale=self.frustum_scale,
                color=FRUSTUM_COLOUR, image=image, format="jpeg", wxyz=wxyz, position=position, visible=visible,
                thickness=0.03 * self.frustum_scale))

    def hide_for(self, client: Any, index: int) -> Any:
        """Hide training camera ``index``'s frustum from one browser (whose camera is where it
        is: its image would cover the rendered frame), by a hidden browser-scoped node of the same
        name. Returns that node (``remove()`` shows the frustum again), or None when the camera
        is not drawn."""
        if index not in self.drawn_cameras():
            return None
        frame = self.scene.frames("train")[index]
        wxyz, position, fov_y = view_camera_of_frame(frame)
        k = frame.intrinsics
        return client.scene.add_camera_frustum(self.frustum_name(index), fov=fov_y, aspect=k.width / k.height,
                                               scale=self.frustum_scale, wxyz=wxyz, position=position, visible=False)

    def add_box(self, visible: bool = True) -> None:
        """The scene box (the unit cube scaled by ``aabb_scale`` around its centre), as a wireframe."""
        aabb = np.asarray(self.scene.aabb, dtype=np.float64)
        self._box = self.server.scene.add_box("/scene_box", color=BOX_COLOUR, dimensions=tuple(aabb[1] - aabb[0]),
                                              wireframe=True, position=tuple(aabb.mean(axis=0)), visible=visible)

    def set_grid(self, grid: Any, visible: bool) -> None:
        """Draw the occupied cells of ``grid`` now (replacing earlier ones) or hide them."""
        for handle in self._grid:
            handle.remove()
        self._grid = []
        if not visible:
            return
        for cascade, points, size in occupied_cell_centres(grid):
            self._grid.append(self.server.scene.add_point_cloud(
                f"/occupancy_grid/cascade_{cascade}", points=points, colors=GRID_COLOUR, point_size=size,
                point_shape="square", point_shading="flat"))

    def show_cameras(self, visible: bool) -> None:
        for handle in self._frusta:
            handle.visible = visible

    def show_box(self, visible: bool) -> None:
        if self._box is not None:
            self._box.visible = visible
