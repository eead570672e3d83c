"""The ``ngptune`` console script.

Sub-commands that run the trainer's own programs as processes (:mod:`ngptune.processes`, flags
and command lines from :mod:`trainer.contract`): ``inspect`` (describe a scene), ``demo-scene``
(write the built-in demo scene), ``train`` (``python -m trainer``: one process, or
``--nproc-per-node N`` ranks through the elastic launcher), ``demo`` (a short single-process
training run on the built-in demo scene), ``render`` and ``export`` (``python -m
trainer.inference``), ``view`` (``python -m trainer.viewer``); and the commands of
:data:`COMMAND_MODULES` (``profile``, ``monitor``, ``sweep``, ``train-many``, ``bench-comm``,
``prepare``, ``dashboard``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from ngptune.errors import USER_ERRORS
from trainer.contract import (
    add_demo_scene_arguments,
    add_export_arguments,
    add_inspect_arguments,
    add_render_arguments,
    EXPORT_HELP,
    RENDER_HELP,
    VIEW_HELP,
    add_view_arguments,
    resume_flags,
    add_trainer_arguments,
    inference_argv,
    parse_command_line,
    pipe_safe_stdout,
    plain_warning_format,
    print_error,
    tool_argv,
    trainer_argv,
    viewer_argv,
)

PACKAGE_ROOT = Path(__file__).resolve().parent


def _run(argv: list[str]) -> int:
    from ngptune.processes import run_foreground

    return run_foreground(argv).returncode


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ngptune.inspect import format_description
    from ngptune.processes import json_line, run_foreground

    result = run_foreground(tool_argv("inspect", args.tool_argv), capture_stdout=True)
    info = json_line(result.stdout)
    if result.returncode != 0 or info is None:
        return result.returncode or 2
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        format_description(info)
    return 0


def _cmd_demo_scene(args: argparse.Namespace) -> int:
    return _run(tool_argv("demo_scene", args.tool_argv))


def _train(argv: list[str], out: Path | None, nproc_per_node: int | None) -> int:
    """Run the trainer's ``argv``; when a signal the driver did not pass on killed it (SIGKILL),
    say so in one ``error:`` line and mark its run failed (:mod:`ngptune.killed_run`)."""
    import time

    from ngptune.killed_run import find_run_folder, killed_line
    from ngptune.processes import run_foreground

    started = time.time()
    result = run_foreground(argv)
    if result.killed_by is not None and result.killed_by not in result.signals:
        run = find_run_folder(out, result.pid, started)
        print_error(killed_line(result.pid, result.killed_by, run, nproc_per_node, resume_flags(argv)))
    return result.returncode


def _cmd_train(args: argparse.Namespace) -> int:
    """``ngptune train``: ``python -m trainer`` with the same flags, as a process."""
    return _train(trainer_argv(extra=args.tool_argv), args.out, args.nproc_per_node)


def _cmd_demo(args: argparse.Namespace) -> int:
    """A short training run of the demo scene with the CPU-friendly preset (a smoke test of the
    trainer; the README's main job is ``ngptune sweep``)."""
    preset = PACKAGE_ROOT.parent / "configs" / "small.json"
    return _train(trainer_argv(n_steps=args.n_steps, out=args.out, config=preset if preset.is_file() else None,
                               quiet=args.quiet), args.out, None)


def _cmd_inference(args: argparse.Namespace) -> int:
    """``ngptune render`` / ``export``: ``python -m trainer.inference`` with the same flags, as a process."""
    return _run(inference_argv([args.command, *args.tool_argv]))


def _cmd_view(args: argparse.Namespace) -> int:
    """``ngptune view``: ``python -m trainer.viewer`` with the same flags, as a process (Ctrl-C
    reaches it once; it stops with one line)."""
    return _run(viewer_argv(args.tool_argv))


# Modules that add their own sub-command through ``register(subparsers)``.
COMMAND_MODULES = (
    "ngptune.profile_command",  # ngptune profile
    "ngptune.monitor",  # ngptune monitor
    "ngptune.tuning.command",  # ngptune sweep
    "ngptune.train_many_command",  # ngptune train-many
    "ngptune.commbench",  # ngptune bench-comm
    "ngptune.prepare.command",  # ngptune prepare
    "ngptune.dashboard",  # ngptune dashboard
)


def package_version() -> str:
    """The installed ``ngptune`` distribution's version (``importlib.metadata``), or the
    package's ``__version__`` when it runs from a checkout that is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ngptune")
    except PackageNotFoundError:
        from ngptune import __version__

        return __version__


def _register(module_name: str, sub: argparse._SubParsersAction) -> None:
    import importlib

    importlib.import_module(module_name).register(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngptune", description="Train, inspect, profile and autotune instant-NGP NeRFs.")
    parser.add_argument("--version", action="version", version=f"ngptune {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="describe a scene: format, splits, sizes, intrinsics, box, skipped frames")
    add_inspect_arguments(p)
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("demo-scene", help="write the built-in analytic demo scene (Blender format)")
    add_demo_scene_arguments(p)
    p.set_defaults(func=_cmd_demo_scene)

    p = sub.add_parser("train", help="train an instant-NGP NeRF (one process, or --nproc-per-node ranks); "
                                     "the same as python -m trainer")
    add_trainer_arguments(p)
    p.set_defaults(func=_cmd_train)

    for module_name in COMMAND_MODULES:
        _register(module_name, sub)

    p = sub.add_parser("render", help=RENDER_HELP)
    add_render_arguments(p)
    p.set_defaults(func=_cmd_inference)
    p = sub.add_parser("export", help=EXPORT_HELP)
    add_export_arguments(p)
    p.set_defaults(func=_cmd_inference)
    p = sub.add_parser("view", help=VIEW_HELP)
    add_view_arguments(p)
    p.set_defaults(func=_cmd_view)

    p = sub.add_parser("demo", help="a short single-process training run on the built-in demo scene "
                                    "(the README's main job is `ngptune sweep`)")
    p.add_argument("--n-steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<time>-<scene>)")
    p.add_argument("--quiet", action="store_true", help="plain log lines, no progress bar")
    p.set_defaults(func=_cmd_demo)
    return parser


PASS_THROUGH = ("inspect", "demo-scene", "train", "render", "export", "view")
"""Sub-commands whose flags, as given, are the trainer program's (``args.tool_argv``)."""


def main(argv: Sequence[str] | None = None) -> int:
    """``ngptune``: parse ``argv`` (default ``sys.argv[1:]``) and run its command; returns the exit
    status (2 after an ``error:`` line; 130 after a Ctrl-C that no command took, e.g. while the
    flags are read, with one line)."""
    pipe_safe_stdout()  # piped into `head`: the command goes on without its output
    try:
        plain_warning_format(PACKAGE_ROOT)
        raw = list(sys.argv[1:] if argv is None else argv)
        args = parse_command_line(build_parser(), raw)
        if args.command in PASS_THROUGH:
            args.tool_argv = raw[raw.index(args.command) + 1 :]
        return int(args.func(args))
    except USER_ERRORS as exc:
        print_error(exc)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
