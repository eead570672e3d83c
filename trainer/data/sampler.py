"""Random training rays with their pixel colours (DESIGN.md §1, "Placement").

A :class:`RaySampler` draws pixels uniformly over all training pixels and turns each into a ray
(:mod:`trainer.data.rays`) and its straight RGBA colour. Where the pixels live is the placement:

``device``
    The whole :class:`~trainer.data.images.PixelTable` on the training device. A batch is a few
    kernels (random indices, ``searchsorted`` for the image, one gather of the pixels, ray maths);
    no host sync, deterministic for a given seed. Fastest; costs ``table.nbytes`` of device memory.
``pinned``
    The table in host memory (page-locked when CUDA is available). A background thread draws the
    pixel indices, gathers their colours on the host and copies indices and colours to the device
    with ``non_blocking`` on a side CUDA stream, so :meth:`RaySampler.sample` normally finds the
    batch ready. Costs host memory and PCIe bandwidth (12 bytes per ray for a uint8 table, 16
    for float16), no device memory. On a CPU device it is the same thread with a queue.
``stream``
    For scenes larger than host memory: a background thread decodes images on the fly (in a
    seeded random order, epoch after epoch) and the sampler keeps a rolling window of the K most
    recently decoded images on the device, sampling pixels uniformly from the window. Trade-off:
    memory is K images instead of all of them, but a batch only sees K images at a time (rays are
    correlated by recency, which slows convergence when K is small), the window can only turn over
    as fast as images decode (a JPEG of 2 Mpx takes ~20 ms per core), and batches are not
    reproducible (the window depends on thread timing). A larger K is better while memory allows.
``auto``
    :func:`choose_placement`: ``device`` if the table fits the memory budget, else ``pinned`` if it
    fits in host memory, else ``stream``.

Ray directions: when the cameras have lens distortion and few distinct intrinsics (one camera
for all images is the common case), the camera-space direction of every pixel of each distinct
camera is computed once (a direction map, 12 bytes per pixel) so that a batch gathers directions
instead of running the Newton undistortion; otherwise directions are computed per batch.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from trainer.data.images import PixelTable, decode_frame, load_pixel_table, rgba_as
from trainer.data.rays import IntrinsicsTensors, camera_dirs_to_world, pixel_to_camera_dirs
from trainer.data.scene import Frame
from trainer.contract.errors import ConfigError, SceneError, TrainingError

PLACEMENTS = ("auto", "device", "pinned", "stream")

# Largest direction map (in pixels, 12 bytes each) built for distorted cameras; beyond it the
# undistortion runs per batch.
MAX_DIRECTION_MAP_PIXELS = 1 << 23

# Share of free memory the pixel table may take when no budget is given.
_DEVICE_MEMORY_SHARE = 0.25
_HOST_MEMORY_SHARE = 0.5

# How long a blocked thread waits before checking whether it should stop (seconds).
_POLL_S = 0.05


@dataclasses.dataclass(eq=False)
class RayBatch:
    """A batch of training rays and the colours of their pixels (all on the sampler's device).

    Attributes:
        rays_o: [n, 3] float32 ray origins (world, unit-cube coordinates).
        rays_d: [n, 3] float32 unit ray directions (world).
        rgb: [n, 3] float32 straight (not premultiplied) pixel colour in [0, 1].
        alpha: [n, 1] float32 pixel opacity in [0, 1] (1 where the image has no alpha); composite
            with :func:`trainer.data.rays.composite_background`.
        image_index: [n] int64 index of each ray's frame in the sampler's frame list.
    """

    rays_o: torch.Tensor
    rays_d: torch.Tensor
    rgb: torch.Tensor
    alpha: torch.Tensor
    image_index: torch.Tensor

    def __len__(self) -> int:
        return int(self.rays_o.shape[0])


# ------------------------------------------------------------------------------------ placement


def host_available_bytes() -> int:
    """Host memory available to new allocations (``MemAvailable`` on Linux), in bytes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def choose_placement(
    table_nbytes: int, device: torch.device | str, memory_budget_bytes: int | None = None
) -> str:
    """The ``auto`` placement for a pixel table of ``table_nbytes`` bytes.

    Args:
        table_nbytes: size of the pixel table (:attr:`PixelTable.nbytes` or
            :func:`trainer.data.images.pixel_table_nbytes`).
        device: the training device.
        memory_budget_bytes: how much device memory the table may take; default 25% of the free
            device memory on CUDA, 50% of the available host memory on a CPU device (where device
            and host memory are the same).

    Returns:
        ``"device"`` if the table fits the budget, else ``"pinned"`` on CUDA if it fits in 50% of
        the available host memory, else ``"stream"``.
    """
    device = torch.device(device)
    budget, host_budget = _placement_budgets(device, memory_budget_bytes)
    if table_nbytes <= budget:
        return "device"
    return "pinned" if device.type == "cuda" and table_nbytes <= host_budget else "stream"


def _placement_budgets(device: torch.device, memory_budget_bytes: int | None) -> tuple[int, int]:
    """(bytes the table may take on the device, bytes it may take in host memory)."""
    host_budget = int(host_available_bytes() * _HOST_MEMORY_SHARE)
    if memory_budget_bytes is not None:
        return memory_budget_bytes, host_budget
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        return int(free_bytes * _DEVICE_MEMORY_SHARE), host_budget
    return host_budget, host_budget


def placement_note(placement: str, table_nbytes: int, device: torch.device | str,
                   memory_budget_bytes: int | None, downscale: int) -> str | None:
    """One line when the ``auto`` placement did not put the pixel table on the device: why (its
    size against the budget) and the downscale that would fit; None for ``device``.

    Args:
        placement: what :func:`choose_placement` chose for the same arguments.
        table_nbytes: the pixel table's bytes at ``downscale``.
        device, memory_budget_bytes: as given to :func:`choose_placement`.
        downscale: the images' current shrink factor.
    """
    if placement == "device":
        return None
    budget, _ = _placement_budgets(torch.device(device), memory_budget_bytes)
    limit = (f"data.memory_budget_gib {memory_budget_bytes / 2**30:g} ({budget / 2**20:.1f} MiB)"
             if memory_budget_bytes is not None else f"the memory it may take ({budget / 2**20:.1f} MiB)")
    how = ("kept in host memory and copied to the device per batch" if placement == "pinned" else
           "streamed: images decoded from disk as training runs, a window of them at a time (slower, and rays "
           "come from fewer images at once)")
    factor = downscale
    while table_nbytes * (downscale / factor) ** 2 > budget and factor < 64 * downscale:
        factor *= 2
    fits = table_nbytes * (downscale / factor) ** 2
    hint = (f"; --downscale {factor} would make it {fits / 2**20:.1f} MiB, which fits"
            if fits <= budget and factor > downscale else "")
    return (f"data.placement auto: the training pixels take {table_nbytes / 2**20:.1f} MiB, more than {limit}; "
            f"they are {how}{hint}")


# -------------------------------------------------------------------------------------- cameras


def _locate(pixel_index: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat pixel indices → (image index, index within the image), given [n + 1] offsets."""
    image_index = torch.searchsorted(offsets, pixel_index, right=True) - 1
    return image_index, pixel_index - offsets[image_index]


def _rgba_float(rgba: torch.Tensor) -> torch.Tensor:
    """uint8 (0..255) or float16 ([0, 1]) RGBA → float32 in [0, 1]."""
    if rgba.dtype == torch.uint8:
        return rgba.float() / 255.0
    return rgba.float()


class _Cameras:
    """Per-frame cameras on the device; turns (image, pixel within image) into rays."""

    def __init__(self, frames: Sequence[Frame], device: torch.device, direction_maps: bool | None):
        self.c2w = torch.from_numpy(
            np.stack([np.asarray(f.c2w, dtype=np.float32)[:3, :4] for f in frames])
        ).to(device)
        self.intrinsics = IntrinsicsTensors.from_intrinsics([f.intrinsics for f in frames], device)
        self.widths = torch.tensor(
            [f.intrinsics.width for f in frames], dtype=torch.int64, device=device
        )
        # Distinct cameras and the pixels a direction map of all of them would take.
        camera_ids: dict[Any, int] = {}
        first_frame: list[Frame] = []
        for f in frames:
            if f.intrinsics not in camera_ids:
                camera_ids[f.intrinsics] = len(camera_ids)
                first_frame.append(f)
        map_pixels = sum(f.intrinsics.width * f.intrinsics.height for f in first_frame)
        if direction_maps is None:
            direction_maps = (
                self.intrinsics.has_distortion and map_pixels <= MAX_DIRECTION_MAP_PIXELS
            )
        self.direction_map: torch.Tensor | None = None
        self.map_base: torch.Tensor | None = None  # [F] each frame's first row in the map (with one)
        if direction_maps:
            maps, bases, base = [], [], 0
            for f in first_frame:
                maps.append(_camera_direction_map(f, device))
                bases.append(base)
                base += maps[-1].shape[0]
            self.direction_map = torch.cat(maps)
            self.map_base = torch.tensor(
                [bases[camera_ids[f.intrinsics]] for f in frames], dtype=torch.int64, device=device
            )

    @property
    def kernel_ready(self) -> bool:
        """Rays come from focal length and principal point alone (no distortion) or from the
        direction map: what :func:`trainer.data.triton_rays.pinhole_rays_triton` computes."""
        return self.direction_map is not None or not self.intrinsics.has_distortion

    def rays(
        self,
        image_index: torch.Tensor,
        local_index: torch.Tensor,
        subpixel: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """rays_o, rays_d [n, 3] float32 for pixel ``local_index`` (row-major) of each image.

        ``subpixel`` [n, 2] in [0, 1): where inside the pixel the ray passes (None: the centre,
        0.5). Cameras served from a precomputed direction map always use pixel centres.
        """
        if self.direction_map is not None:
            dirs = self.direction_map[self.map_base[image_index] + local_index]
        else:
            width = self.widths[image_index]
            v = torch.div(local_index, width, rounding_mode="floor")
            u = local_index - v * width
            cameras = self.intrinsics[image_index]
            if subpixel is None:
                du = dv = 0.5
            else:
                du, dv = subpixel[:, 0], subpixel[:, 1]
            dirs = pixel_to_camera_dirs(u.float() + du, v.float() + dv, cameras)
        return camera_dirs_to_world(self.c2w[image_index], dirs)


def _camera_direction_map(frame: Frame, device: torch.device) -> torch.Tensor:
    """[h * w, 3] float32 camera-space direction of every pixel centre of ``frame``'s camera."""
    width, height = frame.intrinsics.width, frame.intrinsics.height
    v, u = torch.meshgrid(
        torch.arange(height, device=device, dtype=torch.float32) + 0.5,
        torch.arange(width, device=device, dtype=torch.float32) + 0.5,
        indexing="ij",
    )
    camera = IntrinsicsTensors.from_intrinsics([frame.intrinsics], device)
    rows = torch.zeros(height * width, dtype=torch.int64, device=device)
    return pixel_to_camera_dirs(u.reshape(-1), v.reshape(-1), camera[rows])


# -------------------------------------------------------------------------------------- sources
# Each source gives (image_index [n] int64, local_index [n] int64, rgba [n, 4]) on the device.


class _DeviceSource:
    def __init__(self, table: PixelTable, device: torch.device, seed: int):
        self.pixels = table.pixels.to(device)
        self.offsets = table.offsets.to(device)
        self.total = table.total_pixels
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.device = device

    def next(self, n_rays: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pixel_index = torch.randint(
            self.total, (n_rays,), generator=self.generator, device=self.device
        )
        image_index, local_index = _locate(pixel_index, self.offsets)
        return image_index, local_index, self.pixels[pixel_index]

    def close(self) -> None:
        pass


class _Worker:
    """A daemon thread that fills a bounded queue, stops on request, and hands errors over.

    ``target(worker)`` runs in the thread; it queues items with :meth:`put` and returns when
    :meth:`put` returns False (stop requested) or when it has nothing more to give.
    """

    def __init__(self, name: str, target: Callable[["_Worker"], None], maxsize: int):
        self.queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self.stop = threading.Event()
        self._target = target
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target(self)
        except BaseException as exc:  # handed to the consumer, raised there
            self.put(exc)

    def put(self, item: object) -> bool:
        """Block until ``item`` is queued (True) or a stop is requested (False)."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, block: bool = True) -> object | None:
        """The next item (None if ``block`` is False and nothing is ready); re-raises errors."""
        while True:
            try:
                item = self.queue.get(timeout=_POLL_S) if block else self.queue.get_nowait()
            except queue.Empty:
                if not block:
                    return None
                if not self._thread.is_alive() and self.queue.empty():
                    raise TrainingError(f"sampler thread {self._thread.name} stopped") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def close(self) -> None:
        self.stop.set()
        while True:  # unblock a put
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=30)


class _PinnedSource:
    """Host table; a background thread prepares chunks of random pixels on the device.

    The thread makes chunks of the last requested batch size; :meth:`next` concatenates chunks
    and keeps the rest, so any ``n_rays`` sequence works.
    """

    def __init__(self, table: PixelTable, device: torch.device, seed: int, prefetch_batches: int):
        self.device = device
        self.cuda = device.type == "cuda"
        pixels = table.pixels
        self.pixels = pixels.pin_memory() if self.cuda and not pixels.is_pinned() else pixels
        self.offsets = table.offsets.to(device)
        self.total = table.total_pixels
        self.seed = seed
        self.chunk_rays = 1 << 14  # replaced by the first request
        self.leftover: tuple[torch.Tensor, torch.Tensor] | None = None
        self.worker = _Worker("ray-sampler-pinned", self._produce, maxsize=prefetch_batches)

    def _produce(self, worker: _Worker) -> None:
        if self.cuda:
            torch.cuda.set_device(self.device)  # this thread's current device
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        side_stream = torch.cuda.Stream(self.device) if self.cuda else None
        while not worker.stop.is_set():
            n = self.chunk_rays
            pixel_index = torch.randint(self.total, (n,), generator=generator)
            rgba = torch.empty((n, 4), dtype=self.pixels.dtype, pin_memory=self.cuda)
            torch.index_select(self.pixels, 0, pixel_index, out=rgba)
            ready = None
            if side_stream is not None:
                pixel_index = pixel_index.pin_memory()
                with torch.cuda.stream(side_stream):
                    pixel_index = pixel_index.to(self.device, non_blocking=True)
                    rgba = rgba.to(self.device, non_blocking=True)
                    ready = torch.cuda.Event()
                    ready.record(side_stream)
            if not worker.put((pixel_index, rgba, ready)):
                return

    def _take_chunk(self) -> tuple[torch.Tensor, torch.Tensor]:
        pixel_index, rgba, ready = self.worker.get()
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            pixel_index.record_stream(stream)
            rgba.record_stream(stream)
        return pixel_index, rgba

    def next(self, n_rays: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.chunk_rays = n_rays
        parts = [self.leftover] if self.leftover is not None else []
        have = sum(p[0].shape[0] for p in parts)
        while have < n_rays:
            parts.append(self._take_chunk())
            have += parts[-1][0].shape[0]
        pixel_index = torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        rgba = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        self.leftover = (pixel_index[n_rays:], rgba[n_rays:]) if have > n_rays else None
        pixel_index, rgba = pixel_index[:n_rays], rgba[:n_rays]
        image_index, local_index = _locate(pixel_index, self.offsets)
        return image_index, local_index, rgba

    def close(self) -> None:
        self.worker.close()


class _StreamSource:
    """Rolling window of K decoded images on the device, filled by a decoding thread."""

    def __init__(
        self,
        frames: Sequence[Frame],
        downscale: int,
        device: torch.device,
        seed: int,
        window_images: int,
        swaps_per_batch: int = 1,
    ):
        self.frames = list(frames)
        self.downscale = downscale
        self.device = device
        self.cuda = device.type == "cuda"
        self.seed = seed
        self.n_slots = min(window_images, len(self.frames))
        self.slot_capacity = max(f.intrinsics.width * f.intrinsics.height for f in self.frames)
        self.buffer = torch.empty(
            (self.n_slots * self.slot_capacity, 4), dtype=torch.uint8, device=device
        )
        self.slot_image = [-1] * self.n_slots
        self.slot_pixels = [0] * self.n_slots
        self.filled = 0
        self.next_slot = 0
        self.swaps_per_batch = swaps_per_batch
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.worker = _Worker("ray-sampler-stream", self._produce, maxsize=2)

    def _produce(self, worker: _Worker) -> None:
        if self.cuda:
            torch.cuda.set_device(self.device)  # pin memory in this device's context, not GPU 0's
        rng = np.random.default_rng(self.seed)
        one_pass = self.n_slots >= len(self.frames)  # the window holds every image: decode once
        while not worker.stop.is_set():
            for image in rng.permutation(len(self.frames)):
                rgba, _ = decode_frame(self.frames[image], self.downscale)
                if rgba.dtype != np.uint8:
                    rgba = rgba_as(rgba, np.float16)
                pixels = torch.from_numpy(rgba.reshape(-1, 4))
                if self.cuda:
                    pixels = pixels.pin_memory()
                if not worker.put((int(image), pixels)):
                    return
            if one_pass:
                return

    def _insert(self, image: int, pixels: torch.Tensor) -> None:
        if pixels.dtype != self.buffer.dtype:
            if self.buffer.dtype == torch.uint8:  # first 16-bit image: the window goes float16
                self.buffer = (self.buffer.float() / 255.0).half()
            pixels = torch.from_numpy(rgba_as(pixels.numpy(), np.float16))
        slot = self.next_slot
        start = slot * self.slot_capacity
        self.buffer[start : start + pixels.shape[0]].copy_(pixels, non_blocking=self.cuda)
        self.slot_image[slot] = image
        self.slot_pixels[slot] = pixels.shape[0]
        self.next_slot = (slot + 1) % self.n_slots
        self.filled = min(self.filled + 1, self.n_slots)
        used = self.slot_pixels[: self.filled]
        self.window_total = sum(used)
        window = {"dtype": torch.int64, "device": self.device}
        self.window_offsets = torch.tensor(np.cumsum([0, *used]), **window)
        self.window_image = torch.tensor(self.slot_image[: self.filled], **window)

    def next(self, n_rays: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        while self.filled < self.n_slots:  # the first window: wait for K images
            self._insert(*self.worker.get())
        for _ in range(self.swaps_per_batch):
            item = self.worker.get(block=False)
            if item is None:
                break
            self._insert(*item)
        window_index = torch.randint(
            self.window_total, (n_rays,), generator=self.generator, device=self.device
        )
        slot, local_index = _locate(window_index, self.window_offsets)
        rgba = self.buffer[slot * self.slot_capacity + local_index]
        return self.window_image[slot], local_index, rgba

    def close(self) -> None:
        self.worker.close()


# -------------------------------------------------------------------------------------- sampler


class RaySampler:
    """Draws random training rays and their pixel colours (see the module docstring).

    Args:
        frames: the training frames (their order defines ``RayBatch.image_index``).
        table: their decoded pixels (:func:`~trainer.data.images.load_pixel_table`), or None to
            have the sampler decode them when the placement needs a table (``stream`` ignores it).
        placement: ``"device"``, ``"pinned"``, ``"stream"`` or ``"auto"``.
        device: where batches are returned.
        seed: seeds the pixel choice; with ``device`` placement the same seed gives the same
            batches.
        memory_budget_bytes: device memory the table may take under ``auto`` (see
            :func:`choose_placement`).
        downscale: the frames' image shrink factor, for decoding (``stream``, or ``table=None``).
        stream_window_images: K, the number of decoded images the ``stream`` window holds.
        prefetch_chunks: chunks the ``pinned`` thread prepares ahead.
        direction_maps: precompute per-camera ray directions (True/False), or None to do so when
            the cameras are distorted and the maps take at most ``MAX_DIRECTION_MAP_PIXELS``.
        subpixel_jitter: rays pass through a uniformly random point of their pixel instead of its
            centre (instant-ngp trains this way; the colour is the pixel's). Ignored when the
            cameras are served from a direction map (built for every camera of a scene in which
            any camera has lens distortion).
        triton_rays: build rays and decode colours with one Triton kernel
            (:mod:`trainer.data.triton_rays`) where the cameras allow it (no lens distortion, or
            a direction map of the distorted cameras); the caller checks that Triton can run on
            ``device``.

    Raises:
        ConfigError: an unknown placement or a bad window/prefetch size.
        SceneError: no frames, or a table that does not match the frames (count or image sizes);
            decoding errors of the images (also raised later by :meth:`sample` for ``stream``).

    Use as a context manager, or call :meth:`close`, to stop the background thread.
    """

    def __init__(
        self,
        frames: Sequence[Frame],
        table: PixelTable | None = None,
        placement: str = "auto",
        device: torch.device | str = "cpu",
        seed: int = 0,
        memory_budget_bytes: int | None = None,
        *,
        downscale: int = 1,
        stream_window_images: int = 16,
        prefetch_chunks: int = 2,
        direction_maps: bool | None = None,
        subpixel_jitter: bool = False,
        triton_rays: bool = False,
    ):
        if placement not in PLACEMENTS:
            choices = ", ".join(PLACEMENTS)
            raise ConfigError(f"data.placement: expected one of {choices}, got {placement!r}")
        _check_positive_int("stream_window_images", stream_window_images)
        _check_positive_int("prefetch_chunks", prefetch_chunks)
        frames = list(frames)
        if not frames:
            raise SceneError("RaySampler: no training frames")
        self.frames = frames
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            # background threads start on device 0: pin the index the caller means now
            self.device = torch.device("cuda", torch.cuda.current_device())
        if table is not None:
            _check_table(table, frames)
        if placement == "auto":
            nbytes = table.nbytes if table is not None else 4 * sum(
                f.intrinsics.width * f.intrinsics.height for f in frames
            )
            placement = choose_placement(nbytes, self.device, memory_budget_bytes)
        self.placement = placement
        if placement != "stream" and table is None:
            table = load_pixel_table(frames, downscale=downscale)
        self._cameras = _Cameras(frames, self.device, direction_maps)
        self.triton_rays = bool(triton_rays) and self._cameras.kernel_ready
        self._jitter_generator: torch.Generator | None = None
        if subpixel_jitter:
            self._jitter_generator = torch.Generator(device=self.device)
            self._jitter_generator.manual_seed(seed + 1)
        if placement == "device":
            self._source: Any = _DeviceSource(table, self.device, seed)
        elif placement == "pinned":
            self._source = _PinnedSource(table, self.device, seed, prefetch_chunks)
        else:
            self._source = _StreamSource(frames, downscale, self.device, seed, stream_window_images)

    @property
    def generator(self) -> torch.Generator | None:
        """The pixel-choice generator for ``device`` placement (to save/restore), else None."""
        return self._source.generator if isinstance(self._source, _DeviceSource) else None

    def sample(self, n_rays: int) -> RayBatch:
        """Draw ``n_rays`` pixels uniformly over all training pixels and build their rays.

        Args:
            n_rays: batch size (may change between batches).

        Returns:
            A :class:`RayBatch` on the sampler's device.

        Raises:
            ConfigError: ``n_rays`` is not a positive integer.
            SceneError: an image failed to decode (``stream``).
            TrainingError: the background thread died.
        """
        _check_positive_int("n_rays", n_rays)
        image_index, local_index, rgba = self._source.next(n_rays)
        subpixel = None
        if self._jitter_generator is not None:
            subpixel = torch.rand(
                image_index.shape[0], 2, device=self.device, generator=self._jitter_generator
            )
        if self.triton_rays:
            from trainer.data.triton_rays import pinhole_rays_triton

            cameras = self._cameras
            rays_o, rays_d, rgb, alpha = pinhole_rays_triton(
                image_index, local_index, rgba, cameras.widths, cameras.intrinsics.focal,
                cameras.intrinsics.principal, cameras.c2w, subpixel, cameras.direction_map, cameras.map_base,
            )
            return RayBatch(rays_o=rays_o, rays_d=rays_d, rgb=rgb, alpha=alpha, image_index=image_index)
        rays_o, rays_d = self._cameras.rays(image_index, local_index, subpixel)
        rgba = _rgba_float(rgba)
        return RayBatch(
            rays_o=rays_o,
            rays_d=rays_d,
            rgb=rgba[:, :3].contiguous(),
            alpha=rgba[:, 3:4].contiguous(),
            image_index=image_index,
        )

    def rng_state(self) -> dict[str, torch.Tensor]:
        """States of the sampler's random generators (pixel choice with ``device`` placement,
        sub-pixel jitter), for snapshots. Other placements draw in background threads and are
        not reproducible, so their pixel choice is not included."""
        state = {}
        generator = self.generator
        if generator is not None:
            state["pixels"] = generator.get_state()
        if self._jitter_generator is not None:
            state["subpixel"] = self._jitter_generator.get_state()
        return state

    def generators(self) -> list[torch.Generator]:
        """The sampler's random generators on its device (pixel choice, sub-pixel jitter), e.g. to
        register with a CUDA graph."""
        return [g for g in (self.generator, self._jitter_generator) if g is not None]

    def set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`rng_state` (entries this sampler has no generator for are ignored)."""
        generator = self.generator
        if "pixels" in state and generator is not None:
            generator.set_state(state["pixels"])
        if "subpixel" in state and self._jitter_generator is not None:
            self._jitter_generator.set_state(state["subpixel"])

    def close(self) -> None:
        """Stop the background thread (if any). Safe to call twice."""
        self._source.close()

    def __del__(self) -> None:  # a forgotten close() must not leave a thread running
        source = getattr(self, "_source", None)
        if source is not None:
            source.close()

    def __enter__(self) -> "RaySampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a positive integer, got {value!r}")


def _check_table(table: PixelTable, frames: Sequence[Frame]) -> None:
    if table.n_images != len(frames):
        raise SceneError(
            f"RaySampler: the pixel table has {table.n_images} images but {len(frames)} frames "
            "were given"
        )
    for frame, width, height in zip(frames, table.widths.tolist(), table.heights.tolist()):
        if (width, height) != (frame.intrinsics.width, frame.intrinsics.height):
            raise SceneError(
                f"{frame.image_path}: pixel table image is {width}x{height} but frame "
                f"{frame.name!r} has intrinsics {frame.intrinsics.width}x{frame.intrinsics.height}"
            )
