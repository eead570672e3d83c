"""The ``ngptune`` console script.

Sub-commands: ``inspect`` (describe a scene), ``demo-scene`` (write the built-in demo scene),
``train`` (train one process), ``demo`` (the main job on the built-in demo scene).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from trainer.errors import NgptuneError


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ngptune.inspect import describe_scene, format_description

    info = describe_scene(args.scene, downscale=args.downscale, timing=args.timing)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        format_description(info)
    return 0


def _cmd_demo_scene(args: argparse.Namespace) -> int:
    from trainer.data.demo import write_demo_scene

    path = write_demo_scene(Path(args.out_dir), resolution=args.resolution)
    print(path)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from trainer.cli import train_command

    return train_command(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    """The README's main job: train the demo scene briefly with the CPU-friendly preset."""
    from trainer.cli import build_parser, train_command

    preset = Path(__file__).resolve().parent.parent / "configs" / "small.json"
    argv = ["--n-steps", str(args.n_steps), "--out", str(args.out)]
    if preset.is_file():
        argv += ["--config", str(preset)]
    if args.quiet:
        argv.append("--quiet")
    return train_command(build_parser("ngptune demo").parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    from trainer.cli import add_train_arguments

    parser = argparse.ArgumentParser(prog="ngptune", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="describe a scene: format, splits, sizes, intrinsics, box, skipped frames")
    p.add_argument("scene", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--downscale", type=int, default=1)
    p.add_argument("--timing", action="store_true", help="decode the training images twice (cold, then from the disk cache) and print both times")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("demo-scene", help="write the built-in analytic demo scene (Blender format)")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--resolution", type=int, default=64)
    p.set_defaults(func=_cmd_demo_scene)

    p = sub.add_parser("train", help="train an instant-NGP NeRF")
    add_train_arguments(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("demo", help="the main job on the built-in demo scene")
    p.add_argument("--n-steps", type=int, default=300)
    p.add_argument("--out", type=Path, default=Path("runs/demo"))
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except NgptuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
