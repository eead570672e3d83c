"""``ngptune inspect``: a scene described without training on it. The trainer loads the scene
(``python -m trainer.tools.inspect``, one JSON object: :func:`trainer.tools.inspect.describe_scene`'s
keys); this module shows that object as lines of keys and values that fit an 80-column terminal
(``--json`` prints the object itself)."""

from __future__ import annotations

import textwrap
from typing import Any

from trainer.contract import LINE_WIDTH


def _span_text(span: list[float]) -> str:
    """``[lo, hi]`` → ``"lo"`` when every frame agrees, else ``"lo–hi (min–max over frames)"``."""
    if not span:
        return "–"
    lo, hi = span
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g} (min–max over frames)"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


KEY_WIDTH = 28
"""Characters of the key column (the longest key, ``principal point cx / cy (px)``)."""


def key_value_lines(rows: list[tuple[str, str]], width: int = LINE_WIDTH) -> list[str]:
    """``rows`` of (key, value) as lines of at most ``width`` characters: two spaces, the key
    padded to :data:`KEY_WIDTH`, two spaces, the value wrapped at its spaces into lines that start
    under its first character (a word longer than the room, a path, is left whole)."""
    indent = " " * (2 + KEY_WIDTH + 2)
    lines: list[str] = []
    for key, value in rows:
        first = f"  {key:<{KEY_WIDTH}}  "
        wrapped = textwrap.wrap(value, width=width, initial_indent=first, subsequent_indent=indent,
                                break_long_words=False, break_on_hyphens=False)
        lines += wrapped or [first.rstrip()]
    return lines


def description_rows(info: dict[str, Any]) -> list[tuple[str, str]]:
    """The (key, value) rows of the scene description (``python -m trainer.tools.inspect``'s JSON
    object), the skipped frames excluded."""
    rows: list[tuple[str, str]] = []
    ignored = info["ignored_formats"]
    rows.append(("format", info["format"] + (f" (also found, ignored: {', '.join(ignored)}; --format picks)" if ignored else "")))
    rows.append(("images per split", ", ".join(f"{k}: {v}" for k, v in info["splits"].items())))
    if "training_holdout" in info:
        hold = info["training_holdout"]
        rows.append(("training split (default)",
                     f"every {hold['every']}th frame held out: " + ", ".join(f"{k}: {v}" for k, v in hold["splits"].items())))
    rows.append(("image sizes", ", ".join(f"{k} ×{v}" for k, v in info["image_sizes"].items())))
    intr = info["intrinsics"]
    rows.append(("focal fx / fy (px)", f"{_span_text(intr['fx'])} / {_span_text(intr['fy'])}"))
    rows.append(("principal point cx / cy (px)", f"{_span_text(intr['cx'])} / {_span_text(intr['cy'])}"))
    rows.append(("distorted frames", str(intr["distorted_frames"])))
    box_how = {"file": "the scene's own or the format's default", "data": "derived from the data (see notes)",
               "override": "--aabb-scale"}[info["box_source"]]
    rows.append(("aabb_scale", f"{info['aabb_scale']} ({box_how})"))
    rows.append(("downscale (at decode)", str(info["downscale"])))
    if info.get("size_rule"):
        rows.append(("size rule", info["size_rule"]))
    rows.append(("scene box (unit-cube world)", f"{info['aabb'][0]} → {info['aabb'][1]}"))
    capture = info["capture"]
    rows.append(("capture", f"{capture['kind']} ({capture['reason']})"))
    rows.append(("scene model (auto)", f"{info['scene_model']} (training.scene_model overrides: box or unbounded)"))
    finest = info["finest_resolution"]
    how = ("instant-ngp's 2048 · aabb_scale: no view to measure" if finest["footprint"] is None else
           f"a cell is one pixel wide at resolution {round(finest['footprint'])} across the box, "
           "rounded up to a power of two")
    rows.append(("finest hash-grid level", f"{finest['default']} ({how}; encoding.max_resolution overrides)"))
    grid = info.get("hash_grid")
    if grid:
        rows.append(("hash-grid features, table", f"F={grid['n_features_per_level']}, T=2^{grid['log2_hashmap_size']} "
                                                  f"(the {info['scene_model']} model's; encoding.n_features_per_level "
                                                  "and encoding.log2_hashmap_size override)"))
    if info.get("cpu_preset"):
        rows.append(("described with", f"the trainer's defaults; on this machine (no CUDA) train without --config "
                                        f"reads the CPU preset {info['cpu_preset']}, which sets its own image size "
                                        "and hash grid"))
    rows.append(("pixel memory", f"{info['pixel_memory_bytes'] / 2**20:.1f} MiB (all splits, at the chosen resolution)"))
    rows.append(("skipped frames", str(len(info["skipped"]))))
    rows += [("note", note) for note in info["notes"]]
    if "timing" in info:
        tm = info["timing"]
        rows.append(("decode timing", f"{tm['images']} images: first load {_seconds(tm['first_load_s'])}, "
                                      f"second (disk cache) {_seconds(tm['second_load_s'])}, {tm['speedup']:.1f}× faster"))
    return rows


def description_lines(info: dict[str, Any], width: int = LINE_WIDTH) -> list[str]:
    """The scene description as lines of at most ``width`` characters (a path longer than a line
    is left whole): ``scene ROOT``, its rows (:func:`key_value_lines`), then each skipped frame
    with its reason."""
    lines = [f"scene {info['root']}", *key_value_lines(description_rows(info), width)]
    if info["skipped"]:
        lines.append(f"skipped frames ({len(info['skipped'])}):")
        for item in info["skipped"]:
            lines += textwrap.wrap(f"{item['frame']}: {item['reason']}", width=width, initial_indent="  ",
                                   subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    return lines


def format_description(info: dict[str, Any]) -> None:
    """Print the scene description (``python -m trainer.tools.inspect``'s JSON object) in lines
    that fit an 80-column terminal (:func:`description_lines`)."""
    print("\n".join(description_lines(info)), flush=True)
