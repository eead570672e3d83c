"""Structure from motion through pycolmap (the ``colmap`` extra): SIFT features, matching, incremental
mapping, the largest model kept.

* **Cameras.** One camera per device (EXIF make and model; a video is one device), written to the
  database before extraction and shared by every image of that device, so bundle adjustment fits
  one focal length and distortion to all of them. Its model is ``camera_model`` (default OPENCV:
  fx, fy, cx, cy, k1, k2, p1, p2, the model instant-ngp's ``colmap2nerf.py`` asks COLMAP for);
  the focal length starts from EXIF where the photo has it, else 1.2 × the longest side (COLMAP).
* **Matching.** ``exhaustive`` (every pair; photos, which come in no particular order) or
  ``sequential`` (each image with its 10 successors and quadratic steps beyond; video frames),
  pairs from pycolmap's pair generators, SIFT matching and geometric verification.
* **Mapping.** pycolmap's incremental mapper with models of at least :data:`MIN_IMAGES` images kept;
  the model with the most registered images is the scene.

Each pycolmap call runs in a worker thread with a cancellation token, so Ctrl-C stops it within a
moment; features and matches go in batches so the progress bars move.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path
from typing import Any, Callable

from ngptune.errors import PrepareError
from ngptune.prepare.frames import MIN_IMAGES, CaptureImages
from ngptune.prepare.progress import StageProgress

__all__ = ["CAMERA_MODELS", "MATCHERS", "SfmOptions", "SfmResult", "pycolmap_module", "run_sfm"]

#: COLMAP camera models whose parameters instant-ngp's ``transforms.json`` can hold.
CAMERA_MODELS = ("OPENCV", "SIMPLE_RADIAL", "RADIAL", "PINHOLE", "SIMPLE_PINHOLE")
MATCHERS = ("exhaustive", "sequential")
#: Successors each video frame is matched with (COLMAP's default), plus quadratic steps beyond.
SEQUENTIAL_OVERLAP = 10
#: Progress updates per stage the batches aim at (fewer calls cost less set-up).
UPDATES_PER_STAGE = 20


@dataclasses.dataclass(frozen=True)
class SfmOptions:
    """How to run structure from motion.

    Attributes:
        matcher: ``"exhaustive"`` or ``"sequential"``.
        camera_model: one of :data:`CAMERA_MODELS`.
        max_features: SIFT features per image at most (COLMAP's default 8192).
        verbose: keep COLMAP's own log lines (stderr).
    """

    matcher: str = "exhaustive"
    camera_model: str = "OPENCV"
    max_features: int = 8192
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.matcher not in MATCHERS:
            raise ValueError(f"matcher: expected one of {', '.join(MATCHERS)}, got {self.matcher!r}")
        if self.camera_model not in CAMERA_MODELS:
            raise ValueError(f"camera_model: expected one of {', '.join(CAMERA_MODELS)}, got {self.camera_model!r}")


@dataclasses.dataclass(frozen=True)
class SfmResult:
    """The kept model and how the mapping went.

    Attributes:
        reconstruction: the pycolmap ``Reconstruction`` with the most registered images.
        n_models: models the mapper produced.
        n_verified_pairs: image pairs with a verified two-view geometry.
    """

    reconstruction: Any
    n_models: int
    n_verified_pairs: int


def pycolmap_module() -> Any:
    """The ``pycolmap`` module, imported with this process's SIGTERM handler kept: pycolmap's
    import installs glog's failure handler for SIGTERM, which prints a C stack trace and ends the
    process before ``ngptune prepare`` can remove its partial folder and say so in one line.

    Raises:
        PrepareError: it is not installed.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        import pycolmap
    except ImportError:
        raise PrepareError("ngptune prepare needs pycolmap: pip install 'ngptune[colmap]'") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return pycolmap


def run_cancellable(stage: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, cancellation_token=token, **kwargs)`` in a worker thread; Ctrl-C or SIGTERM
    cancels it.

    While the call runs (in the main thread), SIGINT and SIGTERM only cancel the token and are
    remembered; once the worker has returned, the first of them goes to the handler that was in
    place before (so Ctrl-C raises ``KeyboardInterrupt`` and ``ngptune prepare``'s SIGTERM handler
    its ``Terminated``). No exception can leave this function while pycolmap still works on the
    scratch folder, which the caller then removes.

    Raises:
        PrepareError: the call raised, naming ``stage`` and pycolmap's message.
        KeyboardInterrupt: (or what the previous handler raises) after the cancelled call returned.
    """
    pycolmap = pycolmap_module()
    token = pycolmap.CancellationToken()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = call(*args, cancellation_token=token, **kwargs)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name=f"pycolmap-{stage}", daemon=True)
    stops: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        stops.append(signum)
        token.cancel()

    handled = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    previous = {}
    for signum in handled if main else ():
        current = signal.getsignal(signum)
        if current is not None and current != signal.SIG_IGN:  # None: a handler not set from Python
            previous[signum] = signal.signal(signum, stop)
    try:
        worker.start()
        while not done.wait(0.2):
            pass
        worker.join()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stops:
        deliver_signal(stops[0], previous.get(stops[0]))
    if "error" in outcome:
        exc = outcome["error"]
        raise PrepareError(f"{stage}: COLMAP failed: {type(exc).__name__}: {exc}") from exc
    return outcome.get("value")


def deliver_signal(signum: int, handler: Any) -> None:
    """Hand ``signum``, held back while pycolmap worked, to ``handler`` (the one it replaced): call
    a Python handler, or re-send the signal for ``SIG_DFL`` (the process ends as it would have).

    Raises:
        What the handler raises; else ``KeyboardInterrupt``, since the stage was cancelled.
    """
    if callable(handler):
        handler(signum, None)
    else:
        signal.raise_signal(signum)
    raise KeyboardInterrupt(f"signal {signum}: the stage was cancelled")


def _batches(items: list, per_batch: int) -> list[list]:
    return [items[i : i + per_batch] for i in range(0, len(items), per_batch)]


def _batch_size(total: int, minimum: int) -> int:
    return max(minimum, -(-total // UPDATES_PER_STAGE))


def write_cameras(pycolmap: Any, database: Path, images: CaptureImages, camera_model: str) -> dict[str, int]:
    """One camera per device in ``database``; returns device → camera id."""
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = camera_model
    first_of_device: dict[str, str] = {}
    for name, device in zip(images.names, images.devices):
        first_of_device.setdefault(device, name)
    ids = {}
    db = pycolmap.Database.open(str(database))
    try:
        for device, name in first_of_device.items():
            camera = pycolmap.infer_camera_from_image(str(images.folder / name), reader)
            ids[device] = int(db.write_camera(camera))
    finally:
        db.close()
    return ids


def extract_features(database: Path, images: CaptureImages, options: SfmOptions, progress: StageProgress) -> None:
    """SIFT features of every image into ``database`` (stage ``features``)."""
    pycolmap = pycolmap_module()
    camera_ids = write_cameras(pycolmap, database, images, options.camera_model)
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.sift.max_num_features = options.max_features
    with progress.stage("features", len(images.names), "images") as stage:
        for device, camera_id in camera_ids.items():
            names = [n for n, d in zip(images.names, images.devices) if d == device]
            reader = pycolmap.ImageReaderOptions()
            reader.camera_model = options.camera_model
            reader.existing_camera_id = camera_id
            for batch in _batches(names, _batch_size(len(images.names), 8)):
                run_cancellable("features", pycolmap.extract_features, str(database), str(images.folder),
                                image_names=batch, camera_mode=pycolmap.CameraMode.SINGLE,
                                reader_options=reader, extraction_options=extraction)
                stage.advance(len(batch))


def image_pairs(pycolmap: Any, database: Path, matcher: str) -> list[tuple[str, str]]:
    """The image pairs to match, by name, from pycolmap's exhaustive or sequential pair generator."""
    db = pycolmap.Database.open(str(database))
    try:
        if matcher == "sequential":
            pairing = pycolmap.SequentialPairingOptions()
            pairing.overlap = SEQUENTIAL_OVERLAP
            generator = pycolmap.SequentialPairGenerator(pairing, db)
        else:
            generator = pycolmap.ExhaustivePairGenerator(pycolmap.ExhaustivePairingOptions(), db)
        id_pairs = generator.all_pairs()
        names = {image.image_id: image.name for image in db.read_all_images()}
    finally:
        db.close()
    return [(names[a], names[b]) for a, b in id_pairs]


def match_features(database: Path, options: SfmOptions, progress: StageProgress) -> int:
    """Match the image pairs of ``options.matcher`` and verify them (stage ``matching``); returns
    the number of verified pairs."""
    pycolmap = pycolmap_module()
    pairs = image_pairs(pycolmap, database, options.matcher)
    pairs_file = database.with_name("pairs.txt")
    with progress.stage("matching", len(pairs), "pairs") as stage:
        for batch in _batches(pairs, _batch_size(len(pairs), 64)):
            pairs_file.write_text("".join(f"{a} {b}\n" for a, b in batch))
            pairing = pycolmap.ImportedPairingOptions()
            pairing.match_list_path = str(pairs_file)
            run_cancellable("matching", pycolmap.match_image_pairs, str(database), pairing_options=pairing)
            stage.advance(len(batch))
    pairs_file.unlink(missing_ok=True)
    db = pycolmap.Database.open(str(database))
    try:
        verified = db.num_verified_image_pairs
        return int(verified() if callable(verified) else verified)
    finally:
        db.close()


def map_images(database: Path, images: CaptureImages, models_dir: Path, progress: StageProgress) -> tuple[Any, int]:
    """Incremental mapping (stage ``mapping``); returns ``(largest model, number of models)``.

    Raises:
        PrepareError: no model, or fewer than :data:`MIN_IMAGES` images registered in the largest.
    """
    pycolmap = pycolmap_module()
    mapping = pycolmap.IncrementalPipelineOptions()
    mapping.min_model_size = MIN_IMAGES
    models_dir.mkdir(parents=True, exist_ok=True)
    total = len(images.names)
    with progress.stage("mapping", total, "images registered") as stage:
        models = run_cancellable(
            "mapping", pycolmap.incremental_mapping, str(database), str(images.folder), str(models_dir),
            options=mapping, initial_image_pair_callback=lambda: stage.advance(2),
            next_image_callback=lambda: stage.advance(1),
        )
    if not models:
        raise PrepareError(
            f"mapping: fewer than {MIN_IMAGES} of the {total} images could be registered together, so no model "
            "was built (too few matches between them: more overlap between views, more texture, or less "
            "motion blur helps)"
        )
    largest = max(models.values(), key=lambda model: model.num_reg_images())
    registered = largest.num_reg_images()
    if registered < MIN_IMAGES:
        raise PrepareError(
            f"mapping: only {registered} of {total} images registered (at least {MIN_IMAGES} are needed)"
        )
    return largest, len(models)


def run_sfm(images: CaptureImages, work: Path, options: SfmOptions, progress: StageProgress) -> SfmResult:
    """Features, matching and mapping of ``images`` with ``work`` as scratch space (database, models).

    Raises:
        PrepareError: pycolmap missing, a stage failing (named), or too few images registered.
    """
    pycolmap = pycolmap_module()
    pycolmap.logging.minloglevel = 0 if options.verbose else 3  # 3: fatal only; failures are raised as PrepareError
    work.mkdir(parents=True, exist_ok=True)
    database = work / "database.db"
    extract_features(database, images, options, progress)
    n_verified = match_features(database, options, progress)
    if n_verified == 0:
        raise PrepareError(
            f"matching: no pair of the {len(images.names)} images shares enough verified features "
            "(views of the same scene with overlap are needed)"
        )
    reconstruction, n_models = map_images(database, images, work / "models", progress)
    return SfmResult(reconstruction=reconstruction, n_models=n_models, n_verified_pairs=n_verified)
