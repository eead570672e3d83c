"""``ngptune view MODEL``: a web viewer of a trained model.

The viewer is the trainer's own process, ``python -m trainer.viewer`` (it loads the model and
renders it with the kernels of ``ngptune render``); this command starts it with every argument as
given, so its flags, ``--help`` and error lines are the trainer's. Ctrl-C reaches both processes
from the terminal; the viewer says in one line that it stopped, and its exit status is this
command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

__all__ = ["register", "view_command"]

# The environment variable that names the command in the viewer's usage lines (and tells it that
# a launcher started it: it stops when that launcher dies); see trainer/viewer/cli.py.
VIEWER_PROG_ENV = "NGPTUNE_VIEW_PROG"
FORWARD_AFTER_S = 1.0  # Ctrl-C sent to this process alone reaches the viewer after this long
STOP_WAIT_S = 15.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``view`` to a parent parser's sub-commands (its arguments pass through unparsed)."""
    p = subparsers.add_parser(
        "view", help="a web viewer of a trained model (viser); ngptune view --help lists its flags",
        add_help=False, prefix_chars="\x00")  # no option of its own: every argument is the viewer's
    p.add_argument("viewer_args", nargs="*")
    p.set_defaults(func=view_command)


def view_command(args: argparse.Namespace) -> int:
    """Run ``python -m trainer.viewer`` with ``args.viewer_args``; returns its exit status."""
    env = {**os.environ, VIEWER_PROG_ENV: "ngptune view"}
    viewer = subprocess.Popen([sys.executable, "-m", "trainer.viewer", *args.viewer_args], env=env)
    try:
        return viewer.wait()
    except KeyboardInterrupt:
        try:  # a terminal's Ctrl-C reached the viewer too; a signal sent here alone is passed on
            return viewer.wait(timeout=FORWARD_AFTER_S)
        except subprocess.TimeoutExpired:
            viewer.send_signal(signal.SIGINT)
        try:
            return viewer.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            viewer.kill()
            return viewer.wait()
