"""The ``ngptune`` console script.

Sub-commands: ``inspect`` (describe a scene), ``demo-scene`` (write the built-in demo scene),
``train`` (the trainer's own command line, ``python -m trainer``: one process, or ``--nproc-per-node
N`` ranks through the elastic launcher), ``demo`` (a short single-process training run on the
built-in demo scene), and the commands of :data:`COMMAND_MODULES` (``profile``, ``monitor``,
``sweep``, ``bench-comm``, ``render``/``export`` from :mod:`trainer.inference.cli`, ``view`` and
``dashboard``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from trainer.errors import NgptuneError
from trainer.runstatus import plain_warning_format, print_error


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ngptune.inspect import describe_scene, format_description

    info = describe_scene(args.scene, downscale=args.downscale, timing=args.timing, holdout_every=args.holdout_every,
                          format=args.scene_format, camera_convention=args.camera_convention or "opengl",
                          aabb_scale=args.aabb_scale)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        format_description(info)
    return 0


def _cmd_demo_scene(args: argparse.Namespace) -> int:
    from trainer.data.demo import write_demo_scene

    if args.frames is not None:
        from trainer.data.demo import write_demo_sequence

        for path in write_demo_sequence(Path(args.out_dir), args.frames, resolution=args.resolution):
            print(path)
        return 0
    path = write_demo_scene(Path(args.out_dir), resolution=args.resolution)
    print(path)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    """``ngptune train``: an alias of ``python -m trainer`` (:func:`trainer.launch_cli.run_command`)."""
    from trainer.launch_cli import run_command

    return run_command(args, args.train_argv)


def _cmd_demo(args: argparse.Namespace) -> int:
    """A short training run of the demo scene with the CPU-friendly preset (a smoke test of the
    trainer; the README's main job is ``ngptune sweep``)."""
    from trainer.launch_cli import build_parser, run_command

    preset = Path(__file__).resolve().parent.parent / "configs" / "small.json"
    argv = ["--n-steps", str(args.n_steps)] + (["--out", str(args.out)] if args.out is not None else [])
    if preset.is_file():
        argv += ["--config", str(preset)]
    if args.quiet:
        argv.append("--quiet")
    return run_command(build_parser("ngptune demo").parse_args(argv), argv)


# Modules that add their own sub-command through ``register(subparsers)``.
COMMAND_MODULES = (
    "ngptune.profiling.command",  # ngptune profile
    "ngptune.monitor",  # ngptune monitor
    "ngptune.tuning.command",  # ngptune sweep
    "ngptune.train_many_command",  # ngptune train-many
    "ngptune.commbench",  # ngptune bench-comm
    "trainer.inference.cli",  # ngptune render, ngptune export
    "ngptune.view",  # ngptune view (python -m trainer.viewer)
    "ngptune.dashboard",  # ngptune dashboard (optuna-dashboard)
)


def _register(module_name: str, sub: argparse._SubParsersAction) -> None:
    import importlib

    importlib.import_module(module_name).register(sub)


def build_parser() -> argparse.ArgumentParser:
    from trainer.cli import add_scene_format_arguments, positive_int
    from trainer.launch_cli import add_arguments

    parser = argparse.ArgumentParser(prog="ngptune", description="Train, inspect, profile and autotune instant-NGP NeRFs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="describe a scene: format, splits, sizes, intrinsics, box, skipped frames")
    p.add_argument("scene", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--downscale", type=positive_int, default=None,
                   help="describe the images as shrunk by this factor (as train --downscale; default: the automatic rule)")
    add_scene_format_arguments(p)
    p.add_argument("--holdout-every", type=int, default=0, help="for scenes without splits: hold out every N-th frame as test (0: list all as train)")
    p.add_argument("--timing", action="store_true", help="decode the training images twice (cold, then from the disk cache) and print both times")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("demo-scene", help="write the built-in analytic demo scene (Blender format)")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--resolution", type=positive_int, default=64, help="width and height of the rendered views in pixels (default 64)")
    p.add_argument("--frames", type=positive_int, default=None, metavar="N",
                   help="write N time steps of the moving scene as OUT/0000, OUT/0001, ... (a sequence for train-many)")
    p.set_defaults(func=_cmd_demo_scene)

    p = sub.add_parser("train", help="train an instant-NGP NeRF (one process, or --nproc-per-node ranks); "
                                     "the same as python -m trainer")
    add_arguments(p)
    p.set_defaults(func=_cmd_train)

    for module_name in COMMAND_MODULES:
        _register(module_name, sub)

    p = sub.add_parser("demo", help="a short single-process training run on the built-in demo scene "
                                    "(the README's main job is `ngptune sweep`)")
    p.add_argument("--n-steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<time>-<scene>)")
    p.add_argument("--quiet", action="store_true", help="plain log lines, no progress bar")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    plain_warning_format()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    if args.command == "train":
        args.train_argv = raw[raw.index("train") + 1 :]
    if args.command == "render":  # --nproc-per-node hands these to the ranks
        args.render_argv = raw[raw.index("render") + 1 :]
    try:
        return int(args.func(args))
    except NgptuneError as exc:
        print_error(exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
