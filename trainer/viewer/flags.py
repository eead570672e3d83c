"""The ``--view`` flags of training (``ngptune train --view``, ``python -m trainer --view``); no
viser or torch import, so a parser builds fast."""

from __future__ import annotations

import argparse

__all__ = ["add_live_view_arguments"]


def add_live_view_arguments(parser: argparse.ArgumentParser) -> None:
    """``--view``, ``--view-host``, ``--view-port``."""
    parser.add_argument("--view", action="store_true",
                        help="serve a web viewer of the model as it trains (one process, or rank 0); the first lines "
                             "give its address")
    parser.add_argument("--view-host", default="127.0.0.1",
                        help="--view: address to listen on (default 127.0.0.1, this machine only)")
    parser.add_argument("--view-port", type=int, default=0, help="--view: port to listen on (default: a free port)")
