"""The viewer's command line (``python -m trainer.viewer``, ``ngptune view``) and the ``--view``
flags of training (``ngptune train --view``); no viser or torch import, so ``--help`` is fast."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["DEFAULT_MAX_RESOLUTION", "RENDER_MODES", "add_live_view_arguments", "build_parser"]

RENDER_MODES = ("rgb", "depth", "opacity")
"""What a frame shows: the colour, the expected depth (turbo colours, near red, far blue), or the
accumulated opacity (white = opaque)."""
DEFAULT_MAX_RESOLUTION = 1920  # longest side of a resting frame, pixels


def add_live_view_arguments(parser: argparse.ArgumentParser) -> None:
    """``--view``, ``--view-host``, ``--view-port``."""
    parser.add_argument("--view", action="store_true",
                        help="serve a web viewer of the model as it trains (one process, or rank 0); the first lines "
                             "give its address")
    parser.add_argument("--view-host", default="127.0.0.1",
                        help="--view: address to listen on (default 127.0.0.1, this machine only)")
    parser.add_argument("--view-port", type=int, default=0, help="--view: port to listen on (default: a free port)")


def build_parser(prog: str = "python -m trainer.viewer") -> argparse.ArgumentParser:
    """The viewer's parser (``prog``: the command name its usage lines show)."""
    p = argparse.ArgumentParser(
        prog=prog, description="Serve a web viewer (viser) of a trained model: rendered from the browser's camera, "
                               "the training cameras, the scene box and the occupancy grid.")
    p.add_argument("model", type=Path, help="run folder, snapshot file or checkpoint folder")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port, printed)")
    p.add_argument("--max-resolution", type=int, default=DEFAULT_MAX_RESOLUTION,
                   help=f"longest side of a resting frame in pixels (default {DEFAULT_MAX_RESOLUTION}; the page can "
                        "lower it)")
    p.add_argument("--spp", type=int, default=1, help="jittered renders averaged per pixel of a resting frame (default 1)")
    p.add_argument("--mode", choices=RENDER_MODES, default="rgb", help="what the frames show first (default rgb)")
    p.add_argument("--background", default=None, help="white | black | #RRGGBB (default: the scene's evaluation background)")
    p.add_argument("--device", default=None,
                   help="cpu | cuda | cuda:N (default: the run's training.device; the CPU, with a note, when that "
                        "is CUDA and this machine has none)")
    p.add_argument("--scene", type=Path, default=None, help="the scene, when it moved since training (default: the run's)")
    return p
