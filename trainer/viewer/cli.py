"""``python -m trainer.viewer MODEL`` (``ngptune view MODEL``): a web viewer of a trained model.

The flags are the contract's (:func:`trainer.contract.commandline.add_view_arguments`). Every flag
is checked before the model loads; bad input ends with one ``error:`` statement naming the flag,
file or key, exit status 2, written as render and export write theirs (lines under 80 columns,
remedies each on a line of its own: :func:`trainer.contract.runstatus.fitted_error_lines`). The first line on stdout gives the address. Ctrl-C stops the server with one
line, exit status 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Sequence

from trainer.contract.commandline import add_view_arguments
from trainer.contract.errors import ConfigError, TrainerError
from trainer.contract.runstatus import fitted_error_lines
from trainer.contract.textlines import fit_lines
from trainer.contract.usage import parse_command_line

__all__ = ["build_parser", "main"]

INTERRUPTED_EXIT = 130
STOP_WAIT_S = 10.0  # Ctrl-C waits this long for the band being rendered


def build_parser(prog: str = "python -m trainer.viewer") -> argparse.ArgumentParser:
    """The viewer's parser."""
    p = argparse.ArgumentParser(
        prog=prog, description="Serve a web viewer (viser) of a trained model: rendered from the browser's camera, "
                               "the training cameras, the scene box and the occupancy grid.")
    add_view_arguments(p)
    return p


def check_flags(args: argparse.Namespace) -> None:
    """Everything about the flags that can be refused before loading the model.

    Raises:
        ConfigError: one line naming the flag (a port in use included).
        SnapshotError: the model path does not exist.
    """
    from trainer.inference.cli import check_cpu_threads_flag, check_device_flag
    from trainer.inference.loading import check_model_path
    from trainer.inference.outputs import parse_background
    from trainer.viewer.server import check_port_free

    check_model_path(args.model)
    if args.max_resolution < 16:
        raise ConfigError(f"--max-resolution {args.max_resolution}: expected an integer >= 16 (pixels)")
    if not 1 <= args.spp <= 64:
        raise ConfigError(f"--spp {args.spp}: expected an integer in 1..64")
    if args.background is not None:
        parse_background(args.background)
    check_device_flag(args.device)
    check_cpu_threads_flag(args.cpu_threads)
    check_port_free(args.host, args.port)


def require_viser(flag: str) -> None:
    """Raises ConfigError naming ``flag`` when the viser package is not installed."""
    try:
        import viser  # noqa: F401
    except ImportError:
        raise ConfigError(f"{flag}: the web viewer needs the viser package; install it with "
                          "pip install 'ngptune[view]'") from None


def serve(args: argparse.Namespace) -> int:
    """Load the model, serve it until Ctrl-C. Returns the exit status."""
    from trainer.inference.cli import apply_threads
    from trainer.inference.loading import load_model
    from trainer.inference.outputs import parse_background
    from trainer.viewer.server import Viewer, ViewerSettings

    require_viser("view")
    check_flags(args)
    model = load_model(args.model, args.scene, args.device, cpu_fallback=True)
    where = apply_threads(args, model.trainer.cfg, model.device, 1)
    viewer = renderer = None
    stop = threading.Event()
    try:
        for note in model.notes:
            print(f"note: {note}", file=sys.stderr, flush=True)
        background = args.background or ("white" if model.scene.white_background else "black")
        settings = ViewerSettings(mode=args.mode, background=parse_background(background), spp=args.spp,
                                  max_resolution=args.max_resolution)
        title = (f"**{model.scene.root.name}** · step {model.step} · {model.device}  \n"
                 f"`{model.source}`")
        folder = args.model.parent if args.model.is_file() else args.model
        viewer = Viewer(model, settings, args.host, args.port, log=lambda line: print(line, flush=True), title=title,
                        save_dir=folder, save_hint=str(args.model))
        print("\n".join(fit_lines([f"viewer: {viewer.url} —", f"{model.scene.root.name}, step {model.step} from",
                                    f"{model.source},", f"{where};", "Ctrl-C stops it"])), flush=True)
        renderer = threading.Thread(target=viewer.serve_forever, args=(stop,), name="viewer-render", daemon=True)
        renderer.start()
        while renderer.is_alive():
            renderer.join(0.5)
        return 1  # the render thread ended by itself: its traceback is above
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
        stop.set()
        if viewer is not None:
            viewer.wake()
            viewer.close()
        if renderer is not None:
            renderer.join(STOP_WAIT_S)  # the band being rendered; torch must not be mid-kernel at exit
        print("viewer stopped", file=sys.stderr, flush=True)
        if renderer is not None and renderer.is_alive():
            os._exit(INTERRUPTED_EXIT)  # a band slower than STOP_WAIT_S: leave without waiting for it
        return INTERRUPTED_EXIT
    finally:
        model.close()


def main(argv: Sequence[str] | None = None) -> int:
    from trainer.contract.runstatus import plain_warning_format

    plain_warning_format()
    args = parse_command_line(build_parser(), sys.argv[1:] if argv is None else argv)
    try:
        return serve(args)
    except TrainerError as exc:  # as render and export say it (remedies on lines of their own)
        print("\n".join(fitted_error_lines(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the server started
        print("viewer stopped", file=sys.stderr, flush=True)
        return INTERRUPTED_EXIT
