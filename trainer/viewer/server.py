"""The viewer: a viser server that shows a model rendered from each browser's camera.

Each connected browser has its own camera. Its frames are rendered progressively:

* while the camera moves, a coarse frame sized to render in about :data:`COARSE_FRAME_S` (from the
  rays per second measured so far, spp 1), sent as soon as it is done;
* once the camera has rested for :data:`REST_S`, the full frame: the canvas size with its longest
  side at most ``max_resolution``, at the chosen spp, rendered in bands (of about
  :data:`FULL_BAND_S`; shorter in a live view) so that a camera that moves again stops it between
  two bands.

Rendering happens only in :meth:`Viewer.serve`, called by whoever owns the model: a render thread
for a saved model (:meth:`Viewer.serve_forever`), the training loop between two steps for a live
view (:class:`trainer.viewer.live.LiveView`). Browsers only record what they want (under a lock)
and wake the renderer, so a viewer nobody looks at costs nothing but a flag read. In a live view a
resting camera's frame is rendered again when the model has trained on, at most as often as keeps
that work under :data:`LIVE_REFRESH_SHARE` of the time.

A browser that disconnects (or whose frame fails) is reported in one line; the server keeps
serving the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import itertools
import math
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trainer.contract.errors import ConfigError
from trainer.viewer.camera import ViewCamera, frame_size, view_camera_of_frame
from trainer.contract.commandline import RENDER_MODES
from trainer.viewer.frames import BandedFrame, FrameRequest
from trainer.viewer.overlays import SceneOverlays

__all__ = ["REST_S", "Viewer", "ViewerSettings", "check_port_free", "port_in_use_message"]

REST_S = 0.25  # a camera unchanged this long is at rest: its full frame is rendered
COARSE_FRAME_S = 0.06  # a moving camera's frame is sized to render in about this long
MIN_COARSE_PIXELS = 48 * 27  # but never smaller than this
FULL_BAND_S = 0.15  # a full frame's bands are sized to render in about this long each (by default)
LIVE_REFRESH_SHARE = 0.02  # live view: re-rendering resting cameras for a newer model takes at most this share
MIN_REFRESH_S = 1.0  # ... and happens at most this often
JPEG_QUALITY = 90
MODE_LABELS = {"rgb": "RGB", "depth": "Depth", "opacity": "Opacity"}


def port_in_use_message(port: int, host: str, flags: tuple[str, str] = ("--host", "--port")) -> str:
    """The error line of a port another program listens on (``flags``: the host and port flags)."""
    return (f"{flags[1]} {port}: already in use on {host}; choose another port, or leave {flags[1]} out for a "
            "free one")


def check_port_free(host: str, port: int, flags: tuple[str, str] = ("--host", "--port")) -> None:
    """Refuse a port that another program listens on (viser would move to the next free port
    without a word), or a host this machine cannot listen on. Port 0 (a free port) passes.

    Args:
        flags: the names of the host and port flags, for the message.

    Raises:
        ConfigError: one line naming the port or host flag and the problem.
    """
    host_flag, port_flag = flags
    if not 0 <= port <= 65535:
        raise ConfigError(f"{port_flag} {port}: expected a port number in 0..65535 (0: a free port)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"{host_flag} {host}: not an address of this machine ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(port_in_use_message(port, host, flags)) from None
            raise ConfigError(f"{host_flag} {host}: cannot listen there ({exc.strerror or exc})") from None


@dataclasses.dataclass
class ViewerSettings:
    """What every browser's frames show (the controls of the page).

    Attributes:
        mode: one of :data:`~trainer.contract.commandline.RENDER_MODES`.
        background: RGB in [0, 1].
        spp: jittered renders averaged per pixel of a full frame (>= 1).
        max_resolution: longest side of a full frame in pixels (>= 16).
        show_cameras, show_box, show_grid: overlays drawn in the scene.
    """

    mode: str = "rgb"
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    spp: int = 1
    max_resolution: int = 1920
    show_cameras: bool = True
    show_box: bool = True
    show_grid: bool = False


@dataclasses.dataclass
class _Browser:
    """One connected browser and what it has been shown."""

    number: int
    client: Any
    stats: Any = None
    camera: ViewCamera | None = None
    version: int = 0  # bumped when the camera or a setting changes
    moved_at: float = 0.0
    shown_version: int = -1
    shown_full: bool = False
    shown_step: int = -1
    frames_sent: int = 0
    camera_index: int = 0
    hidden_frustum: Any = None  # the frustum of the training camera this browser was put at
    hidden_at: Any = None  # ... and that camera's position
    next_refresh_at: float = 0.0
    job: BandedFrame | None = None
    job_version: int = -1
    job_full: bool = False


class Viewer:
    """A viser server showing ``model`` (module docstring).

    Args:
        model: a :class:`~trainer.inference.loading.LoadedModel` (or one wrapping a training
            trainer, whose ``trainer.step`` advances).
        settings: the initial controls.
        host, port: where to listen (port 0: a free one).
        log: where one-line messages go (connections, failed frames).
        live: a training run's model: resting cameras are rendered again as it trains.
        title: the first line of the page's panel (Markdown).
        save_dir: where "Save camera" writes camera paths (None: the button is disabled).
        save_hint: the model as ``ngptune render`` should be given it, in the saved-camera line.
        flags: the host and port flags, for messages.
        band_s: a full frame's bands are sized to render in about this long.

    Raises:
        ConfigError: the port is in use or the host cannot be listened on (names the flag).
    """

    def __init__(self, model: Any, settings: ViewerSettings, host: str = "127.0.0.1", port: int = 0,
                 log: Callable[[str], None] = print, live: bool = False, title: str = "",
                 save_dir: Path | None = None, save_hint: str = "MODEL",
                 flags: tuple[str, str] = ("--host", "--port"), band_s: float = FULL_BAND_S) -> None:
        import viser

        check_port_free(host, port, flags)
        self.model = model
        self.settings = settings
        self.live = live
        self.band_s = band_s
        self.save_dir = save_dir
        self.save_hint = save_hint
        self.host = host
        self._log = log
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._browsers: dict[int, _Browser] = {}
        self._numbers = itertools.count(1)
        self._turn = 0
        self._rays_per_s = 5e6 if model.device.type == "cuda" else 2e4  # until measured
        with contextlib.redirect_stdout(io.StringIO()):  # viser's own banner; the caller prints the URL
            self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.port = self.server.get_port()
        if port and self.port != port:  # taken between the check and the bind
            self.close()
            raise ConfigError(port_in_use_message(port, host, flags))
        self._train_frames = model.scene.frames("train")
        self._build_scene(title)
        self.server.on_client_connect(self._connected)
        self.server.on_client_disconnect(self._disconnected)

    # ------------------------------------------------------------------ page
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _build_scene(self, title: str) -> None:
        from trainer.inference.cameras import scene_orbit

        server, s = self.server, self.settings
        orbit = scene_orbit(self.model.scene)
        self._centre = orbit.centre
        server.scene.set_up_direction(tuple(float(v) for v in orbit.up))
        server.gui.main_panel.dock_right()
        self.overlays = SceneOverlays(server, self.model.scene, s.background)
        self.overlays.add_cameras(s.show_cameras)
        self.overlays.add_box(s.show_box)
        self.overlays.set_grid(self.model.trainer.grid, s.show_grid)
        self.title = server.gui.add_markdown(title)
        self.status = server.gui.add_markdown("")
        with server.gui.add_folder("Render"):
            mode = server.gui.add_dropdown("Mode", tuple(MODE_LABELS[m] for m in RENDER_MODES),
                                           initial_value=MODE_LABELS[s.mode])
            background = server.gui.add_rgb("Background", tuple(int(round(255 * c)) for c in s.background))
            spp = server.gui.add_slider("spp", min=1, max=16, step=1, initial_value=min(s.spp, 16),
                                        hint="jittered renders averaged per pixel of a resting frame")
            resolution = server.gui.add_slider("Max resolution", min=64, max=4096, step=16,
                                               initial_value=min(max(s.max_resolution, 64), 4096),
                                               hint="longest side of a resting frame, pixels")
        with server.gui.add_folder("Scene"):
            cameras = server.gui.add_checkbox("Training cameras", s.show_cameras)
            box = server.gui.add_checkbox("Scene box", s.show_box)
            grid = server.gui.add_checkbox("Occupancy grid", s.show_grid, hint="its occupied cells")
        with server.gui.add_folder("Camera"):
            steps = server.gui.add_button_group("Training camera", ("First", "Previous", "Next"),
                                                hint="put this view where a training camera is")
            save = server.gui.add_button("Save camera", disabled=self.save_dir is None,
                                         hint="write this view as a camera path that ngptune render --cameras takes")

        def changed(**values: Any) -> None:
            with self._lock:
                for key, value in values.items():
                    setattr(self.settings, key, value)
                for browser in self._browsers.values():
                    self._touch(browser)
            self._wake.set()

        inverse_labels = {label: m for m, label in MODE_LABELS.items()}
        mode.on_update(lambda _: changed(mode=inverse_labels[mode.value]))
        background.on_update(lambda _: changed(background=tuple(c / 255.0 for c in background.value)))
        spp.on_update(lambda _: changed(spp=int(spp.value)))
        resolution.on_update(lambda _: changed(max_resolution=int(resolution.value)))
        cameras.on_update(lambda _: self.overlays.show_cameras(cameras.value))
        box.on_update(lambda _: self.overlays.show_box(box.value))
        grid.on_update(lambda _: self.overlays.set_grid(self.model.trainer.grid, grid.value))
        steps.on_click(lambda event: self._step_camera(event.client, event.target.value))
        save.on_click(lambda event: self._save_camera(event.client))

    def _browser_of(self, client: Any) -> _Browser | None:
        with self._lock:
            return None if client is None else self._browsers.get(client.client_id)

    def _step_camera(self, client: Any, which: str) -> None:
        """First / Previous / Next training camera for ``client`` (wrapping around)."""
        browser = self._browser_of(client)
        if browser is None or not self._train_frames:
            return
        n = len(self._train_frames)
        browser.camera_index = 0 if which == "First" else (browser.camera_index + (1 if which == "Next" else -1)) % n
        self._move_to(client, browser.camera_index)

    def _move_to(self, client: Any, index: int) -> None:
        """Put ``client``'s camera where training camera ``index`` is (its vertical field of view
        too), looking along its axis at the point nearest the cameras' centre of attention."""
        frame = self._train_frames[index]
        wxyz, position, fov_y = view_camera_of_frame(frame)
        forward = np.asarray(frame.c2w)[:3, 2] * -1.0
        depth = max(float(np.dot(self._centre - position, forward)), 1e-3)
        browser = self._browser_of(client)
        if browser is not None:
            self._show_hidden_frustum(browser)
            browser.hidden_frustum = self.overlays.hide_for(client, index)
            browser.hidden_at = position
        with client.atomic():
            client.camera.fov = fov_y
            client.camera.position = position
            client.camera.wxyz = wxyz
            client.camera.look_at = position + depth * forward

    def _show_hidden_frustum(self, browser: _Browser) -> None:
        with self._lock:
            handle, browser.hidden_frustum = browser.hidden_frustum, None
        if handle is not None:
            handle.remove()

    def _save_camera(self, client: Any) -> None:
        """Write ``client``'s view (its full-frame size) as a nerfstudio camera path in
        :attr:`save_dir` (``view_<N>.json``, the first free N) and say how to render it."""
        import json

        from trainer.inference.cameras import nerfstudio_camera_path
        from trainer.contract.rundir import RunDir, atomic_write_text

        browser = self._browser_of(client)
        if browser is None or browser.camera is None or self.save_dir is None:
            return
        camera = browser.camera
        frame = camera.frame(*frame_size(camera.width, camera.height, max_side=self.settings.max_resolution))
        folder = RunDir(self.save_dir)
        path = next(p for p in map(folder.view_camera_path, itertools.count(1)) if not p.exists())
        try:
            atomic_write_text(path, json.dumps(nerfstudio_camera_path([frame], self.model.scene), indent=2) + "\n")
        except OSError as exc:
            self._log(f"viewer: browser {browser.number}: cannot save the camera to {path} ({exc.strerror or exc})")
            return
        self._log(f"viewer: browser {browser.number}'s camera saved to {path}; render it with "
                  f"ngptune render {self.save_hint} --cameras {path}")

    def set_status(self, markdown: str) -> None:
        """The line under the title (a live run's step, loss, PSNR, steps/s)."""
        self.status.content = markdown

    # ------------------------------------------------------------------ browsers
    def _connected(self, client: Any) -> None:
        with self._lock:
            browser = _Browser(number=next(self._numbers), client=client)
            self._browsers[client.client_id] = browser
            count = len(self._browsers)
        browser.stats = client.gui.add_markdown("")
        client.camera.on_update(lambda camera: self._camera_moved(client.client_id, camera))
        self._log(f"viewer: browser {browser.number} connected ({count} connected)")
        if self._train_frames:
            self._move_to(client, 0)  # its first frame follows when the browser reports that camera
        else:
            self._camera_moved(client.client_id, client.camera)

    def _disconnected(self, client: Any) -> None:
        with self._lock:
            browser = self._browsers.pop(client.client_id, None)
            count = len(self._browsers)
        if browser is not None:
            self._log(f"viewer: browser {browser.number} disconnected ({count} still connected)")

    def _camera_moved(self, client_id: int, camera: Any) -> None:
        try:
            view = ViewCamera(wxyz=tuple(float(v) for v in camera.wxyz), position=tuple(float(v) for v in camera.position),
                              fov_y=float(camera.fov), width=int(camera.image_width), height=int(camera.image_height))
        except AssertionError:  # no camera message from this browser yet
            return
        if view.width < 1 or view.height < 1 or not 0 < view.fov_y < math.pi:
            return  # a hidden tab or a collapsed canvas: nothing to show
        with self._lock:
            browser = self._browsers.get(client_id)
            if browser is None or browser.camera == view:
                return
            browser.camera = view
            self._touch(browser)
        self._wake.set()
        if browser.hidden_frustum is not None and \
                np.linalg.norm(np.asarray(view.position) - browser.hidden_at) > self.overlays.frustum_scale:
            self._show_hidden_frustum(browser)  # moved away from that training camera

    @staticmethod
    def _touch(browser: _Browser) -> None:
        browser.version += 1
        browser.moved_at = time.monotonic()

    @property
    def browsers(self) -> int:
        """Browsers connected now."""
        with self._lock:
            return len(self._browsers)

    # ------------------------------------------------------------------ rendering
    def _plan(self, browser: _Browser, now: float) -> tuple[bool, float]:
        """``(full, delay)``: whether a frame is due for ``browser`` now and whether it is a full
        one; else the seconds until one is due (inf: none)."""
        if browser.version != browser.shown_version:
            return False, 0.0  # a coarse frame first (full when it is as large)
        if not browser.shown_full:
            return True, max(0.0, browser.moved_at + REST_S - now)
        if self.live and self.model.trainer.step != browser.shown_step:
            return True, max(0.0, browser.next_refresh_at - now)
        return False, math.inf

    def _request(self, browser: _Browser, full: bool) -> tuple[FrameRequest, bool]:
        """The frame to render for ``browser`` and whether it is a full one (a coarse frame as
        large as the full one is full)."""
        s, camera = self.settings, browser.camera
        full_w, full_h = frame_size(camera.width, camera.height, max_side=s.max_resolution)
        width, height, spp = full_w, full_h, s.spp
        if not full:
            coarse_pixels = max(MIN_COARSE_PIXELS, int(self._rays_per_s * COARSE_FRAME_S))
            width, height = frame_size(camera.width, camera.height, max_side=s.max_resolution, max_pixels=coarse_pixels)
            spp = 1
            full = (width, height, spp) == (full_w, full_h, s.spp)
        request = FrameRequest(frame=camera.frame(width, height), mode=s.mode, background=s.background, spp=spp,
                               seed=browser.version)
        return request, full

    def _next_job(self, now: float) -> tuple[_Browser | None, float]:
        """The browser whose frame to work on next (taking turns), starting or dropping its job;
        else None and the seconds until a frame is due (inf: none)."""
        with self._lock:
            browsers = list(self._browsers.values())
            delay = math.inf
            for i in range(len(browsers)):
                browser = browsers[(self._turn + i) % len(browsers)]
                if browser.camera is None:
                    continue
                if browser.job is not None and browser.job_full and browser.job_version != browser.version:
                    browser.job = None  # the camera moved on: this full frame would be stale
                if browser.job is not None:
                    self._turn = (self._turn + i + 1) % len(browsers)
                    return browser, 0.0
                full, wait = self._plan(browser, now)
                if wait > 0.0:
                    delay = min(delay, wait)
                    continue
                request, full = self._request(browser, full)
                band_s = self.band_s if full else COARSE_FRAME_S * 4
                browser.job = BandedFrame(self.model, request, band_rays=max(1, int(self._rays_per_s * band_s)))
                browser.job_version, browser.job_full = browser.version, full
                self._turn = (self._turn + i + 1) % len(browsers)
                return browser, 0.0
            return None, delay

    def serve(self, budget_s: float) -> float:
        """Render for about ``budget_s`` seconds (at least one band when a frame is due), sending
        each frame as it completes.

        Returns:
            seconds until the next frame is due: 0 when one is due now, inf when none is (until a
            browser moves or a setting changes).
        """
        end = time.perf_counter() + budget_s
        while True:
            browser, delay = self._next_job(time.monotonic())
            if browser is None:
                return delay
            job = browser.job
            try:
                before = job.render_s
                rows_before = job.next_row
                job.render_band()
                band_rays = (job.next_row - rows_before) * job.width * job.request.spp
                band_s = max(job.render_s - before, 1e-6)
                self._rays_per_s = 0.5 * self._rays_per_s + 0.5 * band_rays / band_s
                if job.done:
                    self._send(browser, job)
            except Exception as exc:  # noqa: BLE001 — one browser's frame must not stop the viewer
                self._failed(browser, exc)
            if time.perf_counter() >= end:
                return 0.0

    def _send(self, browser: _Browser, job: BandedFrame) -> None:
        image = job.image()
        with self._lock:
            if self._browsers.get(browser.client.client_id) is not browser:
                return  # disconnected meanwhile
            browser.job = None
            browser.shown_version, browser.shown_full = browser.job_version, browser.job_full
            browser.shown_step = int(self.model.trainer.step)
            browser.frames_sent += 1
            if browser.job_full and self.live:
                browser.next_refresh_at = time.monotonic() + max(MIN_REFRESH_S, job.render_s / LIVE_REFRESH_SHARE)
        browser.client.scene.set_background_image(image, format="jpeg", jpeg_quality=JPEG_QUALITY)
        kind = "full" if browser.job_full else "moving"
        browser.stats.content = (f"Frame {browser.frames_sent}: {job.width}×{job.height} ({kind}), "
                                 f"spp {job.request.spp}, {job.render_s * 1e3:.0f} ms")

    def _failed(self, browser: _Browser, exc: Exception) -> None:
        """A frame that raised: one line, and this browser is not tried again until its camera
        or a setting changes."""
        with self._lock:
            gone = self._browsers.get(browser.client.client_id) is not browser
            browser.job = None
            browser.shown_version, browser.shown_full = browser.version, True
            browser.shown_step = int(self.model.trainer.step)
        if not gone:
            self._log(f"viewer: browser {browser.number}: frame failed ({type(exc).__name__}: {exc}); "
                      "the viewer keeps serving")

    def serve_forever(self, stop: threading.Event) -> None:
        """Render whenever a browser needs a frame, until ``stop`` is set (a saved model's render
        thread)."""
        while not stop.is_set():
            self._wake.clear()
            delay = self.serve(FULL_BAND_S)
            if delay > 0.0:
                self._wake.wait(None if math.isinf(delay) else delay)

    def wake(self) -> None:
        """Make :meth:`serve_forever` look again (stopping it, say)."""
        self._wake.set()

    @property
    def woken(self) -> bool:
        """Whether a browser asked for something since the last :meth:`serve` began (a flag read)."""
        return self._wake.is_set()

    def clear_wake(self) -> None:
        self._wake.clear()

    def close(self) -> None:
        """Stop the server (quietly: the caller says that it stopped)."""
        with contextlib.redirect_stdout(io.StringIO()):
            self.server.stop()
