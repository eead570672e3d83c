"""``ngptune inspect``: a scene described without training on it. The trainer loads the scene
(``python -m trainer.tools.inspect``, one JSON object: :func:`trainer.tools.inspect.describe_scene`'s
keys); this module shows that object as tables."""

from __future__ import annotations

from typing import Any


def _span_text(span: list[float]) -> str:
    """``[lo, hi]`` → ``"lo"`` when every frame agrees, else ``"lo–hi (min–max over frames)"``."""
    if not span:
        return "–"
    lo, hi = span
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g} (min–max over frames)"


def format_description(info: dict[str, Any]) -> None:
    """Print the scene description (``python -m trainer.tools.inspect``'s JSON object) as rich tables."""
    from ngptune.console import make_console
    from rich.table import Table

    console = make_console()
    table = Table(title=f"scene {info['root']}", show_header=False)
    ignored = info["ignored_formats"]
    table.add_row("format", info["format"] + (f" (also found, ignored: {', '.join(ignored)}; --format picks)" if ignored else ""))
    table.add_row("images per split", ", ".join(f"{k}: {v}" for k, v in info["splits"].items()))
    if "training_holdout" in info:
        hold = info["training_holdout"]
        table.add_row(
            "training split (default)",
            f"every {hold['every']}th frame held out: " + ", ".join(f"{k}: {v}" for k, v in hold["splits"].items()),
        )
    table.add_row("image sizes", ", ".join(f"{k} ×{v}" for k, v in info["image_sizes"].items()))
    intr = info["intrinsics"]
    table.add_row("focal fx / fy (px)", f"{_span_text(intr['fx'])} / {_span_text(intr['fy'])}")
    table.add_row("principal point cx / cy (px)", f"{_span_text(intr['cx'])} / {_span_text(intr['cy'])}")
    table.add_row("distorted frames", str(intr["distorted_frames"]))
    box_how = {"file": "the scene's own or the format's default", "data": "derived from the data (see notes)",
               "override": "--aabb-scale"}[info["box_source"]]
    table.add_row("aabb_scale", f"{info['aabb_scale']} ({box_how})")
    table.add_row("downscale (at decode)", str(info["downscale"]))
    if info.get("size_rule"):
        table.add_row("size rule", info["size_rule"])
    table.add_row("scene box (unit-cube world)", f"{info['aabb'][0]} → {info['aabb'][1]}")
    capture = info["capture"]
    table.add_row("capture", f"{capture['kind']} ({capture['reason']})")
    table.add_row("scene model (auto)", f"{info['scene_model']} (training.scene_model overrides: box or unbounded)")
    finest = info["finest_resolution"]
    how = ("instant-ngp's 2048 · aabb_scale: no view to measure" if finest["footprint"] is None else
           f"views' pixels span cells at {finest['footprint']:g}, rounded up to a power of two")
    table.add_row("finest hash-grid level", f"{finest['default']} ({how}; encoding.max_resolution overrides)")
    table.add_row("pixel memory", f"{info['pixel_memory_bytes'] / 2**20:.1f} MiB (all splits, at the chosen resolution)")
    table.add_row("skipped frames", str(len(info["skipped"])))
    for note in info["notes"]:
        table.add_row("note", note)
    if "timing" in info:
        tm = info["timing"]
        table.add_row(
            "decode timing",
            f"{tm['images']} images: first load {tm['first_load_s']:.3f} s, "
            f"second (disk cache) {tm['second_load_s']:.3f} s, {tm['speedup']:.1f}× faster",
        )
    console.print(table)
    if info["skipped"]:
        skipped = Table(title="skipped frames")
        skipped.add_column("frame")
        skipped.add_column("reason")
        for item in info["skipped"]:
            skipped.add_row(item["frame"], item["reason"])
        console.print(skipped)
