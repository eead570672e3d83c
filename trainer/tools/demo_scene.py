"""``python -m trainer.tools.demo_scene [OUT] [--resolution N] [--frames N]``: write the built-in
analytic demo scene (Blender format) into OUT, or N time steps of the moving scene as OUT/0000,
OUT/0001, ... (``--frames``); without OUT, the cached demo scene the trainer trains on by default
(:func:`trainer.data.demo.demo_scene_path`, written once). Prints each folder written, one a line;
bad input is one ``error: `` line, exit 2."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from trainer.contract import TrainerError, add_demo_scene_arguments, parse_command_line, print_error

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    from trainer.data.demo import demo_scene_path, write_demo_scene, write_demo_sequence

    parser = argparse.ArgumentParser(prog="python -m trainer.tools.demo_scene", description="Write the demo scene.")
    add_demo_scene_arguments(parser, out_dir_required=False)
    args = parse_command_line(parser, sys.argv[1:] if argv is None else argv)
    try:
        if args.out_dir is None:
            if args.frames is not None:
                parser.error("--frames: needs OUT, the folder of the sequence")
            paths = [demo_scene_path()]
        elif args.frames is not None:
            paths = list(write_demo_sequence(args.out_dir, args.frames, resolution=args.resolution))
        else:
            paths = [write_demo_scene(args.out_dir, resolution=args.resolution)]
    except TrainerError as exc:
        print_error(exc)
        return 2
    for path in paths:
        print(path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
