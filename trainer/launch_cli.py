"""The trainer's front door: ``python -m trainer`` (``ngptune train`` is an alias of it).

Without ``--nproc-per-node`` the process trains by itself (:func:`trainer.cli.train_command`: one
process, or one rank of a job that torchrun, srun or this launcher started). With
``--nproc-per-node N`` it starts N ranks on this node through the elastic launcher
(:func:`trainer.parallel.launch.launch_workers`), each running ``python -m trainer`` with the same
training flags less the launch flags (:func:`worker_argv`) and one shared run directory; several
nodes add ``--nnodes``, ``--node-rank`` and ``--rdzv-endpoint``, and ``--max-restarts K`` restarts
the group from its newest checkpoint. ``--check-host`` only checks what does not depend on the
settings (the scene exists, the socket interfaces the environment names exist) and starts nothing.

The launching process checks the config before any rank starts (parallel settings for the world
size, trainability, interconnect emulation, and on node 0 the scene and the ``--out`` folder)
without importing torch (one node without restarts: :mod:`trainer.parallel.local_launch`),
tells where the ranks' logs go, repeats rank 0's progress lines and restarts on stdout and its
``warning:`` lines on stderr while the ranks run (:mod:`trainer.parallel.rank_log`), and after the
job prints its summary lines from ``status.json`` (:func:`trainer.runstatus.summary_lines`) and, last, one JSON line
with the keys a one-process run ends with (rank 0's ``status.json``, :func:`trainer.runstatus.result_line`) and
``nproc_per_node``. Bad input or a failed rank is one
``error: `` line on stderr and exit status 2 (:mod:`trainer.contract.runstatus`); Ctrl-C stops the ranks,
names the checkpoint to resume from, and exits 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from trainer.cli import train_command
from trainer.run.checks import check_before_start
from trainer.run.settings import opening_line, resolve_config, scene_path_of
from trainer.contract.commandline import add_trainer_arguments, resume_flags, worker_argv
from trainer.contract.defaults import default_run_dir
from trainer.contract.errors import ConfigError, TrainerError
from trainer.parallel.net_env import check_socket_ifnames
from trainer.contract.rundir import RunDir
from trainer.contract.textlines import fit_lines
from trainer.contract.usage import parse_command_line
from trainer.contract.runstatus import (
    COMPLETED, FAILED, REASON_KEY, RUN_DIR_KEY, RUNNING, STATE_KEY, interrupted_fields, plain_warning_format,
    print_error, result_line, summary_lines,
)

__all__ = ["build_parser", "launch_command", "main", "run_command", "status_of_stopped_run"]


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The parser of ``python -m trainer``: training flags and launch flags
    (:func:`trainer.contract.commandline.add_trainer_arguments`)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Train an instant-NGP NeRF (one process, or --nproc-per-node ranks).")
    add_trainer_arguments(parser)
    return parser


def run_command(args: argparse.Namespace, train_argv: list[str]) -> int:
    """Train by itself, or launch ``--nproc-per-node`` ranks (:func:`launch_command`); returns the
    exit status. ``train_argv``: the command line ``args`` was parsed from.

    Raises:
        TrainerError: the launch was refused or failed (:func:`launch_command`).
    """
    if args.check_host:
        cfg = resolve_config(args)
        check_socket_ifnames(os.environ)
        check_before_start(cfg, None, None)
        print(f"host checked: scene {scene_path_of(cfg)}, socket interfaces", flush=True)
        return 0
    if args.nproc_per_node is None:
        return train_command(args)
    return launch_command(args, train_argv)


def launch_command(args: argparse.Namespace, train_argv: list[str]) -> int:
    """Start ``args.nproc_per_node`` ranks of ``python -m trainer`` with the training flags of
    ``train_argv`` (module docstring); returns the exit status (0, or 130 after Ctrl-C).

    Raises:
        ConfigError: ``--nproc-per-node`` below 1 or above the host's CPU cores (a CPU run) or
            visible GPUs (:func:`trainer.contract.world.check_ranks_per_node`), or a config the
            ranks would refuse.
        SceneError: the scene does not exist (node 0).
        LaunchError: the rendezvous failed; WorkersFailed: a rank failed (names it and its log).
    """
    from trainer.contract.backend import check_run_emulation
    from trainer.contract.defaults import runs_on_cpu
    from trainer.contract.threads import available_cores
    from trainer.contract.world import check_ranks_per_node, check_world_size
    from trainer.parallel.cuda_count import cuda_device_count
    from trainer.parallel.launch import RanksStopped, WorkersFailed, launch_workers
    from trainer.train.trainable import check_trainable

    if args.nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node: expected an integer >= 1, got {args.nproc_per_node}")
    cfg = resolve_config(args)
    cuda_devices = cuda_device_count()
    check_ranks_per_node(args.nproc_per_node, on_cpu=runs_on_cpu(cfg.training.device, cuda_devices),
                         cpu_cores=available_cores(), cuda_devices=cuda_devices)
    check_world_size(cfg, args.nproc_per_node * args.nnodes)  # before any worker starts
    check_trainable(cfg)
    check_run_emulation(cfg, cuda_devices)
    check_socket_ifnames(os.environ)  # the ranks inherit this environment
    if args.node_rank == 0:  # other nodes' agents join a run whose folder node 0 has made
        check_before_start(cfg, args.out, args.resume)
    argv = worker_argv(train_argv)
    out = args.out
    if out is None:
        out = default_run_dir(scene_path_of(cfg))
        argv += ["--out", str(out)]
    # stdout: stderr is for errors (one line each); the opening line even when quiet (a profile reads it)
    print(opening_line(cfg, args, args.nproc_per_node * args.nnodes, args.nproc_per_node), flush=True)
    if not cfg.training.quiet:
        print("\n".join(fit_lines(["each rank's log:", f"{RunDir(out).logs_dir}/rank<R>.log;",
                                    "rank 0's progress follows here"])), flush=True)
    follower = _rank0_follower(cfg, args, Path(out))
    try:
        with follower:
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
                env_extra=_console_prefix_env(args),
            )
    except WorkersFailed as exc:  # a rank failed or was stopped from outside (a signal to the ranks alone)
        from trainer.contract.resumption import newest_model, resume_block

        print_error(exc)
        model = newest_model(RunDir(out)) if args.node_rank == 0 else None
        if model is not None:  # what the run kept, and how to continue once the cause is dealt with
            print("\n".join(resume_block(RunDir(out), model, args.nproc_per_node, flags=resume_flags(train_argv))),
                  file=sys.stderr)
        return 2
    except (KeyboardInterrupt, RanksStopped) as exc:
        from trainer.contract.resumption import newest_model, resume_block

        # rank 0 said where it stopped (the follower repeated it); what was kept and how to continue is said here
        lines = resume_block(RunDir(out), newest_model(RunDir(out)), args.nproc_per_node,
                             flags=resume_flags(train_argv))
        how, code = ("interrupted", 130) if isinstance(exc, KeyboardInterrupt) else (
            f"terminated ({exc.signal_name})", 128 + signal.Signals[exc.signal_name].value)
        heading = fit_lines([f"{how}: the ranks were stopped;", f"logs in {RunDir(out).logs_dir}"])
        print("\n".join([*heading, *lines]), file=sys.stderr)
        if args.node_rank == 0:
            status_of_stopped_run(RunDir(out), how)
        return code
    status = (RunDir(out).read_status() if args.node_rank == 0 else None) or {}
    for line in summary_lines(status):
        print(line, flush=True)  # before the JSON line, which stays last
    # rank 0's status.json: the keys a one-process run ends with (another node has only the outcome)
    print(result_line({STATE_KEY: COMPLETED, **status, RUN_DIR_KEY: str(out)}, nproc_per_node=args.nproc_per_node))
    return 0


def status_of_stopped_run(run_dir: RunDir, how: str) -> None:
    """After the launcher stopped the ranks (``how``: ``interrupted`` or ``terminated (SIGTERM)``),
    ``status.json`` says so: rank 0 may have been cut off inside a collective by a peer that
    stopped first (a gloo or NCCL error, ``failed``) or before it wrote its end (``running``); such
    a status becomes ``interrupted``, the rank's own reason kept after the launcher's. Any other
    state (rank 0's own ``interrupted``, ``completed``, ``diverged``) stays as it is."""
    status = run_dir.read_status()
    if status is None or status.get(STATE_KEY) not in (RUNNING, FAILED):
        return
    reason = f"{how}: the launcher stopped the ranks"
    if status.get(REASON_KEY):
        reason += f" (rank 0 ended with: {status[REASON_KEY]})"
    try:
        run_dir.write_json(run_dir.status_path, {**status, **interrupted_fields(reason)})
    except OSError as exc:  # e.g. a full disk: the lines said how the run stopped
        print(f"warning: could not record the stop in {run_dir.status_path}: {exc}", file=sys.stderr, flush=True)


def _console_prefix_env(args: argparse.Namespace) -> dict[str, str]:
    """The ranks' environment that tells rank 0 what prefix its lines get on this console (node
    0 follows rank 0's log: :func:`_rank0_follower`), so it wraps them to fit; the other ranks
    drop it (:mod:`trainer.parallel.launch`)."""
    from trainer.contract.textlines import CONSOLE_PREFIX_ENV
    from trainer.parallel.rank_log import RANK0_PREFIX

    return {CONSOLE_PREFIX_ENV: RANK0_PREFIX} if args.node_rank == 0 else {}


def _rank0_follower(cfg: Any, args: argparse.Namespace, out: Path) -> Any:
    """On node 0, a :class:`~trainer.parallel.rank_log.RankLogFollower` of rank 0's log (emptied
    first: rank 0 starts it afresh, and an earlier run's lines must not be repeated); elsewhere a
    context that does nothing."""
    import contextlib

    from trainer.parallel.rank_log import RankLogFollower

    if args.node_rank != 0:
        return contextlib.nullcontext()
    log_path = RunDir(out).log_path(0)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("", encoding="utf-8")
    return RankLogFollower(log_path, cfg.training.n_steps, args.max_restarts,
                           plain=cfg.training.quiet or not sys.stdout.isatty())


def _config_endpoint(cfg: Any, nnodes: int) -> str | None:
    """``distributed.master_addr:master_port`` as the rendezvous of a multi-node job whose config
    fixes the port (one node picks a free local port itself)."""
    d = cfg.distributed
    return f"{d.master_addr}:{d.master_port}" if nnodes > 1 and d.master_port else None


def main(argv: Sequence[str] | None = None, prog: str = "python -m trainer") -> int:
    """``python -m trainer``: parse ``argv`` (default ``sys.argv[1:]``) and :func:`run_command`;
    a refused or failed launch prints its ``error: `` line and returns 2."""
    plain_warning_format()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_command_line(build_parser(prog), raw)
    args.resume_flags = resume_flags(raw)  # repeated by the command that continues a stopped run
    try:
        return run_command(args, raw)
    except TrainerError as exc:
        print_error(exc)
        return 2
