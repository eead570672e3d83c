"""The ``ngptune`` console script.

Sub-commands: ``inspect`` (describe a scene), ``demo-scene`` (write the built-in demo scene),
``train`` (train one process), ``demo`` (the main job on the built-in demo scene).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from trainer.errors import ConfigError, NgptuneError


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ngptune.inspect import describe_scene, format_description

    info = describe_scene(args.scene, downscale=args.downscale, timing=args.timing, holdout_every=args.holdout_every)
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


LAUNCH_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--max-restarts")


def worker_argv(train_argv: list[str]) -> list[str]:
    """The training flags of ``ngptune train ...`` without the launcher flags (each takes one
    value, as ``--flag V`` or ``--flag=V``), for the workers' ``python -m trainer``."""
    out, skip = [], False
    for item in train_argv:
        if skip:
            skip = False
        elif item in LAUNCH_FLAGS:
            skip = True
        elif not item.startswith(tuple(f + "=" for f in LAUNCH_FLAGS)):
            out.append(item)
    return out


def _cmd_train(args: argparse.Namespace) -> int:
    """``ngptune train``: one process, or ``--nproc-per-node N`` workers through the elastic
    launcher (:func:`trainer.parallel.launch.launch_workers`) running ``python -m trainer`` with
    the same training flags and one shared run directory."""
    from trainer.cli import check_before_start, default_run_dir, resolve_config, scene_path_of, train_command

    if args.nproc_per_node is None:
        return train_command(args)
    from trainer.parallel.launch import launch_workers
    from trainer.parallel.trainer import validate_parallel_config

    if args.nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node: expected an integer >= 1, got {args.nproc_per_node}")
    from ngptune.commbench import check_run_emulation
    from trainer.rundir import RunDir

    from trainer.train.loop import check_trainable

    cfg = resolve_config(args)
    validate_parallel_config(cfg, args.nproc_per_node * args.nnodes)  # before any worker starts
    check_trainable(cfg)
    check_run_emulation(cfg)
    if args.node_rank == 0:  # other nodes' agents join a run whose folder node 0 has made
        check_before_start(cfg, args.out, args.resume)
    argv = worker_argv(args.train_argv)
    out = args.out
    if out is None:
        out = default_run_dir(scene_path_of(cfg))
        argv += ["--out", str(out)]
    if not cfg.training.quiet:
        print(f"{args.nproc_per_node * args.nnodes} ranks; their progress goes to {RunDir(out).logs_dir}/rank<R>.log",
              flush=True)  # stdout: stderr is for errors (one line each)
    try:
        launch_workers(
            ["-m", "trainer", *argv],
            args.nproc_per_node,
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint or _config_endpoint(cfg, args.nnodes),
            max_restarts=args.max_restarts,
            master_port=cfg.distributed.master_port,
            timeout_s=cfg.distributed.timeout_s,
            run_dir=Path(out),
        )
    except KeyboardInterrupt:
        from trainer.parallel.checkpoint import latest_checkpoint

        newest = latest_checkpoint(Path(out))
        resume = f"; continue from {newest} with --resume {out}" if newest is not None else ""
        print(f"interrupted: the ranks were stopped; logs in {RunDir(out).logs_dir}{resume}", file=sys.stderr)
        return 130
    if args.node_rank == 0:
        _echo_warnings(RunDir(out).log_path(0))
        summary = _run_summary(RunDir(out).read_status() or {})
        if summary:
            print(summary, flush=True)  # before the JSON line, which stays last
    print(json.dumps({"state": "completed", "run_dir": str(out), "nproc_per_node": args.nproc_per_node}))
    return 0


def _echo_warnings(log_path: Path, limit: int = 5) -> None:
    """Repeat on stderr the ``warning:`` lines rank 0 wrote to its log (e.g. a resume with other
    settings), which the terminal of a distributed run would otherwise never show."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    found = list(dict.fromkeys(line.strip() for line in lines if line.strip().startswith("warning: ")))
    for line in found[:limit]:
        print(f"{line} (rank 0)", file=sys.stderr, flush=True)


def _run_summary(status: dict[str, Any]) -> str:
    """One line from a finished run's status.json: steps, training time, throughput, evaluation."""
    parts = []
    if isinstance(status.get("step"), int):
        took = status.get("train_time_s")
        parts.append(f"trained to step {status['step']}"
                     + (f" in {took:.1f} s" if isinstance(took, (int, float)) else ""))
    if isinstance(status.get("throughput_samples_per_s"), (int, float)):
        parts.append(f"{status['throughput_samples_per_s']:.3g} samples/s")
    if isinstance(status.get("eval_psnr_db"), (int, float)):
        parts.append(f"evaluation on {status.get('eval_split', 'test')}: PSNR {status['eval_psnr_db']:.2f} dB"
                     + (f", SSIM {status['eval_ssim']:.4f}" if isinstance(status.get("eval_ssim"), (int, float)) else ""))
    return ", ".join(parts)


def _config_endpoint(cfg: Any, nnodes: int) -> str | None:
    """``distributed.master_addr:master_port`` as the rendezvous of a multi-node job whose config
    fixes the port (one node picks a free local port itself)."""
    d = cfg.distributed
    return f"{d.master_addr}:{d.master_port}" if nnodes > 1 and d.master_port else None


def _cmd_demo(args: argparse.Namespace) -> int:
    """A short training run of the demo scene with the CPU-friendly preset (a smoke test of the
    trainer; the README's main job is ``ngptune sweep``)."""
    from trainer.cli import build_parser, train_command

    preset = Path(__file__).resolve().parent.parent / "configs" / "small.json"
    argv = ["--n-steps", str(args.n_steps)] + (["--out", str(args.out)] if args.out is not None else [])
    if preset.is_file():
        argv += ["--config", str(preset)]
    if args.quiet:
        argv.append("--quiet")
    return train_command(build_parser("ngptune demo").parse_args(argv))


# Modules that add their own sub-command through ``register(subparsers)``.
COMMAND_MODULES = (
    "ngptune.profiling.command",  # ngptune profile
    "ngptune.monitor",  # ngptune monitor
    "ngptune.tuning.command",  # ngptune sweep
    "ngptune.commbench",  # ngptune bench-comm
)


def _register(module_name: str, sub: argparse._SubParsersAction) -> None:
    import importlib

    importlib.import_module(module_name).register(sub)


def build_parser() -> argparse.ArgumentParser:
    from trainer.cli import add_train_arguments, positive_int

    parser = argparse.ArgumentParser(prog="ngptune", description="Train, inspect, profile and autotune instant-NGP NeRFs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="describe a scene: format, splits, sizes, intrinsics, box, skipped frames")
    p.add_argument("scene", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--downscale", type=positive_int, default=1, help="describe the images as shrunk by this factor (as train --downscale)")
    p.add_argument("--holdout-every", type=int, default=0, help="for scenes without splits: hold out every N-th frame as test (0: list all as train)")
    p.add_argument("--timing", action="store_true", help="decode the training images twice (cold, then from the disk cache) and print both times")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("demo-scene", help="write the built-in analytic demo scene (Blender format)")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--resolution", type=positive_int, default=64, help="width and height of the rendered views in pixels (default 64)")
    p.set_defaults(func=_cmd_demo_scene)

    p = sub.add_parser("train", help="train an instant-NGP NeRF (one process, or --nproc-per-node ranks)")
    add_train_arguments(p)
    p.add_argument("--nproc-per-node", type=int, default=None, help="start N ranks on this node (elastic launcher)")
    p.add_argument("--nnodes", type=positive_int, default=1, help="nodes in the job")
    p.add_argument("--node-rank", type=int, default=0, help="this node's index (node 0 hosts the rendezvous)")
    p.add_argument("--rdzv-endpoint", default=None,
                   help="HOST:PORT of node 0's rendezvous store (several nodes; default: the config's "
                        "distributed.master_addr:master_port when the port is set)")
    p.add_argument("--max-restarts", type=int, default=0, help="restart the worker group up to K times; workers resume from the newest checkpoint")
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
    from trainer.cli import plain_warning_format

    plain_warning_format()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    if args.command == "train":
        args.train_argv = raw[raw.index("train") + 1 :]
    try:
        return int(args.func(args))
    except NgptuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
