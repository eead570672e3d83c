"""``python -m trainer.tools.inspect SCENE [--downscale N] [--format F] ... [--timing]``: a scene
as the trainer loads it, as one JSON line (:func:`describe_scene`); ``ngptune inspect`` shows it as
a table or prints it (``--json``). A scene that cannot be loaded is one ``error: `` line, exit 2."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from trainer.contract import EncodingConfig, TrainerError, add_inspect_arguments, parse_command_line, print_error
from trainer.contract.commandline import scene_format_overrides
from trainer.contract.defaults import default_config_path, runs_on_cpu
from trainer.data import load_scene
from trainer.data.capture_kind import classify_frames
from trainer.data.footprint import footprint_resolution
from trainer.data.options import SceneOptions
from trainer.render.scene_model import MODEL_OF_KIND, field_box

__all__ = ["describe_scene", "main"]


def describe_scene(
    path: Path, downscale: int | None = None, timing: bool = False, holdout_every: int = 0, **scene_options: Any
) -> dict[str, Any]:
    """Facts about a scene as a JSON-ready dict.

    Keys: ``format``, ``root``, ``splits`` (split → image count), ``width``/``height`` (first image),
    ``image_sizes`` (``"WxH"`` → count), ``intrinsics`` (focal and principal point ranges, whether
    any frame is distorted), ``aabb_scale``, ``aabb`` ([[min], [max]]), ``skipped`` (list of
    ``{frame, reason}``), ``notes``, ``pixel_memory_bytes`` (decoded table of all splits),
    ``ignored_formats`` (other formats found in the folder and not loaded), ``box_source`` (``file``,
    ``data`` or ``override``), ``capture`` (the capture's kind,
    :class:`trainer.data.capture_kind.CaptureKind` as a dict: ``kind``, ``reason``,
    ``transparent_share``, ``view_spread_deg``, from the training views), ``scene_model`` (the
    model ``training.scene_model`` auto trains it with: ``box`` or ``unbounded``),
    ``finest_resolution`` (``{footprint, default}``: the training views'
    pixel-footprint resolution across the box the field spans in that scene model and the finest
    hash-grid resolution the default encoding derives from it), ``hash_grid``
    (``{n_features_per_level, log2_hashmap_size}``: the defaults' F and log2 T for that scene
    model), on a machine without CUDA ``cpu_preset`` (the config file ``train`` reads there without
    ``--config``, :func:`~trainer.contract.defaults.default_config_path`: its size, grid and
    steps, not the defaults described) and, with ``timing``, ``timing`` (``first_load_s``, ``second_load_s``
    of the training images). ``downscale`` None applies the automatic rule; ``scene_options`` are
    further :class:`trainer.data.SceneOptions` fields (``format``, ``camera_convention``, ``aabb_scale``).

    ``splits`` describes the scene as stored: scenes without splits of their own (instant-ngp,
    LLFF, COLMAP, a Blender scene with only ``transforms_train.json``) list every usable image under
    ``train`` unless ``holdout_every`` > 0. For those, ``training_holdout`` tells how ``ngptune
    train`` splits them by default (every 8th frame held out for evaluation). ``size_rule`` says
    the size the images are loaded at and which rule chose it.

    Raises:
        SceneError: for an unreadable scene.
    """
    from trainer.data.images import load_pixel_table, pixel_table_nbytes

    with warnings.catch_warnings():  # skipped frames are part of the description ("skipped")
        warnings.simplefilter("ignore")
        scene = load_scene(path, downscale=downscale, holdout_every=holdout_every, **scene_options)
    all_frames = [f for frames in scene.splits.values() for f in frames]
    sizes = Counter(f"{f.intrinsics.width}x{f.intrinsics.height}" for f in all_frames)
    first = all_frames[0].intrinsics if all_frames else None

    def span(values: list[float]) -> list[float]:
        return [round(min(values), 3), round(max(values), 3)] if values else []

    info: dict[str, Any] = {
        "format": scene.format,
        "root": str(scene.root),
        "splits": scene.split_counts,
        "width": first.width if first else None,
        "height": first.height if first else None,
        "image_sizes": dict(sizes),
        "intrinsics": {
            "fx": span([f.intrinsics.fx for f in all_frames]),
            "fy": span([f.intrinsics.fy for f in all_frames]),
            "cx": span([f.intrinsics.cx for f in all_frames]),
            "cy": span([f.intrinsics.cy for f in all_frames]),
            "distorted_frames": sum(f.intrinsics.has_distortion for f in all_frames),
        },
        "aabb_scale": scene.aabb_scale,
        "aabb": scene.aabb.tolist(),
        "box_source": scene.box_source,
        "ignored_formats": list(scene.ignored_formats),
        "white_background": scene.white_background,
        "downscale": scene.downscale,
        "skipped": [{"frame": s.frame, "reason": s.reason} for s in scene.skipped],
        "notes": list(scene.notes),
        "size_rule": scene.size_rule,
        "pixel_memory_bytes": int(pixel_table_nbytes(all_frames, downscale=scene.downscale)),
    }
    training_frames = scene.frames("train")
    if not holdout_every:  # how training splits a scene without held-out frames of its own
        every = SceneOptions().holdout_every
        with warnings.catch_warnings():  # the skipped frames were reported by the first load
            warnings.simplefilter("ignore")
            held = load_scene(path, downscale=downscale, holdout_every=every, **scene_options)
        if held.held_out_every:  # no split of its own (a train-only Blender scene too)
            info["training_holdout"] = {"every": every, "splits": held.split_counts}
            training_frames = held.frames("train")
    capture = classify_frames(training_frames)
    info["capture"] = capture.as_dict()
    info["scene_model"] = MODEL_OF_KIND[capture.kind]
    box, side = field_box(scene.aabb_scale, info["scene_model"])  # the box the field spans in that model
    footprint = footprint_resolution(training_frames, box)
    info["finest_resolution"] = {
        "footprint": None if footprint is None else round(footprint, 1),
        "default": EncodingConfig().finest_resolution(side, footprint),
    }
    unbounded = info["scene_model"] == "unbounded"
    info["hash_grid"] = {  # the defaults' F and log2 T for that scene model
        "n_features_per_level": EncodingConfig().resolved_features_per_level(unbounded),
        "log2_hashmap_size": EncodingConfig().resolved_log2_hashmap_size(unbounded),
    }
    import torch

    preset = default_config_path(None, runs_on_cpu(None, torch.cuda.device_count()))
    if preset is not None:  # what train reads here instead of the defaults described above
        info["cpu_preset"] = str(preset)
    if timing:
        train = scene.frames("train")
        cache_dir = Path(tempfile.mkdtemp(prefix="ngptune-inspect-cache-"))
        try:
            t0 = time.perf_counter()
            load_pixel_table(train, downscale=scene.downscale, cache_dir=cache_dir)
            first_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            load_pixel_table(train, downscale=scene.downscale, cache_dir=cache_dir)
            second_s = time.perf_counter() - t0
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        info["timing"] = {
            "images": len(train),
            "first_load_s": first_s,
            "second_load_s": second_s,
            "speedup": round(first_s / max(second_s, 1e-9), 2),
        }
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.tools.inspect", description="Describe a scene as JSON.")
    add_inspect_arguments(parser)
    args = parse_command_line(parser, sys.argv[1:] if argv is None else argv)
    options = scene_format_overrides(args)
    try:
        info = describe_scene(args.scene, downscale=args.downscale, timing=args.timing, holdout_every=args.holdout_every,
                              format=options.get("data.format"),
                              camera_convention=options.get("data.camera_convention", "opengl"),
                              aabb_scale=options.get("data.aabb_scale"))
    except TrainerError as exc:
        print_error(exc)
        return 2
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
