"""Training as one process: what one process of ``python -m trainer`` (:mod:`trainer.launch_cli`,
the front door that also launches ``--nproc-per-node`` ranks) does with its flags.

The config comes from the flags (:func:`trainer.run.settings.resolve_config`), ``--print-config``
prints it, and :func:`trainer.run.lifecycle.run_training` trains: one process, or one rank of a
job when the launcher's environment (torchrun / torch elastic / ``python -m trainer
--nproc-per-node``, or SLURM) reports several ranks or ``--resume`` names a folder of sharded
checkpoints. The last line on stdout is the run's status as one JSON object; bad input is one
``error: `` line on stderr and exit status 2; Ctrl-C exits 130 and SIGTERM 143, after
``status.json`` says interrupted (while the loop trains, either keeps a snapshot of the step under
way first: :mod:`trainer.run.interrupt`).

Flags instant-ngp users know are accepted as aliases: ``--scene``, ``--network``, ``--n_steps``,
``--save_snapshot``, ``--load_snapshot`` (:mod:`trainer.contract.commandline`).
"""

from __future__ import annotations

import argparse
import sys

from trainer.contract.commandline import add_train_arguments
from trainer.contract.config import dump_config
from trainer.contract.errors import TrainerError
from trainer.contract.runstatus import print_error, result_line, summary_lines
from trainer.contract.signals import signals_held
from trainer.run.lifecycle import run_training
from trainer.run.settings import config_source, resolve_config
from trainer.run.status import RunInterrupted, RunTerminated, Terminated, raise_terminated

__all__ = ["build_parser", "train_command"]


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The parser of one process's training flags (no launch flags: :func:`trainer.launch_cli.build_parser`)."""
    parser = argparse.ArgumentParser(prog=prog, description="Train an instant-NGP NeRF (one process).")
    add_train_arguments(parser)
    return parser


def train_command(args: argparse.Namespace) -> int:
    """Train one process (or one rank) as ``args`` say; returns the exit status (2 after an
    ``error: `` line, 130 interrupted, 143 terminated). Used by ``python -m trainer`` without
    ``--nproc-per-node`` (:func:`trainer.launch_cli.run_command`)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        cfg = resolve_config(args)
        if args.print_config:
            print(f"config: {config_source(args)}", file=sys.stderr)  # stdout stays a loadable config
            print(dump_config(cfg))
            return 0
        status = run_training(cfg, args)
    except TrainerError as exc:
        print_error(exc)
        return 2
    except KeyboardInterrupt as exc:
        where = str(exc) if isinstance(exc, RunInterrupted) else ""  # where the newest model is, how to continue
        with signals_held():
            print("interrupted" + (f": {where}" if where else ""), file=sys.stderr)
        return 130
    except Terminated as exc:
        where = str(exc) if isinstance(exc, RunTerminated) else ""  # where the newest model is, how to continue
        with signals_held():
            print("terminated" + (f": {where}" if where else ""), file=sys.stderr)
        return 143
    for line in summary_lines(status):
        print(line, flush=True)  # readable, before the JSON line that stays last
    print(result_line(status))
    return 0
